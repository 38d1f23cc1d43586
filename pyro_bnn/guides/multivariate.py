"""Correlated Normal guides over all weights together: a low-rank-plus-diagonal and a full covariance.

Both are Pyro's own guides (:class:`~pyro.infer.autoguide.AutoLowRankMultivariateNormal`,
:class:`~pyro.infer.autoguide.AutoMultivariateNormal`): one Normal over the flat vector of all D latent scalars, in
each site's unconstrained space, sampled as one auxiliary site and handed to the model's sites as views. What this
module adds is the BNN's own starting point (:class:`~pyro_bnn.guides.init_to_network` instead of Pyro's prior
median), checked options, and :meth:`loc_scale` (each scalar's marginal mean and standard deviation, read from the
posterior's public ``mean`` and ``variance``), so that weight statistics, pruning and the NUTS comparison read them
like any Normal guide's (:func:`~pyro_bnn.guides.posterior_loc_scale`).

Cost in D (the number of random weights): the low-rank guide stores ``D (R + 2)`` numbers and samples in
``O(D R)``; the full covariance stores ``D (D + 2)`` and samples in ``O(D^2)``, so it refuses networks above
:data:`MAX_FULL_COVARIANCE_WEIGHTS` weights (:func:`check_full_covariance_size`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from pyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoMultivariateNormal
from pyro.infer.autoguide.utils import helpful_support_errors
from torch.distributions import biject_to

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_float32, positive_int
from pyro_bnn.guides.capabilities import Capability
from pyro_bnn.guides.flat import FlatSite, split_sites
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.inspect import SetUpOnDemand
from pyro_bnn.guides.registry import GuideFamily
from pyro_bnn.spec import Arg, Form, Integer, Positive

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec

MAX_FULL_COVARIANCE_WEIGHTS = 4096
"""Most random weights the ``mvn`` guide takes: its covariance factor has D^2 entries (4096^2 = 16.8 M numbers,
67 MB in float32, about 200 MB with Adam's two moments) and every step multiplies by it. Larger networks take the
``lowrank`` guide."""

DEFAULT_RANK = 10
"""Rank R of the ``lowrank`` guide unless told otherwise. Pyro's own default, ``round(sqrt(D))``, would store
``D^1.5`` numbers: 4.7 G for the 2.8 M weights of the 3FC network."""


def latent_layout(prototype_trace) -> tuple[FlatSite, ...]:
    """Where each latent site lives in the flat latent vector of a Pyro ``AutoContinuous`` guide.

    The order is the trace's (``iter_stochastic_nodes``), the order in which ``AutoContinuous`` packs the sites; the
    shapes are the unconstrained ones (``biject_to(support).inv(value)``).

    Args:
        prototype_trace: The guide's ``prototype_trace`` (the model traced once).

    Returns:
        One :class:`~pyro_bnn.guides.FlatSite` per latent site, their ``(start, stop)`` tiling ``0 .. D``.

    Raises:
        ValueError: A latent site lies inside a plate (a per-example latent): one joint Normal over all of them
            would grow with the data set and be refit on every minibatch.
    """
    sites, start = [], 0
    for name, site in prototype_trace.iter_stochastic_nodes():
        frames = [frame.name for frame in site["cond_indep_stack"]]
        if frames:
            raise ValueError(
                f"a joint guide over all weights covers global latent sites only, but {name!r} lies in plate(s) "
                f"{frames} (a per-example latent); guide it with a shared or amortised guide that opens the data "
                "plate itself (docs/guides.md), or with autonormal and the whole training set in every batch"
            )
        with helpful_support_errors(site):
            shape = biject_to(site["fn"].support).inv(site["value"].detach()).shape
        event_dim = site["fn"].event_dim + len(shape) - site["value"].dim()
        sites.append(FlatSite(name, start, start + shape.numel(), shape, event_dim, site["fn"].support))
        start += shape.numel()
    return tuple(sites)


def check_full_covariance_size(num_weights: int, limit: int = MAX_FULL_COVARIANCE_WEIGHTS) -> None:
    """Refuses a network too large for a D x D covariance, before any memory is taken.

    Args:
        num_weights: D, the network's random weights (:meth:`pyro_bnn.BNN.num_random_parameters`).
        limit: The largest D accepted.

    Raises:
        ValueError: One line naming D, the limit and the ``lowrank`` guide.
    """
    if num_weights > limit:
        raise ValueError(
            f"the mvn guide holds a D x D covariance and this network has D={num_weights:,} random weights, above "
            f"its limit of {limit:,}; use the lowrank guide (e.g. lowrank:rank={DEFAULT_RANK}) for this network"
        )


def check_init_scale(init_scale: float) -> float:
    """``init_scale`` as a float, or a one-line ValueError when it is not a finite number > 0 that float32 holds
    (the guides' scales are float32: 1e-50 would start them at 0)."""
    return positive_float32(init_scale, "init_scale")


def default_init_loc_fn(model: Callable, init_loc_fn: Callable | None) -> Callable:
    """``init_loc_fn`` when given, else the network's own initial weights (a BNN) or a one-line ValueError."""
    if init_loc_fn is not None:
        return init_loc_fn
    if isinstance(model, BNN):
        return init_to_network(model)
    raise ValueError("init_loc_fn is required for a model that is not a pyro_bnn.BNN")


class _Marginals(SetUpOnDemand):
    """Per-site marginal locations and scales of a Normal over the flat latent vector (mixed into the guides
    below, ahead of the Pyro guide it reads ``get_posterior()`` from)."""

    latent_sites: tuple[FlatSite, ...] = ()

    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        self.latent_sites = latent_layout(self.prototype_trace)

    def median(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Pyro's posterior median of each latent site (its location pushed into the site's support); the model's
        arguments are needed only when the guide has not run yet."""
        self._set_up(*args, **kwargs)
        return super().median(*args, **kwargs)

    def quantiles(self, quantiles: torch.Tensor | list[float], *args, **kwargs) -> dict[str, torch.Tensor]:
        """Pyro's marginal quantiles of each latent site, ``{site: (q, *site_shape)}``; the model's arguments are
        needed only when the guide has not run yet."""
        self._set_up(*args, **kwargs)
        return super().quantiles(quantiles, *args, **kwargs)

    def loc_scale(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each latent site's marginal mean and standard deviation, in the site's unconstrained space.

        The marginals of a multivariate Normal are Normal, so these are exact (the correlations are left out).
        Live tensors: gradients reach the guide's parameters (detach them to keep values).

        Returns:
            ``{site name: (loc, scale)}``, both of the site's unconstrained shape.

        Raises:
            ValueError: The guide has not been run yet.
        """
        if self.prototype_trace is None:
            raise ValueError(f"{type(self).__name__} has no parameters yet: run it (or train) once before reading them")
        posterior = self.get_posterior()
        locs = split_sites(self.latent_sites, posterior.mean)
        scales = split_sites(self.latent_sites, posterior.variance.sqrt())
        return {name: (locs[name], scales[name]) for name in locs}


class LowRankNormal(_Marginals, AutoLowRankMultivariateNormal):
    """``q(z) = Normal(loc, W W^T + diag(d^2))`` over all D latent scalars, with a D x R factor W: Pyro's
    :class:`~pyro.infer.autoguide.AutoLowRankMultivariateNormal`, started at the network's own weights.

    R directions of correlation between any weights (e.g. the strongly negative correlation of two weights on
    nearly collinear inputs) at ``O(D R)`` cost. Pyro parameterises ``W = d * cov_factor`` and ``d`` through a
    softplus, and starts ``cov_factor`` at ``N(0, 1/R)``, so that every scalar's initial standard deviation is about
    ``init_scale``.

    Args:
        model: The Pyro model (a :class:`~pyro_bnn.BNN`).
        rank: R >= 1.
        init_loc_fn: Initial locations; default the network's initial weights
            (:class:`~pyro_bnn.guides.init_to_network`).
        init_scale: About the initial marginal standard deviation of every scalar (> 0).

    Shapes:
        ``loc``, ``scale``: ``(D,)``; ``cov_factor``: ``(D, R)``; :meth:`loc_scale`:
        ``{site: (site_shape, site_shape)}``.
    """

    def __init__(
        self,
        model: Callable,
        *,
        rank: int = DEFAULT_RANK,
        init_loc_fn: Callable | None = None,
        init_scale: float = 0.1,
    ) -> None:
        rank = positive_int(rank, "rank")
        init_scale = check_init_scale(init_scale)
        super().__init__(model, init_loc_fn=default_init_loc_fn(model, init_loc_fn), init_scale=init_scale, rank=rank)


class FullCovarianceNormal(_Marginals, AutoMultivariateNormal):
    """``q(z) = Normal(loc, L L^T)`` over all D latent scalars, with a full lower-triangular L: Pyro's
    :class:`~pyro.infer.autoguide.AutoMultivariateNormal`, started at the network's own weights.

    Every correlation between every pair of weights, at ``O(D^2)`` memory and cost per step; meant for small
    networks (the guide family refuses more than :data:`MAX_FULL_COVARIANCE_WEIGHTS` weights). Pyro parameterises
    ``L = diag(scale) L1`` with a unit lower-triangular ``L1`` that starts at the identity, so the initial
    posterior is ``Normal(loc, init_scale^2 I)``.

    Args:
        model: The Pyro model (a :class:`~pyro_bnn.BNN`).
        init_loc_fn: Initial locations; default the network's initial weights
            (:class:`~pyro_bnn.guides.init_to_network`).
        init_scale: Initial standard deviation of every scalar (> 0).

    Shapes:
        ``loc``, ``scale``: ``(D,)``; ``scale_tril``: ``(D, D)``; :meth:`loc_scale`:
        ``{site: (site_shape, site_shape)}``.
    """

    def __init__(self, model: Callable, *, init_loc_fn: Callable | None = None, init_scale: float = 0.1) -> None:
        init_scale = check_init_scale(init_scale)
        super().__init__(model, init_loc_fn=default_init_loc_fn(model, init_loc_fn), init_scale=init_scale)


# ------------------------------------------------------------------------------------------- guide families
_SCALE_ARG = Arg("init scale", Positive(float32=True), 0.1)


def _build_lowrank(spec: GuideSpec, bnn: BNN) -> LowRankNormal:
    options = spec.options
    return LowRankNormal(bnn, rank=options["rank"], init_scale=options["init scale"], init_loc_fn=init_to_network(bnn))


def _build_mvn(spec: GuideSpec, bnn: BNN) -> FullCovarianceNormal:
    check_full_covariance_size(bnn.num_random_parameters())
    return FullCovarianceNormal(bnn, init_scale=spec.options["init scale"], init_loc_fn=init_to_network(bnn))


LOWRANK_FAMILY = GuideFamily(
    Form(
        "lowrank",
        (_SCALE_ARG,),
        (Arg("rank", Integer(minimum=1), DEFAULT_RANK, metavar="R"),),
        example="lowrank:0.05,rank=5",
        doc=(
            "A Normal over all weights with covariance W W^T + diag(d^2), W of rank R (LowRankNormal). INIT_SCALE is "
            "about each weight's initial standard deviation; the locations start at the network's weights; cost "
            "O(D R) in the D random weights."
        ),
    ),
    build=_build_lowrank,
    capabilities={Capability.RANDOM, Capability.NORMAL_SCALES, Capability.JACOBIAN_DELTA},  # AutoContinuous
)
"""``--guide lowrank[:INIT_SCALE][,rank=R]`` (registered in :mod:`pyro_bnn.guides.spec`)."""

MVN_FAMILY = GuideFamily(
    Form(
        "mvn",
        (_SCALE_ARG,),
        example="mvn:0.05",
        doc=(
            "A Normal over all weights with a full covariance (FullCovarianceNormal). INIT_SCALE is each weight's "
            f"initial standard deviation; cost O(D^2), so networks above {MAX_FULL_COVARIANCE_WEIGHTS} random weights "
            "are refused (use lowrank)."
        ),
    ),
    build=_build_mvn,
    capabilities={Capability.RANDOM, Capability.NORMAL_SCALES, Capability.JACOBIAN_DELTA},  # AutoContinuous
    check=lambda spec, num_weights: check_full_covariance_size(num_weights),
)
"""``--guide mvn[:INIT_SCALE]`` (registered in :mod:`pyro_bnn.guides.spec`)."""
