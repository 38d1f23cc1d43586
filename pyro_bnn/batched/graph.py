"""The step of R runs captured once in a CUDA graph and replayed, as :mod:`pyro_bnn.infer.cuda_graph` does for one
run.

On a GPU a batched step of small networks is a few hundred small kernels launched one by one from Python; replayed
from a captured graph they run back to back. :class:`GraphedBatchedStep` wraps a :class:`~.step.BatchedStep` and
keeps its semantics exactly:

* every input of a step (the runs' batches ``x``, ``y``, KL weights, noise ``eps``, learning rates, weight decays
  and the mask of runs still training) is copied into the graph's static tensors before each replay, so schedules,
  divergence and early stopping change them freely; the noise is drawn eagerly from each run's own generator, as
  without the graph, so a run's draws are the same either way;
* a run whose loss is not finite is frozen inside the graph by the same mask as eagerly (no value is read back to
  the host during a step), so one diverging run leaves the others' results unchanged;
* the first ``warmup`` steps run eagerly (optimiser state, cuBLAS workspaces), then one step is captured; a batch of
  another shape (the last, smaller one of an epoch), or a change of which parameters have weight decay, runs
  eagerly, and the latter is captured again;
* with the stacked Adam update (:class:`~.adam.BatchedAdam`, small stacks) the learning rates, weight decays and
  the mask of active runs are inputs of the graph; with torch's fused Adam over rows (large stacks) they are baked
  in, and the step is captured again when one changes (a per-epoch learning-rate schedule, a run that fails or
  stops). The rows update skips the inactive runs, but applies the step of a run whose loss turned non-finite during
  that very replay (the host learns of it afterwards, as with a single run's graphed step, and the error says so):
  that run is failed after the step, its guide is not written back (its last good checkpoint stays its result),
  though its optimiser's state in memory has taken the update. Eager steps skip such a run, as without a graph.

A network whose forward reads values back to the host cannot be captured: the capture fails with a message saying to
train with ``cuda_graph=False``.
"""

from __future__ import annotations

import pyro
import torch

from pyro_bnn.batched.step import BatchedStep, BatchedTerms, StepInputs
from pyro_bnn.checks import positive_int
from pyro_bnn.infer.cuda_graph import SideStream


