"""Closed-form KL divergence between element-wise Normal distributions, for the fast objective."""

from __future__ import annotations

import torch
from torch.distributions import Distribution, Independent, Normal


def normal_parameters(prior: Distribution) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The element-wise loc and scale of a Normal prior (wrapped in ``Independent`` or not), or None."""
    base = prior
    while isinstance(base, Independent):
        base = base.base_dist
    if isinstance(base, Normal):
        return base.loc, base.scale
    return None


def normal_kl(loc: torch.Tensor, scale: torch.Tensor, prior_loc: torch.Tensor, prior_scale: torch.Tensor):
    """``sum KL(Normal(loc, scale) || Normal(prior_loc, prior_scale))`` over the elements; loc, scale ``(n,)``,
    the prior's parameters ``()`` or ``(n,)``. Returns a scalar."""
    if prior_scale.dim() == 0:
        # KL = 0.5 (sigma^2 + (mu - m)^2) / s^2 - log sigma + log s - 1/2, with the constants summed once.
        per_weight = 0.5 * (scale.square() + (loc - prior_loc).square()) / prior_scale.square() - scale.log()
        return per_weight.sum() + loc.numel() * (prior_scale.log() - 0.5)
    var_ratio = (scale / prior_scale).square()
    return 0.5 * (var_ratio + ((loc - prior_loc) / prior_scale).square() - 1 - var_ratio.log()).sum()
