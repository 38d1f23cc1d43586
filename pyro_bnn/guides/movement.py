"""Whether a trained guide's posterior is still where it started (the trainer warns after ``fit`` when it is).

A run too short for its starting scale leaves a mean-field posterior at its initialisation: its sigmas, in the
median, close to where they began and its locations, in the median, less than one starting sigma away from their
start, so the predictions are those of the random start, not of the data. :func:`start_of` keeps each weight's
starting location and log-scale (when the trainer builds the guide); :func:`unmoved_reason` compares them with the
trained values. Only the mean-field Normal guides that store a scale per weight are read (``flat``, ``autonormal``
and ``bbb``): reading a flow's or a low-rank guide's marginals would draw samples and shift a seeded run's random
stream.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from pyro.infer.autoguide import AutoNormal

from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.flat import FlatMeanField
from pyro_bnn.guides.inspect import posterior_loc_scale

SCALE_TOLERANCE = math.log(1.25)
"""A posterior's scales count as unmoved while the median ``|log sigma - log sigma_0|`` is below this (the median
sigma between 0.8 and 1.25 times its start)."""

LOCATION_TOLERANCE = 1.0
"""Its locations count as unmoved while the median ``|mu - mu_0| / sigma_0`` is below this (less than one starting
sigma from their start)."""


class UnmovedPosteriorWarning(UserWarning):
    """A trained guide's scales and locations are still essentially where they started."""


@dataclass(frozen=True)
class StartingPoint:
    """Every random weight's starting location and log-scale, flattened in site order (``(D,)`` each)."""

    loc: torch.Tensor
    log_scale: torch.Tensor


def _flat_loc_scale(guide) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(loc, scale)`` of every site, flattened and concatenated, or None for a guide without per-weight Normal
    scales (a point estimate, a mixture, a full-covariance family)."""
    if not isinstance(guide, (FlatMeanField, AutoNormal, BayesByBackprop)):
        return None
    try:
        pairs = posterior_loc_scale(guide)
    except (ValueError, AttributeError, TypeError):
        return None
    if not pairs:
        return None
    loc = torch.cat([loc.detach().reshape(-1) for loc, _ in pairs.values()])
    scale = torch.cat([scale.detach().reshape(-1) for _, scale in pairs.values()])
    if not bool((scale > 0).all()):
        return None
    return loc, scale


def start_of(guide) -> StartingPoint | None:
    """The guide's starting point (call it after the guide's first run), or None when it has no per-weight
    Normal scales to compare."""
    flat = _flat_loc_scale(guide)
    if flat is None:
        return None
    loc, scale = flat
    return StartingPoint(loc.clone(), scale.log())


def unmoved_reason(guide, start: StartingPoint | None) -> str | None:
    """One line saying how little the posterior moved from ``start`` when both its scales and its locations are
    within :data:`SCALE_TOLERANCE` and :data:`LOCATION_TOLERANCE` of it; None when it moved (or cannot be read)."""
    flat = None if start is None else _flat_loc_scale(guide)
    if flat is None or flat[0].shape != start.loc.shape:
        return None
    loc, scale = flat
    scale_move = float((scale.log() - start.log_scale).abs().median())
    loc_move = float(((loc - start.loc).abs() / start.log_scale.exp()).median())
    if not (scale_move < SCALE_TOLERANCE and loc_move < LOCATION_TOLERANCE):  # moved, or not finite
        return None
    start_sigma = float(start.log_scale.exp().median())
    return (
        f"the posterior has barely left its start: the median sigma moved by a factor {math.exp(scale_move):.2f} "
        f"and the median location by {loc_move:.2f} of its starting sigma ({start_sigma:.3g}), so predictions "
        "still reflect the initialisation; train longer (more epochs or a larger learning rate), or start from a "
        f"smaller scale (e.g. the guide 'flat:{start_sigma / 10:.2g}')"
    )


def warn_if_unmoved(guide, start: StartingPoint | None) -> None:
    """Warns once, in one line (:class:`UnmovedPosteriorWarning`), when :func:`unmoved_reason` finds the posterior
    still at ``start``."""
    reason = unmoved_reason(guide, start)
    if reason is not None:
        warnings.warn(reason, UnmovedPosteriorWarning, stacklevel=3)
