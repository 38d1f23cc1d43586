"""KL annealing: an effect handler that weights the latent sites, and the schedules that choose the weight.

Pyro's ELBO is ``E_q[log p(y|w)] + w_kl * E_q[log p(w) - log q(w)]`` once every site's log density except the
likelihood's (in the model and in the guide alike) is multiplied by ``w_kl``; the likelihood's site keeps its own
scale (the data plate's N/B). That is all :class:`scale_latents` does; the schedule is a separate small callable of
training progress. The likelihood is recognised by its tag (:data:`pyro_bnn.sites.LIKELIHOOD_TAG`), so a
``pyro.factor`` term, though observed, is annealed with the prior it belongs to.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from enum import Enum

from pyro.poutine.messenger import Messenger

from pyro_bnn.checks import non_negative_float, positive_float
from pyro_bnn.sites import is_likelihood_site
from pyro_bnn.spec import Arg, Family, Form, Interval, Positive, Real

KLSchedule = Callable[[float], float]
"""Maps training progress in epochs (``epoch + step / steps_per_epoch``, starting at 0) to a KL weight >= 0."""


def step_progress(epoch: int, step: int, num_steps: int) -> float:
    """Training progress in epochs at ``step`` (1-based) of the ``num_steps`` steps of ``epoch`` (0-based): the
    value the :class:`~pyro_bnn.infer.Trainer` calls its :data:`KLSchedule` with, ``epoch + (step - 1) / num_steps``
    (a step is weighted by where it starts)."""
    return epoch + (step - 1) / num_steps


def check_kl_weight(weight: object) -> float:
    """A KL weight (a schedule's value times the minibatch weighting) as a ``float``, or a one-line ValueError:
    ``"KL weight must be a finite number >= 0, got -1.0"``. Every objective checks its weight with this, so a bad
    schedule fails alike on every training path."""
    try:
        value = float(weight)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"KL weight must be a finite number >= 0, got {weight!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"KL weight must be a finite number >= 0, got {weight!r}")
    return value


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
        weight = check_kl_weight(weight)
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


def tempered(schedule: KLSchedule, temperature: float) -> KLSchedule:
    """``schedule`` times the likelihood temperature T: the KL weight of a tempered posterior
    ``p(D | w)^(1/T) p(w)``, whose ELBO times T is ``E_q[log p(D | w)] - T * KL(q || p)`` (the schedule itself when
    T is 1)."""
    if temperature == 1.0:
        return schedule
    return lambda progress: temperature * schedule(progress)


def linear_warmup(warmup_epochs: float, *, start: float = 0.0, end: float = 1.0, per_epoch: bool = False) -> KLSchedule:
    """KL weight rising linearly from ``start`` to ``end`` over ``warmup_epochs``, then held at ``end``.

    Args:
        warmup_epochs: Length of the ramp in epochs (a finite number > 0).
        start: Weight at the beginning (a finite number >= 0).
        end: Weight after the ramp (a finite number >= 0).
        per_epoch: Hold the weight constant within an epoch (the implicit-BNN code steps it once per epoch).
    """
    warmup_epochs = positive_float(warmup_epochs, "warmup_epochs")
    start = non_negative_float(start, "start")
    end = non_negative_float(end, "end")

    def schedule(progress: float) -> float:
        t = math.floor(progress) if per_epoch else progress
        return start + (end - start) * min(t / warmup_epochs, 1.0)

    return schedule


def cyclical(period_epochs: float, *, ramp_fraction: float = 0.5, end: float = 1.0) -> KLSchedule:
    """Cyclical annealing (Fu et al., 2019): in each period the weight rises linearly from 0 to ``end`` during the
    first ``ramp_fraction`` of the period and stays at ``end`` for the rest.

    A step that starts a period (``progress`` a whole number of periods, up to rounding) gets weight 0: with a
    period such as 1.6 epochs, ``progress % period`` of 8.0 is 1.5999..., which would give it ``end``.

    Args:
        period_epochs: The period in epochs (a finite number > 0).
        ramp_fraction: Share of each period spent rising, in (0, 1].
        end: Weight at the top (a finite number >= 0).
    """
    period_epochs = positive_float(period_epochs, "period_epochs")
    if isinstance(ramp_fraction, bool) or not (isinstance(ramp_fraction, numbers.Real) and 0 < ramp_fraction <= 1):
        raise ValueError(f"ramp_fraction must lie in (0, 1], got {ramp_fraction!r}")
    end = non_negative_float(end, "end")

    def schedule(progress: float) -> float:
        cycles = progress / period_epochs
        if abs(cycles - round(cycles)) <= 1e-9 * max(1.0, abs(cycles)):
            cycles = round(cycles)  # a period's first step, though rounding put it a hair short
        phase = cycles - math.floor(cycles)
        return end * min(phase / ramp_fraction, 1.0)

    return schedule


class ScheduleKind(str, Enum):
    """KL annealing schedules by name (the CLI's ``--kl-anneal``; grammar: :data:`KL_SCHEDULE_FAMILY`)."""

    CONSTANT = "constant"
    """Weight W throughout (1 is the plain ELBO)."""
    LINEAR = "linear"
    """Linear warm-up from 0 to 1 over EPOCHS epochs."""
    CYCLICAL = "cyclical"
    """Repeated warm-ups every PERIOD epochs, each rising during RAMP_FRACTION of the period (Fu et al., 2019)."""


KL_SCHEDULE_FAMILY = Family(
    "KL schedule",
    [
        Form(ScheduleKind.CONSTANT, (Arg("weight", Real(minimum=0.0), 1.0, metavar="W"),), example="constant:0.5"),
        Form(ScheduleKind.LINEAR, (Arg("epochs", Positive()),), example="linear:2"),
        Form(
            ScheduleKind.CYCLICAL,
            (Arg("period", Positive()), Arg("ramp fraction", Interval(0.0, 1.0, closed="high"), 0.5)),
            example="cyclical:4,0.5",
        ),
    ],
    enum=ScheduleKind,
    example="linear:2",
)
"""The ``--kl-anneal`` grammar."""


def parse_kl_schedule(spec: str) -> KLSchedule:
    """Builds a schedule from a string such as ``"linear:10"`` (forms: :data:`KL_SCHEDULE_FAMILY`).

    Raises:
        ValueError: One line naming the spec and what was expected.
    """
    parsed = KL_SCHEDULE_FAMILY.parse(spec)
    if parsed.kind is ScheduleKind.CONSTANT:
        return constant(parsed["weight"])
    if parsed.kind is ScheduleKind.LINEAR:
        return linear_warmup(parsed["epochs"])
    return cyclical(parsed["period"], ramp_fraction=parsed["ramp fraction"])
