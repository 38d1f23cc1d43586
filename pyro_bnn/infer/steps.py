"""How a :class:`~pyro_bnn.infer.Trainer` takes one training step: the :class:`StepRunner` protocol, the eager step
(op by op) and the step replayed from a CUDA graph (:class:`~pyro_bnn.infer.cuda_graph.GraphedStep`).

The trainer builds its runner once its optimiser exists, from a factory ``StepParts -> StepRunner``: by default
:func:`default_step_runner` (the CUDA-graph step on a CUDA device where
:func:`~pyro_bnn.infer.cuda_graph.unavailable_reason` allows it, the eager step otherwise);
``Trainer(runtime=RuntimeOptions(step_runner=...))`` takes another factory, e.g. ``EagerStep`` or a class of one's
own. The trainer keeps everything around the step: KL weights, the NaN policy (which steps are checked and the error
raised), counters, schedulers and checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from pyro_bnn.infer.cuda_graph import GraphedStep, unavailable_reason
from pyro_bnn.infer.divergence import finite, is_argument_check
from pyro_bnn.infer.objectives import Objective, ObjectiveTerms


@dataclass(frozen=True)
class StepParts:
    """What a step runner trains, handed to its factory by the trainer once the optimiser exists.

    Attributes:
        objective: ``objective(model, guide, x, y, kl_weight) -> ObjectiveTerms``.
        model: The BNN.
        guide: Its guide.
        optimizer: The torch optimiser over ``params``.
        params: Every trained parameter (of the model and the guide).
        clip: ``clip(params)`` after the backward pass (gradient clipping), or None.
    """

    objective: Objective
    model: nn.Module
    guide: nn.Module
    optimizer: torch.optim.Optimizer
    params: list[nn.Parameter]
    clip: Callable[[list[nn.Parameter]], None] | None = None


class NonFiniteStep(Exception):
    """Raised by a step runner whose checked loss is NaN or infinite; the trainer turns it into a
    :class:`~pyro_bnn.infer.NonFiniteLossError` that says where and what to try.

    Args:
        loss: The loss read (NaN when the objective failed on non-finite values before giving one).
        applied: Whether the step's optimiser update has been made (a step replayed from a CUDA graph).
    """

    def __init__(self, loss: float, applied: bool = False) -> None:
        super().__init__(f"loss {loss}" + (" (update applied)" if applied else ""))
        self.loss, self.applied = loss, applied


@runtime_checkable
class StepRunner(Protocol):
    """Takes one training step: objective, backward pass, gradient clipping and optimiser step.

    ``step(x, y, kl_weight, check)`` returns the step's :class:`~pyro_bnn.infer.ObjectiveTerms` with the loss
    detached (scalars on the device, read by the trainer at logging intervals; they may be overwritten by the next
    step). With ``check``, a NaN or infinite loss raises :class:`NonFiniteStep`, before the optimiser update where the
    runner can.

    The trainer builds a runner for each ``fit``, unless the one it has has a ``new_fit()`` method: such a runner
    (one that keeps state across fits, as :class:`GraphedStepRunner` does) is kept, and ``new_fit()`` called at the
    start of every later ``fit``. A loaded checkpoint drops it.
    """

    def step(self, x: torch.Tensor, y: torch.Tensor, kl_weight: float, check: bool) -> ObjectiveTerms: ...


StepRunnerFactory = Callable[[StepParts], StepRunner]
"""Builds a trainer's step runner from its :class:`StepParts` (a runner class is one)."""


def parameters_finite(params: list[nn.Parameter]) -> bool:
    """Whether every parameter is finite (one host read for all of them)."""
    if not params:
        return True
    return bool(torch.stack([torch.isfinite(p).all() for p in params]).all())


class EagerStep:
    """The training step op by op, the default everywhere but on CUDA with a graph-safe objective.

    With ``check``, a non-finite loss raises :class:`NonFiniteStep` before the optimiser step, so the parameters
    stay as they were; so does a ``ValueError`` of the objective when the batch or the parameters are not finite (with
    ``pyro.enable_validation``, divergence shows up first as a distribution's argument check).
    """

    def __init__(self, parts: StepParts) -> None:
        self.parts = parts

    def step(self, x: torch.Tensor, y: torch.Tensor, kl_weight: float, check: bool = True) -> ObjectiveTerms:
        parts = self.parts
        parts.optimizer.zero_grad(set_to_none=True)
        try:
            terms = parts.objective(parts.model, parts.guide, x, y, kl_weight)
        except ValueError as err:
            if finite(x) and parameters_finite(parts.params) and not is_argument_check(err):
                raise
            raise NonFiniteStep(float("nan")) from err
        if check:
            loss_value = float(terms.loss.detach())
            if not math.isfinite(loss_value):
                raise NonFiniteStep(loss_value)
        terms.loss.backward()
        if parts.clip is not None:
            parts.clip(parts.params)
        parts.optimizer.step()
        # Detached: no autograd graph outlives the step.
        return ObjectiveTerms(terms.loss.detach(), terms.data_term, terms.kl_term)


class GraphedStepRunner:
    """Replays the step from a CUDA graph (:class:`~pyro_bnn.infer.cuda_graph.GraphedStep`, whose module docstring
    says what changes); the warm-up steps and batches of another shape run as :class:`EagerStep` on the graph's side
    stream. A non-finite loss is seen after a replayed step, whose update has been made (``applied``).

    Attributes:
        graphed: The :class:`~pyro_bnn.infer.cuda_graph.GraphedStep` (its ``captures`` and ``replays`` count).
        eager: The eager step it falls back to.
    """

    def __init__(self, parts: StepParts, warmup: int = 3) -> None:
        self.graphed = GraphedStep(
            parts.objective, parts.model, parts.guide, parts.optimizer, parts.params, clip=parts.clip, warmup=warmup
        )
        self.eager = EagerStep(parts)

    def new_fit(self) -> None:
        self.graphed.new_fit()

    def step(self, x: torch.Tensor, y: torch.Tensor, kl_weight: float, check: bool = True) -> ObjectiveTerms:
        terms = self.graphed.step(x, y, kl_weight)
        if terms is None:
            with self.graphed.eager_stream():
                return self.eager.step(x, y, kl_weight, check)
        if check:
            loss_value = float(terms.loss)
            if not math.isfinite(loss_value):
                raise NonFiniteStep(loss_value, applied=True)
        return terms


def default_step_runner(
    parts: StepParts, device: torch.device, *, per_step_scheduler: bool, cuda_graph: bool = True
) -> tuple[StepRunner, str | None]:
    """The trainer's default: :class:`GraphedStepRunner` where a CUDA graph can replay the step, :class:`EagerStep`
    otherwise; and why not the graph, in a few words (None with the graph).

    Args:
        parts: What the runner trains.
        device: The training device.
        per_step_scheduler: Whether a learning-rate scheduler steps after every optimiser step.
        cuda_graph: False turns the graph off.
    """
    reason = (
        unavailable_reason(parts.objective, device, parts.optimizer, per_step_scheduler)
        if cuda_graph
        else "turned off (cuda_graph=False)"
    )
    return (EagerStep(parts) if reason is not None else GraphedStepRunner(parts)), reason
