"""SGD with momentum over stacked parameters ``(R, ...)``: each run its own learning rate and weight decay, a mask
that freezes runs without touching the others, and the momentum buffer a run trained alone keeps.

torch's ``SGD`` formula (``torch.optim.sgd``, L2 weight decay added to the gradient, no dampening)::

    d = grad + wd * p;   buf = momentum * buf + d;   p -= lr * (d + momentum * buf if nesterov else buf)

over ``(R, ...)`` tensors, the learning rates and weight decays as per-run factors. torch starts a buffer at the first
step's ``d``, which is ``momentum * 0 + d``: a buffer of zeros is the same start, so a fresh run's state is zeros.
The implicit-BNN authors' optimiser is this with Nesterov momentum 0.9 (``--optimizer sgd``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from pyro_bnn.batched.adam import run_count
from pyro_bnn.checks import non_negative_float


class BatchedSGD:
    """SGD on a list of stacked parameters, each ``(R, *shape)``, with the interface of
    :class:`~pyro_bnn.batched.adam.BatchedAdam` (always the stacked update).

    Args:
        params: The stacked leaves; :meth:`step` reads their ``.grad``.
        momentum: Shared by the runs (0: plain SGD, no buffer).
        nesterov: Nesterov momentum, shared by the runs.

    Attributes:
        num_runs: R.
        stacked: True: one vectorised update over all runs (the learning rates, weight decays and the mask of
            active runs are tensors, so a CUDA graph takes them as inputs).
        row_keys: The per-parameter tensors of a run's torch SGD state, each shaped like the parameter.
    """

    stacked = True
    row_keys = ("momentum_buffer",)

    def __init__(self, params: Sequence[torch.Tensor], *, momentum: float = 0.0, nesterov: bool = False) -> None:
        self.params = list(params)
        self.num_runs = run_count(self.params, "BatchedSGD")
        self.momentum = non_negative_float(momentum, "BatchedSGD: momentum")
        if nesterov and self.momentum == 0:
            raise ValueError("BatchedSGD: nesterov needs momentum > 0")
        self.nesterov = bool(nesterov)
        self._momentum = [torch.zeros_like(p) for p in self.params]

    # ------------------------------------------------------------------------------------------- run states
    def row_state(self, leaf: int, run: int) -> dict:
        """Run ``run``'s SGD state for ``params[leaf]``: ``{"momentum_buffer"}`` (a view of one row), ``{}`` without
        momentum."""
        return {"momentum_buffer": self._momentum[leaf][run]} if self.momentum else {}

    def share(self, leaf: int, run: int, state: dict) -> dict:
        """Copies ``state`` (a run's own SGD state for the parameter that is row ``run`` of ``params[leaf]``, maybe
        empty) into the row, and returns the dict the run's optimiser must hold from now on: the row's views."""
        self.load_row(leaf, run, state)
        return self.row_state(leaf, run)

    @torch.no_grad()
    def load_row(self, leaf: int, run: int, state: dict | None) -> None:
        """Sets run ``run``'s buffer for ``params[leaf]`` to a copy of ``state["momentum_buffer"]`` (shaped like one
        row), or to zeros (a fresh start) for None, ``{}`` or a buffer not made yet."""
        buffer = (state or {}).get("momentum_buffer")
        row = self._momentum[leaf][run]
        if buffer is None:
            row.zero_()
        else:
            row.copy_(buffer.reshape(row.shape))

    # ------------------------------------------------------------------------------------------------ update
    @torch.no_grad()
    def step(
        self,
        lrs: Sequence[torch.Tensor],
        weight_decays: Sequence[torch.Tensor | None] | None = None,
        active: torch.Tensor | None = None,
        *,
        host_active: Sequence[bool] | None = None,
    ) -> None:
        """One update of every active run.

        Args:
            lrs: Per stacked parameter, the runs' learning rates ``(R,)``.
            weight_decays: Per stacked parameter, the runs' weight decays ``(R,)`` or None (no decay).
            active: ``(R,)`` bool: runs to update; the others keep their parameters and buffers exactly. None: all.
            host_active: Not needed (the update reads ``active`` on the device); accepted for the common interface.
        """
        weight_decays = weight_decays if weight_decays is not None else [None] * len(self.params)
        for p, buffer, lr, wd in zip(self.params, self._momentum, lrs, weight_decays, strict=True):
            if p.grad is None:
                continue
            shape = (self.num_runs,) + (1,) * (p.dim() - 1)  # per-run factors broadcast over a row
            d = p.grad if wd is None else p.grad + wd.to(p.device, p.dtype).reshape(shape) * p
            if self.momentum:
                new_buffer = buffer * self.momentum + d
                d = d + self.momentum * new_buffer if self.nesterov else new_buffer
            update = lr.to(p.device, p.dtype).reshape(shape) * d
            if active is None:
                if self.momentum:
                    buffer.copy_(new_buffer)
                p.sub_(update)
            else:
                keep = active.to(p.device).reshape(shape)
                if self.momentum:
                    buffer.copy_(torch.where(keep, new_buffer, buffer))
                p.sub_(torch.where(keep, update, torch.zeros((), dtype=p.dtype, device=p.device)))

    @contextlib.contextmanager
    def capturable(self) -> Iterator[None]:
        """Nothing to switch: the stacked update is captured as it is."""
        yield
