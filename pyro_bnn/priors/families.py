"""Non-hierarchical weight priors: Normal, Laplace, Cauchy, flat and the Bayes-by-Backprop scale mixture."""

from __future__ import annotations

from collections.abc import Mapping

import pyro.distributions as dist
import torch
from pyro.distributions import Distribution, constraints

from pyro_bnn.priors.base import ParameterSite, Prior, elementwise, finite_buffer, positive_buffer, unit_number
from pyro_bnn.priors.mixture import ScaleMixtureNormal
from pyro_bnn.priors.selection import Select


class _LocScalePrior(Prior):
    """I.i.d. prior ``family(loc, scale)`` on every selected weight."""

    family: type[Distribution]

    def __init__(self, loc: float = 0.0, scale: float = 1.0, select: Select | None = None) -> None:
        super().__init__(select)
        finite_buffer(self, "loc", loc)
        positive_buffer(self, "scale", scale)

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        return elementwise(self.family, site.shape, self.loc, self.scale)

    def extra_repr(self) -> str:
        return f"loc={self.loc.item():g}, scale={self.scale.item():g}"


class NormalPrior(_LocScalePrior):
    """Every selected weight ~ Normal(loc, scale^2) (the usual N(0, 1) prior by default)."""

    family = dist.Normal


class LaplacePrior(_LocScalePrior):
    """Every selected weight ~ Laplace(loc, scale), the Bayesian counterpart of L1 regularisation."""

    family = dist.Laplace


class CauchyPrior(_LocScalePrior):
    """Every selected weight ~ Cauchy(loc, scale), a heavy-tailed prior."""

    family = dist.Cauchy


class FlatPrior(Prior):
    """The improper flat prior: log density 0 everywhere, so MAP under it is maximum likelihood.

    It cannot be sampled; guides initialise these sites from the network's own initial weights (``loc=median``,
    which draws from the prior, is refused with it).
    """

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        return dist.ImproperUniform(constraints.real, torch.Size(), site.shape)


class ScaleMixturePrior(Prior):
    """Bayes by Backprop's prior: ``pi N(0, sigma1^2) + (1 - pi) N(0, sigma2^2)`` on every selected weight.

    Args:
        pi: Weight of the broad component, in (0, 1) also as a float32.
        sigma1: Standard deviation of the broad component (> 0, a normal float32).
        sigma2: Standard deviation of the narrow component (e^-6 in Blundell et al.; > 0, a normal float32).
        select: Which parameters are random.
    """

    def __init__(
        self,
        pi: float = 0.5,
        sigma1: float = 1.0,
        sigma2: float = 0.0024787521766663585,
        select: Select | None = None,
    ) -> None:
        super().__init__(select)
        self.register_buffer("pi", torch.tensor(unit_number(pi, "ScaleMixturePrior: pi")))
        positive_buffer(self, "sigma1", sigma1)
        positive_buffer(self, "sigma2", sigma2)

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        return elementwise(ScaleMixtureNormal, site.shape, self.pi, self.sigma1, self.sigma2)

    def extra_repr(self) -> str:
        return f"pi={self.pi.item():g}, sigma1={self.sigma1.item():g}, sigma2={self.sigma2.item():g}"
