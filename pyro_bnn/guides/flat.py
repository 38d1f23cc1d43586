"""A mean-field Normal guide whose parameters are two flat vectors over every latent site.

:class:`FlatMeanField` is the variational family of Pyro's :class:`~pyro.infer.autoguide.AutoNormal` (each latent
``z ~ Normal(loc, scale)`` in its unconstrained space, independent over every scalar) with a different storage:
one location vector and one log-scale vector of length D (all latent scalars), and per-site views into them. As a
Pyro guide it samples every site like any other; a fused objective (:class:`~pyro_bnn.infer.FastMeanFieldELBO`)
instead draws all D weights with one random draw and one ``exp`` and hands the views to the network.

The scale is ``exp(log_scale)`` rather than AutoNormal's ``softplus(rho)``: on a 2-core CPU ``softplus`` and its
gradient over the 2.8 M weights of the 3FC network take about 20 ms more per step than ``exp`` (not vectorised
there), and the KL needs ``log scale``, which is then the parameter itself. The two maps agree to first order where
the scale is small (``softplus(rho) = exp(rho) (1 + O(exp(rho)))``) and differ for scales near 1, so Adam's steps
in the scales differ there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median
from pyro.infer.autoguide.utils import helpful_support_errors
from torch import nn
from torch.distributions import biject_to

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_float32
from pyro_bnn.guides.capabilities import BatchedLayout, ScaleMap
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.inspect import NormalQuantiles
from pyro_bnn.rng import standard_normal


def _is_real(support: constraints.Constraint) -> bool:
    """True for the real line, also when wrapped as ``independent(real, n)`` (a weight tensor's support)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


@dataclass(frozen=True)
class FlatSite:
    """Where one latent site lives in the flat vectors.

    Attributes:
        name: The sample site's name (``"0.weight"``).
        start: First index of the site's scalars in the flat vectors.
        stop: One past the last index (``stop - start`` scalars).
        shape: The site's unconstrained shape (a weight's own shape).
        event_dim: Dimensions of ``shape`` that form the site's event (all of them for a weight).
        support: The site's support in the model; real for weights, e.g. positive for a layer scale.
    """

    name: str
    start: int
    stop: int
    shape: torch.Size
    event_dim: int
    support: constraints.Constraint

    @property
    def numel(self) -> int:
        """Number of scalars of the site."""
        return self.stop - self.start

    @property
    def is_real(self) -> bool:
        """Whether the site's support is the real line (sampled directly, with no transform)."""
        return _is_real(self.support)


def split_sites(sites: tuple[FlatSite, ...], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-site views ``{site name: (*lead, *site_shape)}`` of a flat tensor ``(*lead, D)`` laid out as ``sites``."""
    lead = flat.shape[:-1]
    # torch.split, not one slice per site: its backward is one cat, where every slice's backward would write a
    # zero-filled tensor of all D scalars.
    pieces = flat.split([site.numel for site in sites], dim=-1)
    return {site.name: piece.reshape(lead + site.shape) for site, piece in zip(sites, pieces, strict=True)}


class FlatMeanField(NormalQuantiles, AutoGuide):
    """Mean-field Normal guide over every latent site, stored as two flat vectors of length D.

    ``q(z) = prod_i Normal(z_i; loc_i, exp(log_scale_i))`` in each site's unconstrained space, the family of Pyro's
    :class:`~pyro.infer.autoguide.AutoNormal` (which parameterises its scales by ``softplus`` instead), initialised
    the same way: locations from ``init_loc_fn`` and an absolute initial scale or, with ``relative_scale``,
    ``relative_scale * std(initial locations)`` per tensor as :class:`~pyro_bnn.guides.RelativeScaleNormal` does.
    Under the same seed it starts from the locations and scales those guides start from (scales to float rounding).

    The parameters are ``loc`` and ``log_scale``, both ``(D,)``; :attr:`sites` says where each site lives in them.
    Real-valued sites (weights) are sampled from ``Normal(loc_view, exp(log_scale_view))`` directly (so
    :class:`~pyro_bnn.infer.MeanFieldELBO` uses the analytic KL); constrained sites (a hierarchical layer scale) get
    the Normal pushed through ``biject_to(support)``. Only global sites are covered: a model with per-example latent
    sites (inside the data plate) is refused when the guide first runs.

    Args:
        model: The Pyro model (a :class:`pyro_bnn.BNN`).
        init_loc_fn: Initial values of the sites, e.g. :class:`~pyro_bnn.guides.init_to_network` or Pyro's
            ``init_to_median(num_samples=15)``. Default: the network's own initial weights for a BNN (other sites
            at the prior median), the prior median for another model.
        init_scale: Initial scale of every site (> 0, a normal float32); with ``relative_scale``, the scale of a
            tensor whose initial values are all equal (std 0), as ``RelativeScaleNormal``'s ``fallback_scale``.
        relative_scale: c in ``sigma0 = c * std(loc0)`` per tensor (> 0, a normal float32), or None for the
            absolute ``init_scale``.

    Shapes:
        ``loc``, ``log_scale``, :meth:`flat_loc_scale`: ``(D,)`` with D = :attr:`num_latents`; :meth:`split` maps
        ``(*lead, D)`` to ``{site: (*lead, *site_shape)}``.

    Example:
        >>> guide = FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), relative_scale=0.1)
    """

    batched_layout = BatchedLayout(ScaleMap.EXP, loc="loc", raw_scale="log_scale")
    """Batched runs stack ``loc`` and ``log_scale`` whole (:class:`~pyro_bnn.guides.capabilities.BatchedLayout`)."""

    def __init__(
        self,
        model: Callable,
        *,
        init_loc_fn: Callable[[dict], torch.Tensor] | None = None,
        init_scale: float = 0.1,
        relative_scale: float | None = None,
    ) -> None:
        # Both end up in float32 scales: a number float32 cannot hold would start every sigma at 0 or inf.
        self.init_scale = positive_float32(init_scale, "init_scale")
        self.relative_scale = None if relative_scale is None else positive_float32(relative_scale, "relative_scale")
        if init_loc_fn is None:
            init_loc_fn = init_to_network(model) if isinstance(model, BNN) else init_to_median
        self.init_loc_fn = init_loc_fn
        self.sites: tuple[FlatSite, ...] = ()
        super().__init__(InitMessenger(init_loc_fn)(model))

    # ------------------------------------------------------------------------------------------------ set-up
    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        sites, locs, log_scales, start = [], [], [], 0
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            frames = [frame.name for frame in site["cond_indep_stack"]]
            if frames:
                raise ValueError(
                    f"FlatMeanField covers global latent sites only, but {name!r} lies in plate(s) {frames} "
                    "(a per-example latent); guide it with a shared or amortised guide that opens the data plate "
                    "itself (docs/guides.md), or with autonormal and the whole training set in every batch"
                )
            with helpful_support_errors(site):
                init_loc = biject_to(site["fn"].support).inv(site["value"].detach()).detach()
            event_dim = site["fn"].event_dim + init_loc.dim() - site["value"].dim()
            # Built per tensor exactly as AutoNormal / RelativeScaleNormal build theirs, so the values agree bitwise.
            scale = self.init_scale
            if self.relative_scale is not None:
                spread = float(init_loc.std()) if init_loc.numel() > 1 else 0.0
                if spread != 0.0:
                    scale = self.relative_scale * spread
            init_log_scale = torch.full_like(init_loc, math.log(scale))
            sites.append(FlatSite(name, start, start + init_loc.numel(), init_loc.shape, event_dim, site["fn"].support))
            locs.append(init_loc.reshape(-1))
            log_scales.append(init_log_scale.reshape(-1))
            start += init_loc.numel()
        if not sites:
            raise ValueError("FlatMeanField found no latent site in the model (is any parameter random?)")
        self.sites = tuple(sites)
        self.loc = nn.Parameter(torch.cat(locs))
        self.log_scale = nn.Parameter(torch.cat(log_scales))

    # ------------------------------------------------------------------------------------------ flat access
    @property
    def num_latents(self) -> int:
        """D, the number of latent scalars (the length of ``loc`` and ``log_scale``)."""
        return self.sites[-1].stop if self.sites else 0

    @property
    def site_names(self) -> list[str]:
        """Names of the latent sites, in the order they occupy the flat vectors."""
        return [site.name for site in self.sites]

    def flat_loc_scale(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The flat location and scale ``exp(log_scale)``, both ``(D,)`` and live (gradients reach the parameters).

        Raises:
            ValueError: The guide has not been run yet.
        """
        self._set_up()
        return self.loc, self.log_scale.exp()

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-site views of a flat tensor.

        Args:
            flat: ``(*lead, D)``, e.g. weights drawn for P particles as ``(P, 1, D)``.

        Returns:
            ``{site name: (*lead, *site_shape)}``, views into ``flat`` where its layout allows (always for a
            contiguous ``flat``).
        """
        return split_sites(self.sites, flat)

    def loc_scale(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each latent site's variational loc and scale = exp(log_scale), in the site's unconstrained space.

        The tensors are live views: gradients flow back to ``loc`` and ``log_scale`` (detach them to keep values).

        Returns:
            ``{site name: (loc, scale)}``, both of the site's unconstrained shape.

        Raises:
            ValueError: The guide has not been run yet, so it has no parameters.
        """
        loc, scale = self.flat_loc_scale()
        locs, scales = self.split(loc), self.split(scale)
        return {name: (locs[name], scales[name]) for name in locs}

    # ------------------------------------------------------------------------------------------- Pyro guide
    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Samples every latent site (one ``pyro.sample`` per site); returns ``{site name: value}``.

        Every site is global, so there is no plate to enter; an outer sample plate (vectorised particles,
        predictive sampling) broadcasts each draw to ``(S, 1, *site_shape)``.
        """
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        locs, scales = self.split(self.loc), self.split(self.log_scale.exp())
        result = {}
        for site in self.sites:
            q = dist.Normal(locs[site.name], scales[site.name]).to_event(site.event_dim)
            if site.is_real:
                result[site.name] = pyro.sample(site.name, q)
            else:
                # A transformed Normal keeps the log-Jacobian inside log q (as BayesByBackprop does).
                result[site.name] = pyro.sample(site.name, dist.TransformedDistribution(q, biject_to(site.support)))
        return result

    def flat_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The trained leaves ``(loc, log_scale)``, both ``(D,)`` (what the fused objective differentiates).

        Raises:
            ValueError: The guide has not been run yet.
        """
        self._set_up()
        return self.loc, self.log_scale

    @torch.no_grad()
    def draw(self, num_samples: int, *, start: int = 0) -> dict[str, torch.Tensor]:
        """``num_samples`` independent draws of every latent site, without Pyro: one standard normal draw of
        ``(S, D)`` values (:func:`pyro_bnn.rng.standard_normal`) scaled and shifted, then per-site views
        pushed into each site's support. The same distribution as running the guide under a sample plate, at the
        cost of the random numbers and one pass over them.

        Args:
            num_samples: S.
            start: Ignored (the draws are independent); part of the
                :class:`~pyro_bnn.guides.capabilities.DrawsPosterior` protocol.

        Returns:
            ``{site name: (S, 1, *site_shape)}`` (:mod:`pyro_bnn.sites`: the 1 is the data plate's slot).

        Raises:
            ValueError: The guide has not been run yet.
        """
        self._set_up()
        loc, log_scale = self.loc, self.log_scale
        values = standard_normal((num_samples, 1, self.num_latents), dtype=loc.dtype, device=loc.device)
        torch.addcmul(loc, values, log_scale.exp(), out=values)  # in place: one pass over the S * D values
        return {
            site: value if site_info.is_real else biject_to(site_info.support)(value)
            for (site, value), site_info in zip(self.split(values).items(), self.sites, strict=True)
        }

    @torch.no_grad()
    def median(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Each latent site's posterior median in the site's own (constrained) space: ``biject_to(support)(loc)``.

        Args:
            *args: The model's arguments, needed only when the guide has not run yet.
            **kwargs: Likewise.

        Returns:
            ``{site name: median}`` with tensors of the site's shape, detached copies.
        """
        self._set_up(*args, **kwargs)
        locs = self.split(self.loc.detach())
        return {site.name: biject_to(site.support)(locs[site.name]).clone() for site in self.sites}

    def extra_repr(self) -> str:
        if not self.sites:
            return "not set up"
        return f"{len(self.sites)} sites, {self.num_latents:,} latent scalars"
