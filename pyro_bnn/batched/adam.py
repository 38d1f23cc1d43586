"""Adam over stacked parameters ``(R, ...)``: each run its own learning rate, weight decay and step count, and a
mask that freezes runs (diverged or stopped) without touching the others.

It is torch's own ``torch.optim.Adam`` (the fused kernel where torch has one for the device) over the rows of the
stacked tensors: each row ``p[r]`` is a leaf that shares the stacked tensor's memory, so an update of the row is an
update of the stack, and each row has its own state (``step``, ``exp_avg``, ``exp_avg_sq``), exactly what a run
trained alone keeps for the same values. Rows are grouped by ``(lr, weight_decay)``, one parameter group each (so
one kernel call updates every run with the same settings); a frozen run's rows get no gradient, which torch's Adam
skips, leaving their values and state as they were.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pyro_bnn.infer.optim import fused_adam_args


class BatchedAdam:
    """Adam on a list of stacked parameters, each ``(R, *shape)``.

    Args:
        params: The stacked leaves; :meth:`step` reads their ``.grad``.
        betas: Adam's betas, shared by the runs.
        eps: Adam's epsilon, shared by the runs.

    Attributes:
        rows: Per stacked parameter, its R row leaves (``rows[i][r]`` shares the memory of ``params[i][r]``).
        optimizer: The torch Adam over every row.
    """

    def __init__(self, params: Sequence[torch.Tensor], *, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        if not params:
            raise ValueError("BatchedAdam needs at least one parameter")
        runs = {p.shape[0] for p in params}
        if len(runs) != 1:
            raise ValueError(f"every stacked parameter needs the same leading run dimension, got {sorted(runs)}")
        self.params = list(params)
        self.num_runs = runs.pop()
        """R, the number of runs."""
        # detach() shares memory with the stack; each row is a leaf of its own for the optimiser.
        self.rows = [[p.detach()[r].requires_grad_() for r in range(self.num_runs)] for p in self.params]
        flat = [row for rows in self.rows for row in rows]
        self.optimizer = torch.optim.Adam(flat, **fused_adam_args({"lr": 1e-3, "betas": betas, "eps": eps}, flat))
        self._groups_key: tuple | None = None

    def _regroup(self, lrs: Sequence[torch.Tensor], weight_decays: Sequence[torch.Tensor | None]) -> None:
        """One parameter group per distinct ``(lr, weight_decay)`` (the state, keyed by row, is kept)."""
        settings = [
            (lr.tolist(), [0.0] * self.num_runs if wd is None else wd.tolist())
            for lr, wd in zip(lrs, weight_decays, strict=True)
        ]
        key = tuple((tuple(lr), tuple(wd)) for lr, wd in settings)
        if key == self._groups_key:
            return
        defaults = {k: v for k, v in self.optimizer.param_groups[0].items() if k != "params"}
        groups: dict[tuple[float, float], list[torch.Tensor]] = {}
        for rows, (lr, wd) in zip(self.rows, settings, strict=True):
            for r, row in enumerate(rows):
                groups.setdefault((lr[r], wd[r]), []).append(row)
        self.optimizer.param_groups = [
            {**defaults, "lr": lr, "weight_decay": wd, "params": rows} for (lr, wd), rows in groups.items()
        ]
        self._groups_key = key

    @torch.no_grad()
    def step(
        self,
        lrs: Sequence[torch.Tensor],
        weight_decays: Sequence[torch.Tensor | None] | None = None,
        active: torch.Tensor | None = None,
    ) -> None:
        """One update of every active run.

        Args:
            lrs: Per stacked parameter, the runs' learning rates ``(R,)``.
            weight_decays: Per stacked parameter, the runs' weight decays ``(R,)`` or None (no decay).
            active: ``(R,)`` bool: runs to update; the others keep their parameters and state exactly. None: all.
        """
        weight_decays = weight_decays if weight_decays is not None else [None] * len(self.params)
        self._regroup(lrs, weight_decays)
        keep = [True] * self.num_runs if active is None else active.tolist()
        for p, rows in zip(self.params, self.rows, strict=True):
            grad = p.grad
            for r, row in enumerate(rows):
                row.grad = grad[r] if grad is not None and keep[r] else None
        self.optimizer.step()
