"""KL annealing: an effect handler that weights the latent sites, and the schedules that choose the weight.

Pyro's ELBO is ``E_q[log p(y|w)] + w_kl * E_q[log p(w) - log q(w)]`` once every site's log density except the
likelihood's (in the model and in the guide alike) is multiplied by ``w_kl``; the likelihood's site keeps its own
scale (the data plate's N/B). That is all :class:`scale_latents` does; the schedule is a separate small callable of
training progress. The likelihood is recognised by its tag (:data:`pyro_bnn.sites.LIKELIHOOD_TAG`), so a
``pyro.factor`` term, though observed, is annealed with the prior it belongs to.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

from pyro.poutine.messenger import Messenger

from pyro_bnn._spec import enum_member, floats, split_spec
from pyro_bnn.sites import is_likelihood_site

KLSchedule = Callable[[float], float]
"""Maps training progress in epochs (``epoch + step / steps_per_epoch``, starting at 0) to a KL weight >= 0."""


class scale_latents(Messenger):  # noqa: N801  (an effect handler, named like pyro.poutine's handlers)
    """Multiplies the log density of every sample site except the likelihood's by ``weight``.

    Latent sites in model and guide and ``pyro.factor`` terms are scaled; the site the likelihood tagged is not.

    Use it around the whole ELBO evaluation, so model and guide are both inside (their scales must agree for
    :class:`~pyro.infer.TraceMeanField_ELBO`'s analytic KL). Unlike :func:`pyro.poutine.scale`, a weight of 0 is
    allowed: the loss is then the data term alone.

    Args:
        weight: A finite number >= 0.
    """

    def __init__(self, weight: float) -> None:
        weight = float(weight)
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError(f"KL weight must be a finite number >= 0, got {weight!r}")
        super().__init__()
        self.weight = weight

    def _process_message(self, msg: dict) -> None:
        if msg["type"] == "sample" and not is_likelihood_site(msg):
            msg["scale"] = msg["scale"] * self.weight


def constant(value: float = 1.0) -> KLSchedule:
    """The same KL weight throughout (1 is the plain ELBO)."""
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"constant KL weight must be a finite number >= 0, got {value!r}")
    return lambda progress: value


def linear_warmup(warmup_epochs: float, *, start: float = 0.0, end: float = 1.0, per_epoch: bool = False) -> KLSchedule:
    """KL weight rising linearly from ``start`` to ``end`` over ``warmup_epochs``, then held at ``end``.

    Args:
        warmup_epochs: Length of the ramp in epochs (> 0).
        start: Weight at the beginning.
        end: Weight after the ramp.
        per_epoch: Hold the weight constant within an epoch (the implicit-BNN code steps it once per epoch).
    """
    if not warmup_epochs > 0:
        raise ValueError(f"warmup_epochs must be > 0, got {warmup_epochs!r}")

    def schedule(progress: float) -> float:
        t = math.floor(progress) if per_epoch else progress
        return start + (end - start) * min(t / warmup_epochs, 1.0)

    return schedule


def cyclical(period_epochs: float, *, ramp_fraction: float = 0.5, end: float = 1.0) -> KLSchedule:
    """Cyclical annealing (Fu et al., 2019): in each period the weight rises linearly from 0 to ``end`` during the
    first ``ramp_fraction`` of the period and stays at ``end`` for the rest.
    """
    if not period_epochs > 0:
        raise ValueError(f"period_epochs must be > 0, got {period_epochs!r}")
    if not 0 < ramp_fraction <= 1:
        raise ValueError(f"ramp_fraction must lie in (0, 1], got {ramp_fraction!r}")

    def schedule(progress: float) -> float:
        phase = (progress % period_epochs) / period_epochs
        return end * min(phase / ramp_fraction, 1.0)

    return schedule


class ScheduleKind(str, Enum):
    """KL annealing schedules by name (the CLI's ``--kl-anneal``)."""

    CONSTANT = "constant"
    """``constant[:W]``: weight W throughout (default 1)."""
    LINEAR = "linear"
    """``linear:EPOCHS``: linear warm-up from 0 to 1 over EPOCHS epochs."""
    CYCLICAL = "cyclical"
    """``cyclical:PERIOD[,RAMP_FRACTION]``: repeated warm-ups every PERIOD epochs (ramp fraction default 0.5)."""


def parse_kl_schedule(spec: str) -> KLSchedule:
    """Builds a schedule from a string such as ``"linear:10"`` (see :class:`ScheduleKind`)."""
    name, args = split_spec(spec, "KL schedule")
    kind = enum_member(ScheduleKind, name, "KL schedule")
    if kind is ScheduleKind.CONSTANT:
        return constant(*floats(args, (0, 1), spec, "KL schedule"))
    if kind is ScheduleKind.LINEAR:
        return linear_warmup(*floats(args, (1,), spec, "KL schedule"))
    values = floats(args, (1, 2), spec, "KL schedule")
    return cyclical(values[0], ramp_fraction=values[1] if len(values) > 1 else 0.5)
