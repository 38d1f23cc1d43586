"""Where a mean-field guide keeps its locations and scales, as flat ``(D,)`` vectors: the bridge between R ordinary
guides and the stacked ``(R, D)`` tensors a batched step trains.

Two guides are covered: :class:`~pyro_bnn.guides.FlatMeanField` (already flat: ``loc`` and ``log_scale``,
``sigma = exp(log_scale)``) and :class:`~pyro_bnn.guides.BayesByBackprop` (``mu`` and ``rho`` per site,
``sigma = softplus(rho)``). A :class:`GuideLayout` reads a guide's values into flat vectors and writes flat vectors
back into the guide's own parameters, so a run trained in a batch leaves an ordinary guide behind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.flat import FlatMeanField, FlatSite


class ScaleMap(str, Enum):
    """How a guide turns its raw scale parameter into the standard deviation sigma."""

    EXP = "exp"
    """``sigma = exp(raw)`` (:class:`~pyro_bnn.guides.FlatMeanField`'s ``log_scale``)."""
    SOFTPLUS = "softplus"
    """``sigma = softplus(raw)`` (:class:`~pyro_bnn.guides.BayesByBackprop`'s ``rho``)."""

    def scale_and_log(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sigma, log sigma)`` of ``raw``, any shape."""
        if self is ScaleMap.EXP:
            return raw.exp(), raw
        scale = F.softplus(raw)
        return scale, scale.log()


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
    """The flat layout of a set-up mean-field ``guide`` of ``model`` (a weight-space BNN without hyperpriors).

    Raises:
        ValueError: The guide is neither a FlatMeanField nor a BayesByBackprop, has not run yet, or covers other
            sites than the model's weights.
    """
    if not isinstance(guide, (FlatMeanField, BayesByBackprop)):
        raise ValueError(
            "batched runs train a FlatMeanField ('flat:...') or BayesByBackprop ('bbb') guide, "
            f"got {type(guide).__name__}"
        )
    if guide.prototype_trace is None:
        raise ValueError(f"the {type(guide).__name__} guide has no parameters yet: run it once first")
    sites = _real_sites(model)
    if isinstance(guide, FlatMeanField):
        if guide.site_names != model.site_names:
            raise ValueError(
                f"the guide covers the sites {guide.site_names[:4]}, the model's weights are {model.site_names[:4]}"
            )
        return GuideLayout(ScaleMap.EXP, sites, (Segment(0, guide.num_latents, guide.loc, guide.log_scale),))
    if isinstance(guide, BayesByBackprop):
        params = dict(guide.named_parameters())
        segments = []
        for site in sites:
            loc, raw = params.get(f"locs.{site.name}_unconstrained"), params.get(f"rhos.{site.name}_unconstrained")
            if loc is None or raw is None or loc.shape != site.shape:
                raise ValueError(
                    f"the BayesByBackprop guide has no mu and rho of shape {tuple(site.shape)} for {site.name!r}"
                )
            segments.append(Segment(site.start, site.stop, loc, raw))
        if len(params) != 2 * len(sites):
            raise ValueError("the BayesByBackprop guide has sites the model's weights do not (a hierarchical prior?)")
        return GuideLayout(ScaleMap.SOFTPLUS, sites, tuple(segments))
