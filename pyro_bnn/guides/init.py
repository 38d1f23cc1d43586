"""Initialising guides from the network's own initial weights."""

from __future__ import annotations

from collections.abc import Callable

import torch
from pyro.infer.autoguide.initialization import init_to_median

from pyro_bnn.bnn import BNN


class init_to_network:  # noqa: N801  (named like Pyro's init_to_* functions it stands beside)
    """A Pyro ``init_loc_fn`` that starts every weight site at the network's initial value.

    Pyro's defaults start at the prior's median or zero, which for a deep network means every weight equal (or
    prior-scale noise); the network's own initialisation (Kaiming uniform for ``nn.Linear``) is what a
    deterministic network would train from. Sites that are not network weights (hyperpriors) use ``fallback``.

    Args:
        bnn: The Bayesian network whose initial weights to use; looked up at call time, so the values follow
            ``bnn.to(device)``.
        fallback: Init function for the other sites (default ``init_to_median``).

    Example:
        >>> guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=1e-3)
    """

    def __init__(self, bnn: BNN, fallback: Callable[[dict], torch.Tensor] = init_to_median) -> None:
        self._bnn = (bnn,)  # a tuple, so the guide holding this function never registers the model as a submodule
        self.fallback = fallback

    def __call__(self, site: dict) -> torch.Tensor:
        values = self._bnn[0].initial_values()
        if site["name"] in values:
            return values[site["name"]].detach().clone()
        return self.fallback(site)
