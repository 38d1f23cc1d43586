"""AutoNormal with per-tensor initial scales relative to the spread of the initial locations."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

import torch
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroParam


class RelativeScaleNormal(AutoNormal):
    """Pyro's :class:`~pyro.infer.autoguide.AutoNormal` whose initial scale of each latent tensor is
    ``relative_scale * std(initial locations of that tensor)``.

    With locations at the network's initialisation this gives every layer a standard deviation in proportion to
    its own weights (Kaiming-uniform weights of a 1000-wide layer have std ~0.018; a 784-wide input layer ~0.021),
    instead of one absolute number for all layers. Everything else is AutoNormal's: the same parameters, sampling
    and ``locs`` / ``scales`` modules.

    Args:
        model: The Pyro model (a :class:`pyro_bnn.BNN`).
        relative_scale: c in ``sigma0 = c * std(loc0)`` (> 0).
        init_loc_fn: Initial locations (e.g. :class:`~pyro_bnn.guides.init_to_network`).
        fallback_scale: Initial scale of a tensor whose initial values are all equal (std 0), such as a single
            number.
        create_plates: As in AutoNormal.
    """

    def __init__(
        self,
        model: Callable,
        *,
        relative_scale: float,
        init_loc_fn: Callable,
        fallback_scale: float = 0.1,
        create_plates: Callable | None = None,
    ) -> None:
        if not (isinstance(relative_scale, (int, float)) and relative_scale > 0):
            raise ValueError(f"relative_scale must be a number > 0, got {relative_scale!r}")
        self.relative_scale = float(relative_scale)
        super().__init__(model, init_loc_fn=init_loc_fn, init_scale=float(fallback_scale), create_plates=create_plates)

    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            loc = attrgetter(name)(self.locs).detach()
            spread = float(loc.std()) if loc.numel() > 1 else 0.0
            if spread == 0.0:
                continue  # AutoNormal already gave it the fallback scale
            event_dim = site["fn"].event_dim + loc.dim() - site["value"].dim()
            scale = torch.full_like(loc, self.relative_scale * spread)
            deep_setattr(self.scales, name, PyroParam(scale, self.scale_constraint, event_dim))
