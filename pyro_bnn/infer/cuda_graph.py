"""A whole training step (objective, backward, gradient clipping, optimiser) captured once in a CUDA graph and
replayed.

On a GPU the fused mean-field step is a few hundred small kernels. Launched one by one from Python it costs about 3x a
deterministic step of the 3FC network on an H100 (5.8 ms against 2.0 ms at batch 128, ``bench/RESULTS.md``), and
nearly all of that is launch and interpreter overhead, not arithmetic. Replayed from a captured graph the same step
takes 1.1 ms.

:class:`GraphedStep` is what :class:`~pyro_bnn.infer.Trainer` uses (through the step runner
:class:`~pyro_bnn.infer.steps.GraphedStepRunner`, which runs the eager steps) when it trains on a CUDA device with an
objective that reads nothing back to the host in a step (``objective.graph_safe``, the fused
:class:`~pyro_bnn.infer.FastMeanFieldELBO`). It keeps the step's semantics:

* the first ``warmup`` steps run eagerly (lazy initialisation: optimiser state, cuBLAS workspaces), then one step is
  captured and every later step with a batch of the same shape replays it; other batches (the last, smaller one
  of an epoch) run eagerly, sharing the optimiser state;
* the batch and the KL weight are copied into the graph's static inputs before each replay (the KL weight as a
  0-dim device tensor, so annealing and minibatch weighting change it freely);
* the graph is captured again, after one eager step, when a learning rate or another optimiser setting changes (a
  per-epoch scheduler), when the objective's ``graph_key`` changes (the prior's values, for the fused objective)
  and when a later ``fit`` trains on batches of another shape;
* the random draws are the same as eager ones: the graph advances torch's CUDA generator on each replay, so
  seeding, checkpoints and resumes behave as without it.

What changes: a non-finite loss is seen after the replay, so the optimiser step that used it has been applied (the
trainer says so, and stops before any checkpoint is written from those parameters); and distribution argument
checks (``pyro.enable_validation``) are off inside the captured step, since they read values back to the host (the
trainer checks all training targets before the first step where the loader holds them as tensors, as
``BatchLoader`` and a ``TensorDataset`` do). A network whose forward reads values back to the host (``.item()``, a
data-dependent shape) cannot be captured: the capture fails with a message saying to train with
``cuda_graph=False``. The graph is used on the device of the batches, which need not be the current one.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Iterator

import pyro
import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.infer.annealing import check_kl_weight
from pyro_bnn.infer.objectives import ObjectiveTerms

GRAPHABLE_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)
"""Optimisers whose ``step`` may be captured (Adam and AdamW with ``capturable`` set while capturing; SGD needs
nothing)."""


def unavailable_reason(
    objective: object, device: torch.device, optimizer: torch.optim.Optimizer, per_step_scheduler: bool
) -> str | None:
    """Why a training step cannot be replayed from a CUDA graph, in a few words; None when it can.

    Args:
        objective: The trainer's objective (it must say ``graph_safe``).
        device: The training device (CUDA, with a CUDA build of torch).
        optimizer: The torch optimiser (one of :data:`GRAPHABLE_OPTIMIZERS`).
        per_step_scheduler: Whether a learning-rate scheduler steps after every optimiser step (each change of a
            rate needs a new capture, which per step would cost more than it saves).
    """
    if device.type != "cuda":
        return f"the device is {device.type}, not CUDA"
    if not getattr(objective, "graph_safe", False):
        return f"the objective {objective!r} reads values back to the host during a step"
    if type(optimizer) not in GRAPHABLE_OPTIMIZERS:
        names = ", ".join(cls.__name__ for cls in GRAPHABLE_OPTIMIZERS)
        return f"the optimiser is {type(optimizer).__name__}, not one of {names}"
    if per_step_scheduler:
        return "a learning-rate scheduler changes the rate after every step"
    return None


def _settings(optimizer: torch.optim.Optimizer) -> tuple:
    """The optimiser's scalar settings (learning rates, betas, weight decay, ...), which a capture bakes in."""
    return tuple(
        tuple(sorted((k, v) for k, v in group.items() if k != "params" and isinstance(v, (numbers.Number, tuple))))
        for group in optimizer.param_groups
    )


