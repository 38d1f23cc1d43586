"""Adam over stacked parameters ``(R, ...)``: each run its own learning rate, weight decay and step count, and a
mask that freezes runs (diverged or stopped) without touching the others.

The update is torch's Adam (``torch.optim.Adam`` with ``amsgrad=False``, ``maximize=False``), element for element:
``m = lerp(m, g, 1 - beta1)``, ``v = beta2 v + (1 - beta2) g^2``, ``p -= lr / (1 - beta1^t) * m / (sqrt(v) /
sqrt(1 - beta2^t) + eps)``, with ``g = grad + weight_decay * p``. The moments are kept in the same layout as the
parameters, so :meth:`BatchedAdam.state_of` hands one run's state to an ordinary torch optimiser.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _per_run(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(R,)`` → ``(R, 1, ..., 1)`` broadcasting against ``like`` ``(R, ...)``."""
    return values.view(values.shape[0], *[1] * (like.dim() - 1))


class BatchedAdam:
    """Adam on a list of stacked parameters, each ``(R, *shape)`` with its ``.grad``.

    Args:
        params: The stacked leaves.
        betas: Adam's betas, shared by the runs.
        eps: Adam's epsilon, shared by the runs.

    Attributes:
        exp_avg, exp_avg_sq: The moments, one tensor per parameter, shaped like it.
        steps: ``(R,)`` float64: the updates each run has taken.
    """

    def __init__(self, params: Sequence[torch.Tensor], *, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        if not params:
            raise ValueError("BatchedAdam needs at least one parameter")
        runs = {p.shape[0] for p in params}
        if len(runs) != 1:
            raise ValueError(f"every stacked parameter needs the same leading run dimension, got {sorted(runs)}")
        self.params = list(params)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.steps = torch.zeros(runs.pop(), dtype=torch.float64, device=self.params[0].device)

    @property
    def num_runs(self) -> int:
        return self.steps.shape[0]

    @torch.no_grad()
    def step(
        self,
        lrs: Sequence[torch.Tensor],
        weight_decays: Sequence[torch.Tensor | None] | None = None,
        active: torch.Tensor | None = None,
    ) -> None:
        """One update of every active run.

        Args:
            lrs: Per parameter, the runs' learning rates ``(R,)``.
            weight_decays: Per parameter, the runs' weight decays ``(R,)`` or None (no decay).
            active: ``(R,)`` bool: runs to update; the others keep their parameters, moments and step count
                exactly. None: all.
        """
        beta1, beta2 = self.betas
        all_active = active is None or bool(active.all())
        if not all_active:
            self.steps += active.to(self.steps.dtype)
        else:
            self.steps += 1
        bc1 = 1 - beta1**self.steps
        bc2_sqrt = (1 - beta2**self.steps).sqrt()
        decays = weight_decays if weight_decays is not None else [None] * len(self.params)
        for p, m, v, lr, wd in zip(self.params, self.exp_avg, self.exp_avg_sq, lrs, decays, strict=True):
            grad = p.grad
            if grad is None:
                continue
            if wd is not None:
                grad = grad + _per_run(wd.to(p.dtype), p) * p
            step_size = _per_run((lr.to(torch.float64) / bc1).to(p.dtype), p)
            denom_scale = _per_run(bc2_sqrt.to(p.dtype), p)
            if all_active:
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                p.sub_(step_size * m / (v.sqrt() / denom_scale).add_(self.eps))
                continue
            keep = _per_run(active, p)
            new_m = torch.lerp(m, grad, 1 - beta1)
            new_v = (v * beta2).addcmul_(grad, grad, value=1 - beta2)
            new_p = p - step_size * new_m / (new_v.sqrt() / denom_scale).add_(self.eps)
            m.copy_(torch.where(keep, new_m, m))
            v.copy_(torch.where(keep, new_v, v))
            p.copy_(torch.where(keep, new_p, p))

    def state_of(self, run: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``run``'s moments ``(exp_avg, exp_avg_sq)`` of parameter ``index`` (views)."""
        return self.exp_avg[index][run], self.exp_avg_sq[index][run]
