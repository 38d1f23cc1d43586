"""The :class:`~pyro_bnn.infer.Trainer`'s options, in small frozen groups each checked once when it is built.

``Trainer(bnn, guide, objective=ObjectiveOptions("trace", num_particles=2), runtime=RuntimeOptions(seed=0))``;
the keywords these groups replace (``Trainer(num_particles=2, seed=0, ...)``) still work, with a
DeprecationWarning that names the group to use (:func:`regroup`).
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

import torch

from pyro_bnn.checks import Settings, enum_member, positive_float, positive_int
from pyro_bnn.infer.annealing import KLSchedule
from pyro_bnn.infer.kl_weighting import KLWeighting
from pyro_bnn.infer.objective_registry import objective_entry
from pyro_bnn.infer.objectives import ElboKind, Objective, make_objective
from pyro_bnn.infer.steps import StepRunnerFactory
from pyro_bnn.likelihoods import KLScale

__all__ = [
    "LRSchedulerOptions",
    "ObjectiveOptions",
    "ResumeOptions",
    "RuntimeOptions",
    "SchedulerInterval",
    "ValidationOptions",
    "regroup",
]


class SchedulerInterval(str, Enum):
    """When the trainer steps its learning-rate scheduler."""

    EPOCH = "epoch"
    """Once after every epoch (``T_max`` and ``step_size`` count epochs)."""
    STEP = "step"
    """After every optimiser step (``T_max`` and ``step_size`` count steps)."""


def _check_positive_int(name: str, value: object) -> None:
    positive_int(value, name)


def _check_callable(name: str, value: object, what: str) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be {what} or None, got {value!r}")


@dataclass(frozen=True)
class ObjectiveOptions(Settings):
    """What each step minimises (``Trainer(objective=...)``; a bare objective or name is this group's first field)."""

    objective: Objective | ElboKind | str = ElboKind.AUTO
    """An :class:`~pyro_bnn.infer.objectives.Objective`, or a registered name (:class:`~pyro_bnn.infer.ElboKind`):
    ``"auto"`` (the fused fast path for a flat mean-field guide, Trace_ELBO otherwise), ``"trace"``, ``"meanfield"``,
    ``"fast"``, ``"fast-single"``, ``"fast-local"``, ``"fast-flipout"``."""
    num_particles: int = 1
    """Weight samples per step, for an objective given by name."""
    vectorize_particles: bool | None = None
    """Evaluate the particles in one vectorised pass (None: when ``num_particles > 1``)."""
    kl_schedule: KLSchedule | None = None
    """KL annealing weight as a function of progress in epochs (None: constant 1)."""
    kl_weighting: KLWeighting | str = KLWeighting.UNIFORM
    """``"uniform"`` or ``"blundell"`` minibatch KL weights."""
    temperature: float = 1.0
    """The likelihood temperature T of a tempered posterior ``p_T(w | D) ∝ p(D | w)^(1/T) p(w)`` (T < 1: a *cold*
    posterior, which trusts the data more than Bayes' rule does; 1: the posterior). VI then minimises
    ``E_q[-log p(D | w)] + T * KL(q || p)``: T multiplies the KL weight of every step, annealing and minibatch
    weights included, in every objective. See docs/tempering.md."""

    def check(self) -> None:
        by_name = isinstance(self.objective, (str, ElboKind))
        if by_name:
            objective_entry(self.objective)  # an unknown name: one line listing the registered ones
        elif self.num_particles != 1:
            raise ValueError("num_particles applies to an objective given by name; set it on the objective itself")
        elif not isinstance(self.objective, Objective):
            raise ValueError(
                f"objective must be an ElboKind name ('auto', 'trace', ...) or an Objective, got {self.objective!r}"
            )
        _check_positive_int("num_particles", self.num_particles)
        if self.vectorize_particles is not None and not isinstance(self.vectorize_particles, bool):
            raise ValueError(f"vectorize_particles must be a bool or None, got {self.vectorize_particles!r}")
        _check_callable("kl_schedule", self.kl_schedule, "a function of progress in epochs")
        self._set("kl_weighting", enum_member(KLWeighting, self.kl_weighting, "KL weighting"))
        self._set("temperature", positive_float(self.temperature, "temperature"))

    def build(self) -> Objective:
        """The objective (built from its name with the particle options, or the one given)."""
        if not isinstance(self.objective, (str, ElboKind)):
            return self.objective
        vectorize = self.num_particles > 1 if self.vectorize_particles is None else self.vectorize_particles
        return make_objective(self.objective, self.num_particles, vectorize)

    def check_kl_scale(self, kl_scale: KLScale) -> None:
        """Refuses Blundell weights for a likelihood whose data term is not scaled by N/B."""
        if self.kl_weighting is KLWeighting.BLUNDELL and kl_scale is KLScale.PAPER:
            raise ValueError(
                "kl_weighting='blundell' assumes the data term is scaled by N/B, but the likelihood uses "
                "kl_scale='paper' (unscaled minibatch); use kl_weighting='uniform' or kl_scale='dataset'"
            )


@dataclass(frozen=True)
class ValidationOptions(Settings):
    """The per-epoch validation metrics on ``fit``'s ``val_loader`` (``Trainer(validation=...)``)."""

    num_val_samples: int | None = None
    """Posterior samples for the validation metrics; None: 16, rounded up to a multiple of a mixture guide's K
    (:meth:`~pyro_bnn.infer.validation.Validation.samples_for`)."""
    n_bins: int = 15
    """Calibration bins for the validation ECE and MCE."""

    def check(self) -> None:
        if self.num_val_samples is not None:
            _check_positive_int("num_val_samples", self.num_val_samples)
        _check_positive_int("n_bins", self.n_bins)


@dataclass(frozen=True)
class LRSchedulerOptions(Settings):
    """A learning-rate scheduler (``Trainer(lr_scheduler=...)``; a bare factory is this group's first field)."""

    factory: Callable[[torch.optim.Optimizer], Any] | None = None
    """``optimizer -> torch LR scheduler``, or None (no scheduler)."""
    interval: SchedulerInterval | str = SchedulerInterval.EPOCH
    """``"epoch"`` (step the scheduler after every epoch) or ``"step"`` (after every optimiser step)."""

    def check(self) -> None:
        _check_callable("the lr_scheduler factory", self.factory, "a function optimizer -> scheduler")
        self._set("interval", enum_member(SchedulerInterval, self.interval, "scheduler interval"))


@dataclass(frozen=True)
class RuntimeOptions(Settings):
    """Where and how the steps run (``Trainer(runtime=...)``)."""

    device: str | torch.device | None = None
    """Where to train; the model, priors, guide and batches move there. None: the model's device."""
    seed: int | None = None
    """Seeds Pyro/torch at the start of a fresh run (the guide's start, the draws, the minibatch order of loaders
    that draw from torch): two CPU runs with the same seed give identical results when their networks start alike.
    A network's initial weights are drawn when it is built, before the trainer: seed torch first for those."""
    progress: bool = True
    """Show a tqdm progress bar per epoch (in a terminal or a notebook); where stderr is a file or a pipe, one line
    per epoch with its mean loss instead."""
    cuda_graph: bool = True
    """On a CUDA device, replay each step from a captured CUDA graph where the objective and optimiser allow it
    (:mod:`pyro_bnn.infer.cuda_graph`; ``trainer.graph_reason`` says why not otherwise): the same random draws and,
    up to rounding, the same updates; a non-finite loss is then seen just after the step that used it."""
    nan_check_every: int = 1
    """Steps between host-side checks that the loss is finite. With 1 a NaN or infinite loss stops training before
    the optimiser step that would spread it; with k > 1 the check reads the device every k steps (cheaper on a GPU)
    and the error says the parameters may already be non-finite. Checkpoints are written at the end of an epoch
    only, so the last one stays good either way."""
    step_runner: StepRunnerFactory | None = None
    """A factory ``StepParts -> StepRunner`` (:mod:`pyro_bnn.infer.steps`) for the step itself, e.g.
    :class:`~pyro_bnn.infer.steps.EagerStep`; None: :func:`~pyro_bnn.infer.steps.default_step_runner`."""

    def check(self) -> None:
        if self.device is not None:
            self._set("device", torch.device(self.device))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral)):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")
        for name in ("progress", "cuda_graph"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        _check_positive_int("nan_check_every", self.nan_check_every)
        _check_callable("step_runner", self.step_runner, "a factory StepParts -> StepRunner")


@dataclass(frozen=True)
class ResumeOptions(Settings):
    """What a checkpoint records of the run and what a resume may change (``Trainer(resume=...)``)."""

    config: Mapping[str, Any] | None = None
    """JSON-serialisable description of the run, stored in checkpoints; a resume refuses a checkpoint whose config
    differs."""
    resume_may_change: Sequence[str] = field(default=())
    """Config keys that may differ on a resume (e.g. ``epochs``, to extend a finished run)."""

    def check(self) -> None:
        if self.config is not None and not isinstance(self.config, Mapping):
            raise ValueError(f"config must be a dict of JSON values or None, got {self.config!r}")
        keys = self.resume_may_change
        if isinstance(keys, str) or not all(isinstance(key, str) for key in keys):
            raise ValueError(f"resume_may_change must be a sequence of config keys (strings), got {keys!r}")
        self._set("resume_may_change", frozenset(keys))


_MOVED = {
    "num_particles": ("objective", "num_particles"),
    "vectorize_particles": ("objective", "vectorize_particles"),
    "kl_schedule": ("objective", "kl_schedule"),
    "kl_weighting": ("objective", "kl_weighting"),
    "num_val_samples": ("validation", "num_val_samples"),
    "n_bins": ("validation", "n_bins"),
    "lr_scheduler_interval": ("lr_scheduler", "interval"),
    "device": ("runtime", "device"),
    "seed": ("runtime", "seed"),
    "progress": ("runtime", "progress"),
    "cuda_graph": ("runtime", "cuda_graph"),
    "nan_check_every": ("runtime", "nan_check_every"),
    "step_runner": ("runtime", "step_runner"),
    "config": ("resume", "config"),
    "resume_may_change": ("resume", "resume_may_change"),
}
"""Each keyword the groups replaced: the Trainer parameter that now holds it and its field there."""

_GROUPS = {
    "objective": ObjectiveOptions,
    "validation": ValidationOptions,
    "lr_scheduler": LRSchedulerOptions,
    "runtime": RuntimeOptions,
    "resume": ResumeOptions,
}
"""Each group parameter of the Trainer and its options class (``objective`` and ``lr_scheduler`` also take their
group's first field bare)."""


class TrainerOptions(NamedTuple):
    """A trainer's option groups, as :func:`regroup` returns them."""

    objective: ObjectiveOptions
    lr_scheduler: LRSchedulerOptions
    validation: ValidationOptions
    runtime: RuntimeOptions
    resume: ResumeOptions


def regroup(groups: dict[str, Any], old: dict[str, Any]) -> TrainerOptions:
    """The Trainer's option groups from its group parameters (``groups``: name -> a group, None or, for
    ``objective`` and ``lr_scheduler``, the group's first field bare) and the keywords the groups replaced
    (``old``), with one DeprecationWarning naming the groups to use when ``old`` is not empty.

    Raises:
        TypeError: A keyword the Trainer never took.
        ValueError: A group given an option both inside it and beside it, or a group parameter of the wrong type.
    """
    unknown = sorted(set(old) - set(_MOVED))
    if unknown:
        raise TypeError(f"Trainer() got an unexpected keyword argument {unknown[0]!r}")
    result = {}
    for name, cls in _GROUPS.items():
        given = groups.get(name)
        moved = {_MOVED[key][1]: value for key, value in old.items() if _MOVED[key][0] == name}
        if isinstance(given, cls):
            if moved:
                raise ValueError(f"give {', '.join(moved)} inside {name}={cls.__name__}(...), not beside it")
            result[name] = given
            continue
        first = dataclasses.fields(cls)[0].name
        if given is not None and name not in ("objective", "lr_scheduler"):
            raise ValueError(f"{name} must be a {cls.__name__} or None, got {given!r}")
        result[name] = cls(**({first: given} if given is not None else {}), **moved)
    if old:
        advice = "; ".join(_advice(name, groups.get(name), [_MOVED[key][1] for key in old if _MOVED[key][0] == name])
                           for name in _GROUPS if any(_MOVED[key][0] == name for key in old))  # fmt: skip
        warnings.warn(
            f"Trainer({', '.join(f'{key}=' for key in old)}) is deprecated; group these options: {advice}",
            DeprecationWarning,
            stacklevel=3,
        )
    return TrainerOptions(**result)


def _advice(name: str, bare: object, fields: list[str]) -> str:
    """``objective=ObjectiveOptions('trace', num_particles=...)``: where the deprecated keywords ``fields`` go."""
    first = [repr(bare)] if bare is not None and not isinstance(bare, ElboKind) and not callable(bare) else []
    first += ["<factory>"] if callable(bare) and name == "lr_scheduler" else []
    return f"{name}={_GROUPS[name].__name__}({', '.join(first + [f'{field}=...' for field in fields])})"