class SideStream:
    """The CUDA stream a graphed step runs its eager steps and captures on, made at first use and held as long as
    its owner (:class:`GraphedStep`, :class:`~pyro_bnn.batched.graph.GraphedBatchedStep`).

    Held, not made per step: the eager steps' allocations (optimiser state among them) are recorded against it. A
    benchmark variant that let its warm-up stream be freed while such memory was in use corrupted other steps'
    memory on an H100 (NaN losses, illegal addresses); keeping it alive fixed that. And autograd creates a leaf's
    gradient accumulator on the stream of the first backward pass that needs it: one created on the default stream
    and still alive at a capture on another stream breaks the capture, so eager steps run here too.
    """

    def __init__(self) -> None:
        self._stream: torch.cuda.Stream | None = None

    def stream(self, device: torch.device) -> torch.cuda.Stream:
        """The stream (made on ``device`` the first time)."""
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=device)
        return self._stream

    @contextlib.contextmanager
    def use(self, device: torch.device) -> Iterator[None]:
        """Runs the enclosed work on the stream, with ``device`` current, ordered after the work queued before it on
        the device's current stream and before the work queued there after it."""
        stream = self.stream(device)
        current = torch.cuda.current_stream(device)
        stream.wait_stream(current)
        with torch.cuda.device(device), torch.cuda.stream(stream):
            yield
        current.wait_stream(stream)


