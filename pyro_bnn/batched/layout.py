"""Where a mean-field guide keeps its locations and scales, as flat ``(D,)`` vectors: the bridge between R ordinary
guides and the stacked ``(R, D)`` tensors a batched step trains.

A guide family that batches declares where, as data: a :class:`~pyro_bnn.guides.BatchedLayout` on its registry entry
and its guide class (:class:`~pyro_bnn.guides.BatchedPosterior`), naming the parameters that hold the locations and
raw scales (one flat pair, as :class:`~pyro_bnn.guides.FlatMeanField`'s ``loc`` and ``log_scale``,
``sigma = exp(log_scale)``; or a pair per site, as :class:`~pyro_bnn.guides.BayesByBackprop`'s ``mu`` and ``rho``,
``sigma = softplus(rho)``). :func:`guide_layout` interprets it: a :class:`GuideLayout` reads a guide's values into
flat vectors and writes flat vectors back into the guide's own parameters, so a run trained in a batch leaves an
ordinary guide behind.
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
    """A run ``[start, stop)`` of the flat vectors held by one pair of the guide's parameters (same shape each)."""

    start: int
    stop: int
    loc: nn.Parameter
    raw_scale: nn.Parameter


@dataclass(frozen=True)
class GuideLayout:
    """One guide's parameters as flat vectors of length D.

    Attributes:
        scale_map: How the raw scale becomes sigma.
        sites: The weight sites in the flat vectors, in the model's order (their slices and shapes).
        segments: The guide parameters covering ``[0, D)`` in order.
    """

    scale_map: ScaleMap
    sites: tuple[FlatSite, ...]
    segments: tuple[Segment, ...]

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of the flat ``(loc, raw_scale)``, both ``(D,)``."""
        with torch.no_grad():
            loc = torch.cat([s.loc.reshape(-1) for s in self.segments])
            raw = torch.cat([s.raw_scale.reshape(-1) for s in self.segments])
        return loc.clone(), raw.clone()

    @torch.no_grad()
    def write(self, loc: torch.Tensor, raw_scale: torch.Tensor) -> None:
        """Copies flat ``(D,)`` values into the guide's parameters."""
        self.copy_in(loc, raw_scale)

    def copy_in(self, loc: torch.Tensor, raw_scale: torch.Tensor) -> None:
        """:meth:`write` for a caller already under ``torch.no_grad()`` (one context for many runs)."""
        for s in self.segments:
            s.loc.copy_(loc[s.start : s.stop].view_as(s.loc))
            s.raw_scale.copy_(raw_scale[s.start : s.stop].view_as(s.raw_scale))


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
    """The flat layout of a set-up mean-field ``guide`` of ``model`` (a weight-space BNN without hyperpriors), from
    the :class:`~pyro_bnn.guides.BatchedLayout` the guide carries for its family.

    Raises:
        ValueError: The guide's family declares no batched layout (neither FlatMeanField nor BayesByBackprop), the
            guide has not run yet, or it covers other sites than the model's weights.
    """
    if not isinstance(guide, BatchedPosterior):
        raise ValueError(
            "batched runs train a FlatMeanField ('flat:...') or BayesByBackprop ('bbb') guide, "
            f"got {type(guide).__name__}"
        )
    name = type(guide).__name__
    if guide.prototype_trace is None:
        raise ValueError(f"the {name} guide has no parameters yet: run it once first")
    layout = guide.batched_layout
    sites = _real_sites(model)
    params = dict(guide.named_parameters())
    if not layout.per_site:  # one flat pair over the guide's sites, in the order it met them
        guide_sites = [site for site, _ in guide.prototype_trace.iter_stochastic_nodes()]
        if guide_sites != model.site_names:
            raise ValueError(
                f"the guide covers the sites {guide_sites[:4]}, the model's weights are {model.site_names[:4]}"
            )
        size = sites[-1].stop if sites else 0
        loc, raw = params.get(layout.loc), params.get(layout.raw_scale)
        if loc is None or raw is None or loc.shape != (size,) or raw.shape != (size,):
            raise ValueError(f"the {name} guide has no {layout.loc!r} and {layout.raw_scale!r} of shape ({size},)")
        return GuideLayout(layout.scale_map, sites, (Segment(0, size, loc, raw),))
    segments = []
    for site in sites:
        loc_name, raw_name = layout.loc.format(site=site.name), layout.raw_scale.format(site=site.name)
        loc, raw = params.get(loc_name), params.get(raw_name)
        if loc is None or raw is None or loc.shape != site.shape:
            raise ValueError(
                f"the {name} guide has no {loc_name!r} and {raw_name!r} of shape {tuple(site.shape)} for {site.name!r}"
            )
        segments.append(Segment(site.start, site.stop, loc, raw))
    if len(params) != 2 * len(sites):
        raise ValueError(f"the {name} guide has sites the model's weights do not (a hierarchical prior?)")
    return GuideLayout(layout.scale_map, sites, tuple(segments))
