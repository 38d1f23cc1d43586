"""Reading a guide's posterior parameters, whatever the guide."""

from __future__ import annotations

import torch
from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal
from torch.distributions import biject_to


def posterior_loc_scale(guide: AutoGuide) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each latent site's variational location and scale, in the site's unconstrained space.

    Works for :class:`~pyro.infer.autoguide.AutoNormal`, :class:`~pyro_bnn.guides.BayesByBackprop` (scale =
    softplus(rho)) and :class:`~pyro.infer.autoguide.AutoDelta` (scale 0). The guide must have been run once.

    Returns:
        ``{site name: (loc, scale)}`` with tensors of the site's (unconstrained) shape, detached.
    """
    if guide.prototype_trace is None:
        raise ValueError("the guide has no parameters yet: run it (or train) once before reading them")
    result = {}
    for name, _ in guide.prototype_trace.iter_stochastic_nodes():
        if isinstance(guide, AutoNormal):
            loc, scale = guide._get_loc_and_scale(name)
        elif isinstance(guide, AutoDelta):
            support = guide.prototype_trace.nodes[name]["fn"].support
            loc = biject_to(support).inv(guide.median()[name])
            scale = torch.zeros_like(loc)
        else:
            raise ValueError(f"posterior_loc_scale does not know the guide type {type(guide).__name__}")
        result[name] = (loc.detach(), scale.detach())
    return result
