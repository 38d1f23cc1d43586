"""Learning-rate schedules per parameter group: a multiplier of each group's base lr, for ``LambdaLR``.

A schedule maps the number ``t`` of scheduler steps taken so far (optimiser steps with
``lr_scheduler_interval="step"``, epochs with ``"epoch"``) out of ``T`` in all to a factor ``m(t)`` of the group's
base learning rate, so the group trains at ``lr(t) = m(t) * lr``. Two shapes, written as strings
(:data:`LR_SCHEDULE_FAMILY`):

* ``constant``: ``m(t) = 1``;
* ``decay:RATIO[,START,END]`` (``START = 0.5``, ``END = 0.9`` by default; ``0 <= START < END <= 1``,
  ``0 < RATIO <= 1``): with ``a = START * T`` and ``b = END * T``,

  .. math::

      m(t) = \\begin{cases} 1 & t \\le a \\\\
                            1 - (1 - r) \\dfrac{t - a}{b - a} & a < t < b \\\\
                            r & t \\ge b, \\end{cases}

  i.e. constant for the first half of training, linear decay to ``RATIO`` times the base lr at 90 % of training,
  constant after.

The implicit-BNN (node-noise) authors (Trinh et al., 2022) train with one SGD optimiser whose deterministic weights
follow ``decay:0.01`` and whose variational parameters keep a ``constant`` lr::

    Trainer(
        bnn, guide,
        optim=ParamGroups(model={"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
                          guide={"lr": 2.0, "momentum": 0.9, "nesterov": True}),
        lr_scheduler=lambda opt: group_scheduler(opt, {"model": "decay:0.01", "guide": "constant"}, epochs),
    )

:func:`group_scheduler` builds one ``torch.optim.lr_scheduler.LambdaLR`` with one multiplier per parameter group,
chosen by the group's ``"name"`` (:class:`~pyro_bnn.infer.optim.ParamGroups` names its groups ``"model"`` and
``"guide"``). The multipliers are plain closures, so a checkpoint of the scheduler holds only its step count and
base lrs: a resume with another ``T`` (a run extended to more epochs) follows the new schedule.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from enum import Enum

import torch
from torch.optim.lr_scheduler import LambdaLR

from pyro_bnn.checks import positive_int
from pyro_bnn.infer.auto_objective import UnusedOptionWarning
from pyro_bnn.infer.optim import ParamGroups
from pyro_bnn.spec import Arg, Family, Form, Interval, ParsedSpec

LRMultiplier = Callable[[int], float]
"""Maps the number of scheduler steps taken (0 at the start) to the factor on a group's base learning rate."""


class LRSchedule(str, Enum):
    """Learning-rate schedules of a parameter group by name (grammar: :data:`LR_SCHEDULE_FAMILY`)."""

    CONSTANT = "constant"
    """The base learning rate throughout."""
    DECAY = "decay"
    """The base learning rate until START of training, then linear decay to RATIO times it at END, held after
    (START 0.5 and END 0.9 by default; the implicit-BNN weights use RATIO 0.01)."""


def _check_start_end(parsed: ParsedSpec) -> None:
    if not parsed["start"] < parsed["end"]:
        raise ValueError(f"START must be < END, got {parsed['start']:g} and {parsed['end']:g}")


LR_SCHEDULE_FAMILY = Family(
    "learning-rate schedule",
    [
        Form(LRSchedule.CONSTANT),
        Form(
            LRSchedule.DECAY,
            (
                Arg("ratio", Interval(0.0, 1.0, closed="high")),
                Arg("start", Interval(0.0, 1.0), 0.5),
                Arg("end", Interval(0.0, 1.0), 0.9),
            ),
            check=_check_start_end,
            example="decay:0.01,0.5,0.9",
        ),
    ],
    enum=LRSchedule,
    example="decay:0.01",
)
"""The grammar of a group's learning-rate schedule: ``constant`` or ``decay:RATIO[,START,END]``."""


def _check_total(total_steps: object) -> int:
    total_steps = positive_int(total_steps, "total_steps")
    return total_steps


def constant_lr() -> LRMultiplier:
    """``m(t) = 1``: the group's base learning rate throughout."""
    return lambda step: 1.0


def linear_decay(ratio: float, total_steps: int, *, start: float = 0.5, end: float = 0.9) -> LRMultiplier:
    """``m(t)``: 1 until ``a = start * total_steps``, linear to ``ratio`` at ``b = end * total_steps``, ``ratio``
    after; between them ``m(t) = 1 - (1 - ratio) (t - a) / (b - a)``.

    Args:
        ratio: The final factor, in (0, 1].
        total_steps: ``T``, the scheduler steps in the whole run (an int >= 1).
        start: Where the decay begins, a fraction of ``T`` in [0, 1).
        end: Where it reaches ``ratio``, a fraction of ``T`` in (start, 1].

    Raises:
        ValueError: One line naming the value out of range.
    """
    total_steps = _check_total(total_steps)
    if not (isinstance(ratio, (int, float)) and 0 < ratio <= 1):
        raise ValueError(f"ratio must be a number in (0, 1], got {ratio!r}")
    if not (isinstance(start, (int, float)) and isinstance(end, (int, float)) and 0 <= start < end <= 1):
        raise ValueError(f"start and end must satisfy 0 <= start < end <= 1, got start={start!r}, end={end!r}")
    a, b = start * total_steps, end * total_steps

    def multiplier(step: int) -> float:
        if step <= a:
            return 1.0
        if step >= b:
            return float(ratio)
        return 1.0 - (1.0 - ratio) * (step - a) / (b - a)

    return multiplier


