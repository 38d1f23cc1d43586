"""The scale-mixture prior of Bayes by Backprop as an element-wise distribution."""

from __future__ import annotations

import math

import torch
from pyro.distributions import TorchDistribution, constraints
from torch.distributions.utils import broadcast_all


class ScaleMixtureNormal(TorchDistribution):
    """Element-wise mixture of two zero-mean Normals: ``pi * N(0, sigma1^2) + (1 - pi) * N(0, sigma2^2)``.

    Blundell et al. (2015) use ``pi = 0.5, sigma1 = 1, sigma2 = e^-6``: a broad component plus a spike near 0.

    Args:
        pi: Weight of the first component, in (0, 1); any broadcastable shape.
        sigma1: Standard deviation of the first component, > 0.
        sigma2: Standard deviation of the second component, > 0.
    """

    arg_constraints = {
        "pi": constraints.unit_interval,
        "sigma1": constraints.positive,
        "sigma2": constraints.positive,
    }
    support = constraints.real
    has_rsample = False

    def __init__(self, pi, sigma1, sigma2, validate_args=None) -> None:
        self.pi, self.sigma1, self.sigma2 = broadcast_all(pi, sigma1, sigma2)
        super().__init__(self.pi.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ScaleMixtureNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.pi = self.pi.expand(batch_shape)
        new.sigma1 = self.sigma1.expand(batch_shape)
        new.sigma2 = self.sigma2.expand(batch_shape)
        super(ScaleMixtureNormal, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        half_log_2pi = 0.5 * math.log(2 * math.pi)
        log_n1 = -0.5 * (value / self.sigma1) ** 2 - self.sigma1.log() - half_log_2pi
        log_n2 = -0.5 * (value / self.sigma2) ** 2 - self.sigma2.log() - half_log_2pi
        return torch.logaddexp(self.pi.log() + log_n1, torch.log1p(-self.pi) + log_n2)

    @torch.no_grad()
    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:  # noqa: B008  (torch.distributions signature)
        shape = self._extended_shape(sample_shape)
        first = torch.rand(shape, dtype=self.pi.dtype, device=self.pi.device) < self.pi.expand(shape)
        scale = torch.where(first, self.sigma1.expand(shape), self.sigma2.expand(shape))
        return torch.randn(shape, dtype=scale.dtype, device=scale.device) * scale

    @property
    def mean(self) -> torch.Tensor:
        return torch.zeros_like(self.pi)

    @property
    def variance(self) -> torch.Tensor:
        return self.pi * self.sigma1**2 + (1 - self.pi) * self.sigma2**2