class GraphedBatchedStep:
    """Replays :meth:`BatchedStep.step <pyro_bnn.batched.step.BatchedStep.step>` from a CUDA graph.

    Args:
        step: The eager step (stacked or rows Adam update).
        warmup: Eager steps before the first capture.

    Call it as the eager step is called; it returns what the eager step returns. The returned tensors of a replay
    are the graph's own and are overwritten by the next replay: read or copy them first (queued device work, such as
    adding them to a running total, is ordered before the next replay).

    Shapes:
        As :meth:`BatchedStep.step`: ``x (R, B, *input_shape)``, ``y (R, B[, D_out])``, ``kl_weight (R,)``,
        ``eps (R, D)`` (``(R, P, D)`` for P particles, ``(R, B M)`` for point estimates with dropout,
        ``(R, B S, D)`` for node noise), ``lrs`` and ``weight_decays`` one ``(R,)`` per stacked leaf, ``active (R,)``
        bool.
    """

    def __init__(self, step: BatchedStep, *, warmup: int = 2) -> None:
        warmup = positive_int(warmup, "warmup")
        self.eager = step
        self.eager_left = warmup
        self.captures = 0
        """How many times the step was captured."""
        self.replays = 0
        """How many steps were replayed from a graph."""
        self.last_replayed = False
        """Whether the last step was replayed (False: it ran eagerly)."""
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static: StepInputs | None = None
        self._key: tuple | None = None
        self._outputs: tuple[BatchedTerms, torch.Tensor] | None = None
        self._side = SideStream()
        """Where eager steps and captures run (:class:`pyro_bnn.infer.cuda_graph.SideStream`)."""

    def _key_of(self, inputs: StepInputs) -> tuple:
        """What a capture bakes in: the shapes, dtypes and device of the inputs, which leaves decay, and for the
        rows update the learning rates, weight decays and active runs themselves."""
        tensors = (inputs.x, inputs.y, inputs.kl_weight, inputs.eps)
        key = (
            tuple((t.shape, t.dtype, t.device) for t in tensors),
            len(inputs.lrs),
            tuple(wd is None for wd in inputs.weight_decays),
        )
        if self.eager.optimizer.stacked:
            return key
        decays = (wd for wd in inputs.weight_decays if wd is not None)
        settings = tuple(tuple(t.tolist()) for t in [*inputs.lrs, *decays])
        return (*key, settings, tuple(inputs.active.tolist()))

    def __call__(self, inputs: StepInputs) -> tuple[BatchedTerms, torch.Tensor]:
        """One step of every run (see :meth:`BatchedStep.step`): replayed, or eager while warming up and for a
        batch of another shape. ``lrs``, ``weight_decays`` and ``active`` are read on the host (CPU tensors are
        best: no read back from the device).

        Raises:
            RuntimeError: The capture failed (the network's forward reads values back to the host, say); the message
                says how to train without the graph.
        """
        x, lrs, weight_decays, active = inputs.x, inputs.lrs, inputs.weight_decays, inputs.active
        weight_decays = list(weight_decays) if weight_decays is not None else [None] * len(lrs)
        active = torch.ones(x.shape[0], dtype=torch.bool) if active is None else active.cpu()
        inputs = inputs._replace(weight_decays=weight_decays, active=active)
        key = self._key_of(inputs)
        if self._key is None:
            self._key = key  # the first batch's shapes are the ones captured (the last batch may be smaller)
        same_shapes = key[0] == self._key[0]
        if same_shapes and key != self._key:  # a setting the graph bakes in changed: one eager step, then capture
            self._graph, self._outputs, self._key = None, None, key
            self.eager_left = max(self.eager_left, 1)
        if not same_shapes or self.eager_left > 0:
            if same_shapes:
                self.eager_left -= 1
            self.last_replayed = False
            with self._side.use(x.device):
                # Eagerly the rows update reads the runs that stayed finite back from the device and skips the others.
                return self.eager.step(inputs)
        with torch.cuda.device(x.device):
            if self._graph is None:
                self._capture(inputs)
            static = self._static
            for name in ("x", "y", "kl_weight", "eps", "active"):
                getattr(static, name).copy_(getattr(inputs, name), non_blocking=True)
            if self.eager.optimizer.stacked:
                for target, value in zip(static.lrs, lrs, strict=True):
                    target.copy_(value)
                for target, value in zip(static.weight_decays, weight_decays, strict=True):
                    if target is not None:
                        target.copy_(value)
            self._graph.replay()
        self.replays += 1
        self.last_replayed = True
        return self._outputs

    def _capture(self, inputs: StepInputs) -> None:
        # Drop the previous capture and its outputs, so that its memory pool can be freed.
        self._graph, self._outputs = None, None
        device = inputs.x.device
        stacked = self.eager.optimizer.stacked
        static = StepInputs(
            x=inputs.x.detach().clone(),
            y=inputs.y.detach().clone(),
            kl_weight=inputs.kl_weight.detach().clone(),
            eps=inputs.eps.detach().clone(),
            active=inputs.active.to(device, copy=True),
            # The stacked update reads them on the device (a copy from the host cannot be captured); the rows update
            # reads them on the host while capturing, and they are baked in.
            lrs=[lr.to(device, copy=True) for lr in inputs.lrs] if stacked else list(inputs.lrs),
            weight_decays=[None if wd is None else wd.to(device, copy=True) for wd in inputs.weight_decays]
            if stacked
            else list(inputs.weight_decays),
        )
        for leaf in self.eager.stack.leaves:
            leaf.grad = None  # allocated by the captured backward pass from the graph's memory, rewritten each replay
        graph = torch.cuda.CUDAGraph()
        try:
            with (
                pyro.validation_enabled(False),
                self.eager.optimizer.capturable(),
                torch.cuda.graph(graph, stream=self._side.stream(device), capture_error_mode="thread_local"),
            ):
                outputs = self.eager.step(static, host_active=inputs.active.tolist())
        except RuntimeError as err:
            raise RuntimeError(
                f"capturing the batched training step in a CUDA graph failed ({str(err).splitlines()[0]}); the "
                "network's forward may read values back to the host. Train with cuda_graph=False to run the step op "
                "by op"
            ) from err
        self._graph, self._static, self._outputs = graph, static, outputs
        self.captures += 1


__all__ = ["GraphedBatchedStep"]
