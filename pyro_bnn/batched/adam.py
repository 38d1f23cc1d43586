"""Adam over stacked parameters ``(R, ...)``: each run its own learning rate, weight decay and step count, and a
mask that freezes runs (diverged or stopped) without touching the others.

Two ways of computing the same update (torch's ``Adam`` formula, L2 weight decay added to the gradient):

* **rows** (large stacks): torch's own ``torch.optim.Adam`` (the fused kernel where torch has one for the device)
  over the rows of the stacked tensors. Each row ``p[r]`` is a leaf that shares the stacked tensor's memory, so an
  update of the row is an update of the stack, and each row has its own state (``step``, ``exp_avg``,
  ``exp_avg_sq``), exactly what a run trained alone keeps. Rows are grouped by ``(lr, weight_decay)``, one parameter
  group each; a frozen run's rows get no gradient, which torch's Adam skips.
* **stacked** (at most :data:`STACKED_MAX_ELEMENTS` values): the moments are ``(R, ...)`` tensors and the step
  counts an ``(R,)`` tensor, and one update is a dozen vectorised operations over all runs, learning rates, weight
  decays and step counts as per-run factors. For the moons net's 32 runs torch's Adam spends most of its time in a
  Python loop over the 64 row tensors; the stacked update takes a tenth of that. Each run's state is a dict of
  views into the stacked tensors (:meth:`BatchedAdam.row_state`).

Either way :meth:`BatchedAdam.row_state` is run ``r``'s state for one stacked parameter, the dict a run's own torch
``Adam`` keeps for the same values (:mod:`.exchange` ties the two together).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from pyro_bnn.infer.optim import fused_adam_args

STACKED_MAX_ELEMENTS = 1 << 16
"""Stacks with at most this many values in all (R times the weights per run, every parameter counted) update with
the stacked formula; larger ones with torch's fused Adam over rows, which makes one pass over memory where the
formula makes about ten."""


def run_count(params: Sequence[torch.Tensor], owner: str) -> int:
    """R, the leading run dimension every stacked parameter ``(R, ...)`` of a batched optimiser shares.

    Raises:
        ValueError: No parameter, or parameters with different leading dimensions (one line naming ``owner``).
    """
    if not params:
        raise ValueError(f"{owner} needs at least one parameter")
    runs = {p.shape[0] for p in params}
    if len(runs) != 1:
        raise ValueError(f"every stacked parameter needs the same leading run dimension, got {sorted(runs)}")
    return runs.pop()


class BatchedAdam:
    """Adam on a list of stacked parameters, each ``(R, *shape)``.

    Args:
        params: The stacked leaves; :meth:`step` reads their ``.grad``.
        betas: Adam's betas, shared by the runs.
        eps: Adam's epsilon, shared by the runs.
        stacked: Use the stacked update (True) or torch's Adam over rows (False); default: by size
            (:data:`STACKED_MAX_ELEMENTS`). The two agree to rounding.

    Attributes:
        num_runs: R.
        stacked: Which of the two updates :meth:`step` makes.
        row_keys: The per-parameter tensors of a run's torch Adam state, each shaped like the parameter (with them a
            ``"step"`` count).
    """

    row_keys = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        stacked: bool | None = None,
    ):
        self.params = list(params)
        self.num_runs = run_count(self.params, "BatchedAdam")
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)
        total = sum(p.numel() for p in self.params)
        self.stacked = total <= STACKED_MAX_ELEMENTS if stacked is None else bool(stacked)
        if self.stacked:
            scalar = torch.float32  # torch's Adam keeps its step count as a float32 tensor
            self._moments = [
                (torch.zeros(self.num_runs, dtype=scalar, device=p.device), torch.zeros_like(p), torch.zeros_like(p))
                for p in self.params
            ]
            self._row_states = [
                [{"step": step[r], "exp_avg": m[r], "exp_avg_sq": v[r]} for r in range(self.num_runs)]
                for step, m, v in self._moments
            ]
        else:
            # detach() shares memory with the stack; each row is a leaf of its own for the optimiser.
            self._rows = [[p.detach()[r].requires_grad_() for r in range(self.num_runs)] for p in self.params]
            flat = [row for rows in self._rows for row in rows]
            self._optimizer = torch.optim.Adam(
                flat, **fused_adam_args({"lr": 1e-3, "betas": self.betas, "eps": self.eps}, flat)
            )
            self._groups_key: tuple | None = None

    # ------------------------------------------------------------------------------------------- run states
    def row_state(self, leaf: int, run: int) -> dict:
        """Run ``run``'s Adam state for ``params[leaf]``: ``{"step", "exp_avg", "exp_avg_sq"}`` (each the shape of
        one row), or ``{}`` before its first update (rows only)."""
        if self.stacked:
            return self._row_states[leaf][run]
        return self._optimizer.state.get(self._rows[leaf][run], {})

    def share(self, leaf: int, run: int, state: dict) -> dict:
        """Makes ``state`` (a run's own Adam state for the parameter that is row ``run`` of ``params[leaf]``, maybe
        empty) the row's state, and returns the dict the run's optimiser must hold from now on so that the two stay
        one: ``state`` itself (rows), or the row's views after ``state``'s values are copied in (stacked)."""
        if not self.stacked:
            self._optimizer.state[self._rows[leaf][run]] = state
            return state
        self.load_row(leaf, run, state)
        return self._row_states[leaf][run]

    @torch.no_grad()
    def load_row(self, leaf: int, run: int, state: dict | None) -> None:
        """Sets run ``run``'s state for ``params[leaf]`` to a copy of ``state`` (``{"step", "exp_avg",
        "exp_avg_sq"}`` shaped like one row), or to a fresh one for None or ``{}``."""
        fresh = not state or "exp_avg" not in state
        if not self.stacked:
            row = self._rows[leaf][run]
            if fresh:
                self._optimizer.state.pop(row, None)
            else:
                self._optimizer.state[row] = {k: torch.as_tensor(v).clone() for k, v in state.items()}
            return
        step, m, v = self._moments[leaf]
        if fresh:
            step[run], m[run], v[run] = 0.0, 0.0, 0.0
        else:
            step[run] = float(state["step"])
            m[run].copy_(state["exp_avg"].reshape(m[run].shape))
            v[run].copy_(state["exp_avg_sq"].reshape(v[run].shape))

    # ------------------------------------------------------------------------------------------------ update
    def _regroup(self, lrs: Sequence[torch.Tensor], weight_decays: Sequence[torch.Tensor | None]) -> None:
        """One parameter group per distinct ``(lr, weight_decay)`` (the state, keyed by row, is kept)."""
        settings = [
            (lr.tolist(), [0.0] * self.num_runs if wd is None else wd.tolist())
            for lr, wd in zip(lrs, weight_decays, strict=True)
        ]
        key = tuple((tuple(lr), tuple(wd)) for lr, wd in settings)
        if key == self._groups_key:
            return
        defaults = {k: v for k, v in self._optimizer.param_groups[0].items() if k != "params"}
        groups: dict[tuple[float, float], list[torch.Tensor]] = {}
        for rows, (lr, wd) in zip(self._rows, settings, strict=True):
            for r, row in enumerate(rows):
                groups.setdefault((lr[r], wd[r]), []).append(row)
        self._optimizer.param_groups = [
            {**defaults, "lr": lr, "weight_decay": wd, "params": rows} for (lr, wd), rows in groups.items()
        ]
        self._groups_key = key

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
            lrs: Per stacked parameter, the runs' learning rates ``(R,)`` (on the host for the rows update).
            weight_decays: Per stacked parameter, the runs' weight decays ``(R,)`` or None (no decay).
            active: ``(R,)`` bool: runs to update; the others keep their parameters and state exactly. None: all.
            host_active: For the rows update, the runs to update as known on the host, read instead of ``active``
                (which it would read back from the device: a CUDA graph cannot capture that).
        """
        weight_decays = weight_decays if weight_decays is not None else [None] * len(self.params)
        if self.stacked:
            self._stacked_step(lrs, weight_decays, active)
            return
        self._regroup(lrs, weight_decays)
        if host_active is not None:
            keep = list(host_active)
        else:
            keep = [True] * self.num_runs if active is None else active.tolist()
        for p, rows in zip(self.params, self._rows, strict=True):
            grad = p.grad
            for r, row in enumerate(rows):
                row.grad = grad[r] if grad is not None and keep[r] else None
        self._optimizer.step()

    @contextlib.contextmanager
    def capturable(self) -> Iterator[None]:
        """Lets torch's Adam of the rows update be captured in a CUDA graph (its ``capturable`` flag, on only while
        capturing, as :class:`~pyro_bnn.infer.cuda_graph.GraphedStep` does for one run)."""
        if self.stacked:
            yield
            return
        groups = self._optimizer.param_groups
        before = [group.get("capturable", False) for group in groups]
        for group in groups:
            group["capturable"] = True
        try:
            yield
        finally:
            for group, value in zip(groups, before, strict=True):
                group["capturable"] = value

    def _stacked_step(
        self,
        lrs: Sequence[torch.Tensor],
        weight_decays: Sequence[torch.Tensor | None],
        active: torch.Tensor | None,
    ) -> None:
        """torch's Adam formula (``torch.optim.adam``, not capturable, no amsgrad) over ``(R, ...)`` tensors."""
        beta1, beta2 = self.betas
        for p, (step, m, v), lr, wd in zip(self.params, self._moments, lrs, weight_decays, strict=True):
            if p.grad is None:
                continue
            shape = (self.num_runs,) + (1,) * (p.dim() - 1)  # per-run factors broadcast over a row
            grad = p.grad if wd is None else p.grad + wd.to(p.device, p.dtype).reshape(shape) * p
            count = step + 1 if active is None else step + active.to(step.dtype)
            m_new = m + (grad - m) * (1 - beta1)
            v_new = v * beta2 + grad.square() * (1 - beta2)
            # step_size = lr / (1 - beta1^t); denom = sqrt(v) / sqrt(1 - beta2^t) + eps, in float64 then p's dtype
            t = count.double()
            step_size = (lr.to(t.device) / (1 - beta1**t)).to(p.dtype).reshape(shape)
            root = (1 - beta2**t).sqrt().to(p.dtype).reshape(shape)
            update = step_size * m_new / (v_new.sqrt() / root + self.eps)
            if active is None:
                m.copy_(m_new)
                v.copy_(v_new)
                p.sub_(update)
            else:
                keep = active.reshape(shape)
                m.copy_(torch.where(keep, m_new, m))
                v.copy_(torch.where(keep, v_new, v))
                p.sub_(torch.where(keep, update, torch.zeros((), dtype=p.dtype, device=p.device)))
            step.copy_(count)
