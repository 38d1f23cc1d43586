"""Where a mean-field guide keeps its locations and scales, as flat ``(D,)`` vectors: the bridge between R ordinary
guides and the stacked ``(R, D)`` tensors a batched step trains.

A guide family that batches declares where, as data: a :class:`~pyro_bnn.guides.BatchedLayout` on its registry entry
and its guide class (:class:`~pyro_bnn.guides.BatchedPosterior`), naming the parameters that hold the locations and
raw scales (one flat pair, as :class:`~pyro_bnn.guides.FlatMeanField`'s ``loc`` and ``log_scale``,
``sigma = exp(log_scale)``; or a pair per site, as :class:`~pyro_bnn.guides.BayesByBackprop`'s ``mu`` and ``rho``,
``sigma = softplus(rho)``; or the locations alone, as the point estimates of
:class:`~pyro_bnn.guides.PointEstimateGuide`). :func:`guide_layout` interprets it: a :class:`GuideLayout` reads a
guide's values into flat vectors and writes flat vectors back into the guide's own parameters, so a run trained in a
batch leaves an ordinary guide behind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from pyro.distributions import constraints
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.capabilities import BatchedPosterior, ScaleMap
from pyro_bnn.guides.flat import FlatSite

__all__ = ["GuideLayout", "ScaleMap", "Segment", "guide_layout"]


@dataclass(frozen=True)
class Segment:
    """A run ``[start, stop)`` of the flat vectors held by one pair of the guide's parameters (same shape each; no
    raw scale for a point estimate; a mixture's ``(K, D)`` pair holds ``[0, D)`` of every component)."""

    start: int
    stop: int
    loc: nn.Parameter
    raw_scale: nn.Parameter | None


@dataclass(frozen=True)
class GuideLayout:
    """One guide's parameters as flat vectors of length D.

    Attributes:
        scale_map: How the raw scale becomes sigma (:attr:`~ScaleMap.POINT`: a point estimate, no raw scale).
        components: K for a mixture's ``(K, D)`` locations and raw scales, None for ``(D,)`` vectors.
        sites: The weight sites in the flat vectors, in the model's order (their slices and shapes).
        segments: The guide parameters covering ``[0, D)`` in order.
        empty: A ``(0,)`` tensor of the model's dtype and device: the flat vectors of a network without weight
            sites (a maximum-likelihood network, all of whose parameters are deterministic).
    """

    scale_map: ScaleMap
    sites: tuple[FlatSite, ...]
    segments: tuple[Segment, ...]
    empty: torch.Tensor
    components: int | None = None

    @property
    def point(self) -> bool:
        """Whether the guide is a point estimate (locations only)."""
        return self.scale_map is ScaleMap.POINT

    def read(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Copies of the flat ``(loc, raw_scale)``, both ``(D,)`` (``(K, D)`` for a mixture; raw_scale None for a
        point estimate)."""
        with torch.no_grad():
            loc = self._flat([s.loc for s in self.segments])
            raw = None if self.point else self._flat([s.raw_scale for s in self.segments])
        return loc, raw

    def _flat(self, params: list[nn.Parameter]) -> torch.Tensor:
        if self.components is not None:  # one (K, D) parameter
            return params[0].detach().clone()
        return torch.cat([p.reshape(-1) for p in params]) if params else self.empty.clone()

    @torch.no_grad()
    def write(self, loc: torch.Tensor, raw_scale: torch.Tensor | None) -> None:
        """Copies flat ``(D,)`` values (``(K, D)`` for a mixture) into the guide's parameters (raw_scale None for a
        point estimate)."""
        self.copy_in(loc, raw_scale)

    def copy_in(self, loc: torch.Tensor, raw_scale: torch.Tensor | None) -> None:
        """:meth:`write` for a caller already under ``torch.no_grad()`` (one context for many runs)."""
        for s in self.segments:
            s.loc.copy_(loc[..., s.start : s.stop].view_as(s.loc))
            if s.raw_scale is not None:
                s.raw_scale.copy_(raw_scale[..., s.start : s.stop].view_as(s.raw_scale))


def _real_sites(model: BNN) -> tuple[FlatSite, ...]:
    sites, start = [], 0
    for site in model.sites:
        numel = math.prod(site.shape)
        sites.append(
            FlatSite(site.name, start, start + numel, torch.Size(site.shape), len(site.shape), constraints.real)
        )
        start += numel
    return tuple(sites)


def guide_layout(guide: nn.Module, model: BNN) -> GuideLayout:
    """The flat layout of a set-up mean-field, point-estimate or node-noise mixture ``guide`` of ``model`` (a BNN
    without hyperpriors), from the :class:`~pyro_bnn.guides.BatchedLayout` the guide carries for its family.

    Raises:
        ValueError: The guide's family declares no batched layout (none of FlatMeanField, BayesByBackprop,
            PointEstimateGuide and NodeNoiseMixture), the guide has not run yet, or it covers other sites than the
            model's.
    """
    if not isinstance(guide, BatchedPosterior):
        raise ValueError(
            "batched runs train a FlatMeanField ('flat:...'), BayesByBackprop ('bbb'), point-estimate ('map', 'mle', "
            f"'mc-dropout') or NodeNoiseMixture ('mixture:K') guide, got {type(guide).__name__}"
        )
    name = type(guide).__name__
    if guide.prototype_trace is None:
        raise ValueError(f"the {name} guide has no parameters yet: run it once first")
    layout = guide.batched_layout
    sites = _real_sites(model)
    params = dict(guide.named_parameters())
    reference = next(iter(model.parameters()), None)
    empty = torch.zeros(0) if reference is None else reference.new_zeros(0)
    if not layout.per_site:  # one flat pair over the guide's sites, in the order it met them
        guide_sites = [site for site, _ in guide.prototype_trace.iter_stochastic_nodes()]
        if guide_sites != model.site_names:
            raise ValueError(
                f"the guide covers the sites {guide_sites[:4]}, the model's weights are {model.site_names[:4]}"
            )
        size = sites[-1].stop if sites else 0
        loc, raw = params.get(layout.loc), None if layout.point else params.get(layout.raw_scale)
        components = loc.shape[0] if layout.components and loc is not None and loc.dim() == 2 else None
        shape = (size,) if components is None else (components, size)
        if loc is None or loc.shape != shape or (not layout.point and (raw is None or raw.shape != shape)):
            wanted = repr(layout.loc) if layout.point else f"{layout.loc!r} and {layout.raw_scale!r}"
            expected = f"(K, {size})" if layout.components else f"({size},)"
            raise ValueError(f"the {name} guide has no {wanted} of shape {expected}")
        return GuideLayout(layout.scale_map, sites, (Segment(0, size, loc, raw),), empty, components)
    segments = []
    for site in sites:
        loc_name = layout.loc.format(site=site.name)
        raw_name = None if layout.point else layout.raw_scale.format(site=site.name)
        loc, raw = params.get(loc_name), None if raw_name is None else params.get(raw_name)
        if loc is None or loc.shape != site.shape or (raw_name is not None and raw is None):
            wanted = repr(loc_name) if raw_name is None else f"{loc_name!r} and {raw_name!r}"
            raise ValueError(f"the {name} guide has no {wanted} of shape {tuple(site.shape)} for {site.name!r}")
        segments.append(Segment(site.start, site.stop, loc, raw))
    if len(params) != (1 if layout.point else 2) * len(sites):
        raise ValueError(f"the {name} guide has sites the model's weights do not (a hierarchical prior?)")
    return GuideLayout(layout.scale_map, sites, tuple(segments), empty)