class GraphedStep:
    """Replays the training step of a model, guide, objective and optimiser from a CUDA graph.

    Args:
        objective: ``objective(model, guide, x, y, kl_weight) -> ObjectiveTerms``, graph-safe (see
            :func:`unavailable_reason`); it is called with ``kl_weight`` as a 0-dim tensor.
        model: The BNN.
        guide: Its guide.
        optimizer: The optimiser over ``params``.
        params: Every trained parameter (for ``clip``).
        clip: ``clip(params)`` after the backward pass (gradient clipping), or None.
        warmup: Eager steps before the capture.

    Call :meth:`step` once per training step. It returns None when the step must run eagerly (warm-up, or a batch
    whose shape, dtype or device differs from the captured one), which the caller does inside :meth:`eager_stream`;
    otherwise it has taken the step and returns the graph's :class:`~pyro_bnn.infer.ObjectiveTerms` (detached),
    whose tensors are overwritten by the next replay (read or copy them before the next call).

    Eager steps and captures run on a side stream owned by this object (:class:`SideStream` says why).

    Shapes:
        ``x``: ``(B, *input_shape)``; ``y``: ``(B,)`` or ``(B, D_out)``; returned terms: scalars.
    """

    def __init__(
        self,
        objective: Callable[..., ObjectiveTerms],
        model: torch.nn.Module,
        guide: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        *,
        clip: Callable[[list[torch.nn.Parameter]], None] | None = None,
        warmup: int = 3,
    ) -> None:
        warmup = positive_int(warmup, "warmup")
        self.objective, self.model, self.guide = objective, model, guide
        self.optimizer, self.params, self.clip = optimizer, params, clip
        self.eager_left = warmup
        self.captures = 0
        """How many times the step has been captured (1, plus one per change of the optimiser's settings, the
        objective's ``graph_key`` or the batch shape of a later ``fit``)."""
        self.replays = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static: dict[str, torch.Tensor] = {}
        self._terms: ObjectiveTerms | None = None
        self._signature: tuple | None = None
        self._captured: tuple | None = None
        self._side = SideStream()

    def new_fit(self) -> None:
        """Starts a new ``fit``: its first batch sets the captured shape again (a capture of another shape is made
        when its first replay is due)."""
        self._signature = None

    def _key(self) -> tuple:
        """What a capture bakes in besides the batch shape: the optimiser's settings and the objective's
        ``graph_key(model, guide)`` (the prior's values for the fused objective)."""
        graph_key = getattr(self.objective, "graph_key", None)
        objective_key = graph_key(self.model, self.guide) if graph_key is not None else None
        return _settings(self.optimizer), objective_key

    def eager_stream(self) -> contextlib.AbstractContextManager[None]:
        """Runs the enclosed eager step on this object's side stream, ordered after the work queued before it and
        before the work queued after it (call after :meth:`step` returned None)."""
        return self._side.use(self._signature[2])

    @staticmethod
    def _signature_of(x: torch.Tensor, y: torch.Tensor) -> tuple:
        return x.shape, x.dtype, x.device, y.shape, y.dtype, y.device

    def step(self, x: torch.Tensor, y: torch.Tensor, kl_weight: float) -> ObjectiveTerms | None:
        """One training step from the graph, or None (the caller takes this step eagerly).

        Args:
            x: Inputs ``(B, *input_shape)`` on the training device.
            y: Targets ``(B, ...)`` on the training device.
            kl_weight: The KL factor of this step (a finite number >= 0).

        Raises:
            ValueError: ``kl_weight`` is not a finite number >= 0.
            RuntimeError: The capture failed (the model's forward reads values back to the host, say); the message
                says how to train without the graph.
        """
        kl_weight = check_kl_weight(kl_weight)
        signature = self._signature_of(x, y)
        if self._signature is None:
            self._signature = signature  # the first batch's shape is the one captured (later ones may be smaller)
        if signature != self._signature:
            return None
        if self._graph is not None and self._captured != (signature, *self._key()):
            # Stale: one eager step first lets the objective re-plan outside a capture (planning reads values).
            self._graph, self._terms = None, None
            self.eager_left = 1
        if self.eager_left > 0:
            self.eager_left -= 1
            return None
        with torch.cuda.device(x.device):
            if self._graph is None:
                self._capture(x, y)
            static = self._static
            static["x"].copy_(x, non_blocking=True)
            static["y"].copy_(y, non_blocking=True)
            static["kl_weight"].fill_(kl_weight)
            self._graph.replay()
        self.replays += 1
        return self._terms

    def _capture(self, x: torch.Tensor, y: torch.Tensor) -> None:
        # Drop the previous capture, its outputs and gradients, so that its memory pool can be freed.
        self._graph, self._terms = None, None
        self.optimizer.zero_grad(set_to_none=True)
        dtype = self.params[0].dtype if self.params else torch.float32
        self._static = {
            "x": x.detach().clone(),
            "y": y.detach().clone(),
            "kl_weight": torch.ones((), dtype=dtype, device=x.device),
        }
        groups = self.optimizer.param_groups
        capturable = [group.get("capturable") for group in groups]
        for group in groups:
            if "capturable" in group:
                group["capturable"] = True
        for state in self.optimizer.state.values():
            # Adam keeps its step count on the host unless capturable or fused; a capture needs it on the device.
            step = state.get("step")
            if isinstance(step, torch.Tensor) and step.device != x.device:
                state["step"] = step.to(x.device)
        # The gradients are None now, so the captured backward pass allocates them from the graph's own memory, and
        # each replay writes them there again.
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: work other threads queue meanwhile (a DataLoader's pin-memory thread) does not break it.
            with (
                pyro.validation_enabled(False),
                torch.cuda.graph(graph, stream=self._side.stream(x.device), capture_error_mode="thread_local"),
            ):
                terms = self.objective(
                    self.model, self.guide, self._static["x"], self._static["y"], self._static["kl_weight"]
                )
                terms.loss.backward()
                if self.clip is not None:
                    self.clip(self.params)
                self.optimizer.step()
        except RuntimeError as err:
            raise RuntimeError(
                f"capturing the training step in a CUDA graph failed ({str(err).splitlines()[0]}); the network's "
                "forward may read values back to the host. Train with cuda_graph=False (--no-cuda-graph) to run "
                "the step op by op"
            ) from err
        finally:
            for group, value in zip(groups, capturable, strict=True):
                if value is not None:
                    group["capturable"] = value  # as the user built it (and as checkpoints store it)
        # Detached: the static loss's autograd graph (and the gradient accumulators it holds) is not kept alive.
        self._graph = graph
        self._terms = ObjectiveTerms(terms.loss.detach(), terms.data_term, terms.kl_term)
        self._captured = (self._signature_of(x, y), *self._key())
        self.captures += 1
