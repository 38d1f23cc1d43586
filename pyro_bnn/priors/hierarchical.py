"""Hierarchical priors: one scale per layer with its own hyperprior."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

import pyro.distributions as dist
import torch
from pyro.distributions import Distribution

from pyro_bnn.checks import enum_member, holds_values
from pyro_bnn.priors.base import ParameterSite, Prior, elementwise, positive_buffer
from pyro_bnn.priors.selection import Select


class WeightFamily(str, Enum):
    """Distribution family of the weights given their layer's scale."""

    NORMAL = "normal"
    """w ~ Normal(0, scale^2)."""
    LAPLACE = "laplace"
    """w ~ Laplace(0, scale)."""
    CAUCHY = "cauchy"
    """w ~ Cauchy(0, scale)."""


class Hyperprior(str, Enum):
    """Prior on a layer's weight scale."""

    HALF_NORMAL = "halfnormal"
    """scale ~ HalfNormal(s); one argument s."""
    HALF_CAUCHY = "halfcauchy"
    """scale ~ HalfCauchy(s); one argument s."""
    INVERSE_GAMMA = "inversegamma"
    """scale^2 ~ InverseGamma(concentration, rate), the conjugate prior on a Normal's variance; two arguments.
    The latent site is then ``"<layer>.prior_variance"``."""
    FIXED = "fixed"
    """scale is the given constant (a delta hyperprior); one argument."""


_FAMILIES = {
    WeightFamily.NORMAL: dist.Normal,
    WeightFamily.LAPLACE: dist.Laplace,
    WeightFamily.CAUCHY: dist.Cauchy,
}
_ARITY = {
    Hyperprior.HALF_NORMAL: 1,
    Hyperprior.HALF_CAUCHY: 1,
    Hyperprior.INVERSE_GAMMA: 2,
    Hyperprior.FIXED: 1,
}


class HierarchicalPrior(Prior):
    """Weights ``w ~ family(0, s_l)`` with one scale ``s_l`` per layer and a hyperprior on it.

    Each layer with a selected parameter gets a latent site ``"<layer>.prior_scale"`` (``"<layer>.prior_variance"``
    for the inverse-gamma hyperprior, which is on the variance) that the guide learns a posterior over, shared by
    that layer's weight and bias; with ``Hyperprior.FIXED`` the scale is a constant and there is no such site, which
    recovers the plain prior.

    Args:
        family: Weight family given the scale (``"normal"``, ``"laplace"``, ``"cauchy"``).
        hyperprior: Prior on the scale (``"halfnormal"``, ``"halfcauchy"``, ``"inversegamma"``, ``"fixed"``).
        hyperparameters: Its arguments, a sequence of numbers > 0 that float32 holds: ``(s,)`` for half-normal,
            half-Cauchy and fixed, ``(concentration, rate)`` for inverse-gamma.
        select: Which parameters are random.
    """

    def __init__(
        self,
        family: str | WeightFamily = WeightFamily.NORMAL,
        hyperprior: str | Hyperprior = Hyperprior.HALF_NORMAL,
        hyperparameters: Sequence[float] = (1.0,),
        select: Select | None = None,
    ) -> None:
        super().__init__(select)
        self.family = enum_member(WeightFamily, family, "weight family")
        self.hyperprior = enum_member(Hyperprior, hyperprior, "hyperprior")
        # any iterable of numbers (a tuple, a list, an array, a tensor); a bare number, a 0-d array or a string is
        # the slip this refuses
        if not holds_values(hyperparameters):
            raise ValueError(
                f"HierarchicalPrior: hyperparameters must be a sequence of numbers such as (1.0,) or (2.0, 2.0), "
                f"got {hyperparameters!r}"
            )
        hyperparameters = tuple(hyperparameters)
        if len(hyperparameters) != _ARITY[self.hyperprior]:
            raise ValueError(
                f"hyperprior {self.hyperprior.value!r} takes {_ARITY[self.hyperprior]} argument(s), "
                f"got {hyperparameters!r}"
            )
        for i, value in enumerate(hyperparameters):
            positive_buffer(self, f"hyper_{i}", value)
        self.register_buffer("zero", torch.tensor(0.0))

    def layer_hyperpriors(self, layer: str) -> dict[str, Distribution]:
        if self.hyperprior is Hyperprior.HALF_NORMAL:
            return {"scale": dist.HalfNormal(self.hyper_0)}
        if self.hyperprior is Hyperprior.HALF_CAUCHY:
            return {"scale": dist.HalfCauchy(self.hyper_0)}
        if self.hyperprior is Hyperprior.INVERSE_GAMMA:
            return {"variance": dist.InverseGamma(self.hyper_0, self.hyper_1)}
        return {}

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        if self.hyperprior is Hyperprior.FIXED:
            scale = self.hyper_0
        elif "scale" in hyper:
            scale = hyper["scale"]
        elif "variance" in hyper:
            scale = hyper["variance"].sqrt()
        else:
            raise ValueError(
                f"the prior of {site.name!r} depends on its layer's sampled {list(self.layer_hyperpriors(site.layer))} "
                "value; pass it as hyper={...}"
            )
        return elementwise(_FAMILIES[self.family], site.shape, self.zero, scale)

    def extra_repr(self) -> str:
        args = ", ".join(f"{getattr(self, f'hyper_{i}').item():g}" for i in range(_ARITY[self.hyperprior]))
        return f"family={self.family.value}, hyperprior={self.hyperprior.value}({args})"
