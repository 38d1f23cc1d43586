"""Initialising guides from the network's own initial weights."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from pyro.infer.autoguide.initialization import init_to_median

from pyro_bnn.bnn import BNN
from pyro_bnn.node_noise.convert import BIAS_NOISE, INPUT_NOISE
from pyro_bnn.priors import FlatPrior, Prior


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


def check_median_start(guide: str, prior: Prior, prior_name: str) -> None:
    """Refuses to start a guide's locations at the median of draws from ``prior`` (``loc=median``: Pyro's
    ``init_to_median``) where the prior cannot be sampled: the flat prior, whose guides start from the network's own
    weights instead. What the guide build and run validation (before any data is loaded) both ask.

    Args:
        guide: The ``--guide`` string, for the message (``"flat:0.1,loc=median"``).
        prior: The prior.
        prior_name: How the message names it (``"prior 'flat'"``).

    Raises:
        ValueError: One line naming the guide, the prior and what to use instead; ``init_to_median`` would fail at
            the first step with a traceback (``ImproperUniform does not support sampling``).
    """
    if isinstance(prior, FlatPrior):
        raise ValueError(
            f"guide {guide!r} starts its locations at the median of draws from the prior (loc=median), but "
            f"{prior_name} cannot be sampled; use loc=network (the default: the network's own initial weights) or "
            "loc=map (a MAP warm start)"
        )


class SymmetricStartWarning(UserWarning):
    """A guide starts every weight of a layer at the same value, so all its hidden units are the same function."""


_NOT_WEIGHTS = frozenset({"bias", INPUT_NOISE, BIAS_NOISE})


def symmetric_start_sites(guide: Callable, bnn: BNN) -> list[str]:
    """The weight sites whose initial values in ``guide`` are all equal although the layer has several units.

    Reads the guide's ``prototype_trace`` (the values its ``init_loc_fn`` gave when it first ran; Pyro's
    ``AutoNormal`` default ``init_to_feasible`` puts every weight at 0, so every hidden unit is identical and only
    the sampling noise breaks the symmetry). Bias sites, node-noise sites (whose start at 1 is intended) and sites
    of one unit (``shape[0] == 1``) or of one dimension are not checked.

    Returns:
        The site names, in the model's order; empty for a guide that has not run or has no prototype trace.
    """
    trace = getattr(guide, "prototype_trace", None)
    if trace is None:
        return []
    names = []
    for site in bnn.sites:
        node = trace.nodes.get(site.name)
        if node is None or site.attr in _NOT_WEIGHTS or len(site.shape) < 2:
            continue
        value = node["value"].detach()
        if site.shape[0] > 1 and value.numel() > 1 and bool((value == value.reshape(-1)[0]).all()):
            names.append(site.name)
    return names


def warn_symmetric_start(guide: Callable, bnn: BNN) -> None:
    """Warns once, in one line, when :func:`symmetric_start_sites` finds any site (call after the guide's first
    run)."""
    names = symmetric_start_sites(guide, bnn)
    if names:
        more = f" (and {len(names) - 1} more weight sites)" if len(names) > 1 else ""
        warnings.warn(
            f"{type(guide).__name__} starts every weight of {names[0]!r}{more} at the same value, so the layer's "
            "units stay identical until sampling noise separates them; pass init_loc_fn=pyro_bnn.guides."
            "init_to_network(bnn) (or init_to_median), or use the guide spec 'autonormal:0.01'",
            SymmetricStartWarning,
            stacklevel=3,
        )
