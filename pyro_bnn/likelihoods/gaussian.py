"""Regression likelihood with a fixed or learned noise scale."""

from __future__ import annotations

import math

import pyro.distributions as dist
import torch
from pyro.distributions import Distribution
from torch import nn

from pyro_bnn.likelihoods.base import KLScale, Likelihood


class Gaussian(Likelihood):
    """``y ~ Normal(output, scale^2)`` independently over the D output dimensions.

    Args:
        dataset_size: Number of training examples N.
        scale: Observation noise standard deviation (the initial value when learned).
        learn_scale: Learn the noise scale as a point estimate (a model parameter the trainer optimises).
        kl_scale: As in :class:`~pyro_bnn.likelihoods.Likelihood`.
    """

    def __init__(
        self,
        dataset_size: int,
        scale: float = 1.0,
        learn_scale: bool = False,
        kl_scale: KLScale | str = KLScale.DATASET,
    ) -> None:
        super().__init__(dataset_size, kl_scale)
        scale = float(scale)
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"Gaussian likelihood: scale must be a finite number > 0, got {scale!r}")
        log_scale = torch.tensor(math.log(scale))
        if learn_scale:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)

    @property
    def scale(self) -> torch.Tensor:
        """Noise standard deviation, a scalar tensor."""
        return self.log_scale.exp()

    def distribution(self, output: torch.Tensor) -> Distribution:
        return dist.Normal(output, self.scale).to_event(1)

    def check_targets(self, output: torch.Tensor, y: torch.Tensor) -> None:
        if not y.dtype.is_floating_point:
            raise ValueError(f"regression targets must be floating point, got {y.dtype}")
        if y.shape != output.shape[-2:]:
            raise ValueError(
                f"targets of shape {tuple(y.shape)} do not match network outputs of shape {tuple(output.shape[-2:])} "
                "(expected (B, D); reshape a 1-D target to (B, 1))"
            )

    def prediction_fields(self, output: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"means": output, "noise_scale": scale}``: predicted means ``(S, N, D)`` and the noise scale ``()``."""
        return {"means": output, "noise_scale": self.scale.detach()}