def lr_multiplier(spec: str | LRSchedule, total_steps: int) -> LRMultiplier:
    """The multiplier of a group's base learning rate after ``step`` scheduler steps, for ``LambdaLR``.

    Args:
        spec: ``"constant"`` or ``"decay:RATIO[,START,END]"`` (see the module docstring; an
            :class:`LRSchedule` member stands for its bare name, which ``decay`` is not: it needs RATIO).
        total_steps: ``T``, the scheduler steps in the whole run: optimiser steps (``epochs * len(loader)``) with
            ``lr_scheduler_interval="step"``, epochs with ``"epoch"``.

    Returns:
        ``step -> m(step)``: e.g. for ``"decay:0.01"`` and ``T = 100``, 1 at steps 0-50, 0.505 at 70, 0.01 from 90.

    Raises:
        ValueError: One line naming ``spec`` (see :meth:`~pyro_bnn.spec.Family.parse`) or ``total_steps``.
    """
    parsed = LR_SCHEDULE_FAMILY.parse(spec.value if isinstance(spec, LRSchedule) else spec)
    total_steps = _check_total(total_steps)
    if parsed.kind is LRSchedule.CONSTANT:
        return constant_lr()
    return linear_decay(parsed["ratio"], total_steps, start=parsed["start"], end=parsed["end"])


def group_scheduler(
    optimizer: torch.optim.Optimizer,
    schedules: Mapping[str, str | LRSchedule],
    total_steps: int,
    *,
    option_names: Mapping[str, str] | None = None,
) -> LambdaLR:
    """One ``LambdaLR`` giving each parameter group the schedule named for its ``"name"``.

    Use it as the trainer's ``lr_scheduler`` with :class:`~pyro_bnn.infer.optim.ParamGroups`, e.g.
    ``lambda opt: group_scheduler(opt, {"model": "decay:0.01"}, epochs * len(loader))`` with
    ``lr_scheduler_interval="step"``.

    Args:
        optimizer: The optimiser; its groups are matched by their ``"name"`` entry.
        schedules: ``{group name: schedule spec}``; a group without an entry (or without a name) keeps its base lr.
            ``"model"`` and ``"guide"`` may name a group the optimiser lacks when its groups come from
            :class:`~pyro_bnn.infer.optim.ParamGroups` (every group named), which leaves an empty group out: the
            model has no parameters of its own when every weight is random. A schedule other than ``constant``
            for such a group changes nothing, and says so in an
            :class:`~pyro_bnn.infer.auto_objective.UnusedOptionWarning`.
        total_steps: ``T``, the scheduler steps in the whole run (see :func:`lr_multiplier`).
        option_names: How the caller's user set each group's schedule (``{"model": "lr_schedule
            (--lr-schedule)"}``), named in that warning instead of the group.

    Raises:
        ValueError: One line: a schedule spec that does not parse, a bad ``total_steps``, or a name that no group
            has.
    """
    if not isinstance(schedules, Mapping):
        raise ValueError(f"schedules must be a dict {{group name: schedule}}, got {schedules!r}")
    total_steps = _check_total(total_steps)
    names = [group.get("name") for group in optimizer.param_groups]
    optional = set(ParamGroups.GROUPS) if all(name is not None for name in names) else set()
    unknown = [name for name in schedules if name not in names and name not in optional]
    if unknown:
        present = ", ".join(repr(name) for name in names if name is not None)
        groups = f"the optimiser's groups: {present}" if present else "the optimiser's groups have no 'name'"
        raise ValueError(f"no parameter group named {unknown[0]!r} ({groups})")
    multipliers = {name: lr_multiplier(spec, total_steps) for name, spec in schedules.items()}
    for name, spec in schedules.items():
        if name not in names and LR_SCHEDULE_FAMILY.parse(_text(spec)).kind is not LRSchedule.CONSTANT:
            _warn_unused(name, _text(spec), option_names or {})
    return LambdaLR(optimizer, [multipliers.get(name, constant_lr()) for name in names])


def _text(spec: str | LRSchedule) -> str:
    return spec.value if isinstance(spec, LRSchedule) else spec


def _warn_unused(group: str, spec: str, option_names: Mapping[str, str]) -> None:
    """Says that ``spec``, the schedule of a ParamGroups group the optimiser left out (it has no parameters), does
    nothing: a decay that never happens looked like one that did (history.json showed the base rate throughout)."""
    option = option_names.get(group, f"schedules[{group!r}]")
    other = next(name for name in ParamGroups.GROUPS if name != group)
    other_option = option_names.get(other, f"schedules[{other!r}]")
    owner = {"model": "the model has no trainable parameters of its own: every weight is random"}.get(
        group, f"the {group} has no parameters"
    )
    warnings.warn(
        f"{option} {spec!r} is unused: the optimiser has no {group!r} parameter group ({owner}); {other_option} "
        f"schedules the {other}'s parameters, all there are",
        UnusedOptionWarning,
        stacklevel=3,
    )
