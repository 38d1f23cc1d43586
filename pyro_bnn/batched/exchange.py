"""Moving Adam's state between the batched optimiser and each run's own ``torch.optim.Adam``, so that a batched
run's checkpoint holds exactly what a single run's would (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter) and a
run resumed alone, or in another batch, continues where it stopped."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pyro_bnn.batched.adam import BatchedAdam
from pyro_bnn.batched.stack import RunStack


def _pieces(stack: RunStack, run: int, leaf: int, row: torch.Tensor) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """Run ``run``'s parameters held by leaf ``leaf`` of the stack, each with its part of ``row`` (one run's row of
    a tensor laid out like that leaf), shaped like the parameter."""
    if leaf < 2:
        segments = stack.layouts[run].segments
        return [(s.loc if leaf == 0 else s.raw_scale, row[s.start : s.stop].view_as(s.loc)) for s in segments]
    (param,) = stack.run_parameters(run)[leaf]
    return [(param, row)]


def _group(optimizer: torch.optim.Optimizer, param: nn.Parameter) -> dict:
    for group in optimizer.param_groups:
        if any(p is param for p in group["params"]):
            return group
    raise ValueError("a trained parameter is in none of the optimiser's groups")


def check_adam(optimizers: Sequence[torch.optim.Optimizer]) -> tuple[tuple[float, float], float]:
    """The betas and eps the runs' optimisers share.

    Raises:
        ValueError: An optimiser is not a plain ``torch.optim.Adam``, or the runs' betas or eps differ.
    """
    shared = None
    for run, optimizer in enumerate(optimizers):
        if type(optimizer) is not torch.optim.Adam:
            raise ValueError(f"batched runs train with Adam; run {run} uses {type(optimizer).__name__}")
        for group in optimizer.param_groups:
            if group.get("amsgrad") or group.get("maximize") or group.get("differentiable"):
                raise ValueError(
                    f"run {run}'s Adam uses amsgrad, maximize or differentiable, which batched runs do not"
                )
            settings = (tuple(group["betas"]), group["eps"])
            if shared is None:
                shared = settings
            elif settings != shared:
                raise ValueError(
                    f"run {run}'s Adam has betas and eps {settings}, run 0's {shared}: batch runs that share them"
                )
    return shared


class OptimizerBridge:
    """Reads the runs' learning rates and weight decays each step, and copies Adam's moments both ways.

    Args:
        stack: The runs' stacked values.
        adam: The batched optimiser over ``stack.leaves``.
        optimizers: Each run's own torch Adam (over the same parameters as its guide and network).
    """

    def __init__(self, stack: RunStack, adam: BatchedAdam, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        self.stack, self.adam, self.optimizers = stack, adam, list(optimizers)
        # (run, leaf) -> the group that holds the leaf's parameters in that run's optimiser
        self._groups = [
            [_group(opt, params[0]) for params in stack.run_parameters(run)] for run, opt in enumerate(self.optimizers)
        ]
        device = stack.loc.device
        self._device = device

    def learning_rates(self) -> list[torch.Tensor]:
        """Per leaf, the runs' current learning rates ``(R,)`` (float64)."""
        leaves = len(self.stack.leaves)
        values = [[groups[leaf]["lr"] for groups in self._groups] for leaf in range(leaves)]
        return [torch.tensor(v, dtype=torch.float64, device=self._device) for v in values]

    def weight_decays(self) -> list[torch.Tensor | None]:
        """Per leaf, the runs' weight decays ``(R,)``, or None for a leaf no run decays."""
        out = []
        for leaf in range(len(self.stack.leaves)):
            values = [groups[leaf].get("weight_decay", 0.0) for groups in self._groups]
            out.append(None if not any(values) else torch.tensor(values, device=self._device))
        return out

    @torch.no_grad()
    def load(self, run: int) -> None:
        """Copies run ``run``'s torch Adam state (after a checkpoint was loaded) into the batched moments."""
        optimizer = self.optimizers[run]
        steps = set()
        for leaf in range(len(self.stack.leaves)):
            m_row, v_row = self.adam.exp_avg[leaf][run], self.adam.exp_avg_sq[leaf][run]
            for (param, m), (_, v) in zip(
                _pieces(self.stack, run, leaf, m_row), _pieces(self.stack, run, leaf, v_row), strict=True
            ):
                state = optimizer.state.get(param, {})
                if "exp_avg" not in state:
                    m.zero_()
                    v.zero_()
                    steps.add(0.0)
                    continue
                m.copy_(state["exp_avg"])
                v.copy_(state["exp_avg_sq"])
                steps.add(float(state["step"]))
        if len(steps) > 1:
            raise ValueError(f"run {run}'s Adam state has different step counts {sorted(steps)} across its parameters")
        self.adam.steps[run] = steps.pop() if steps else 0.0

    @torch.no_grad()
    def store(self, run: int) -> None:
        """Writes the batched moments of run ``run`` into its own torch Adam's state (copies)."""
        optimizer = self.optimizers[run]
        step = float(self.adam.steps[run])
        for leaf in range(len(self.stack.leaves)):
            m_row, v_row = self.adam.exp_avg[leaf][run], self.adam.exp_avg_sq[leaf][run]
            for (param, m), (_, v) in zip(
                _pieces(self.stack, run, leaf, m_row), _pieces(self.stack, run, leaf, v_row), strict=True
            ):
                state = optimizer.state[param]
                if "step" in state:
                    old = state["step"]
                    state["step"] = torch.tensor(step, dtype=old.dtype, device=old.device)
                else:
                    # torch keeps the count as a float32 tensor on the parameter's device for fused or capturable
                    # Adam, else on the CPU (float64 under a float64 default dtype).
                    group = _group(optimizer, param)
                    on_device = group.get("fused") or group.get("capturable")
                    dtype = (
                        torch.float64 if torch.get_default_dtype() == torch.float64 and not on_device else torch.float32
                    )
                    state["step"] = torch.tensor(step, dtype=dtype, device=param.device if on_device else "cpu")
                state["exp_avg"] = m.clone(memory_format=torch.contiguous_format)
                state["exp_avg_sq"] = v.clone(memory_format=torch.contiguous_format)
