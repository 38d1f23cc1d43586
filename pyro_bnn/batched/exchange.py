"""Adam's state between the batched optimiser and each run's own ``torch.optim.Adam``, so that a batched run's
checkpoint holds exactly what a single run's would (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter) and a run
resumed alone, or in another batch, continues where it stopped.

Where a run's parameter is a whole row of a stacked tensor (the flat guide's ``loc`` and ``log_scale``, a
deterministic parameter), the run's optimiser and the batched one share that row's state
(:meth:`~pyro_bnn.batched.adam.BatchedAdam.share`): nothing is copied after the start. Where a row holds several of
the run's parameters (Bayes by Backprop's per-site ``mu`` and ``rho``), the row's moments are copied into the run's
state at the end of each epoch, and back when a run resumes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pyro_bnn.batched.adam import BatchedAdam
from pyro_bnn.batched.sgd import BatchedSGD
from pyro_bnn.batched.stack import RunStack


def _pieces(stack: RunStack, run: int, leaf: int, row: torch.Tensor) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """Run ``run``'s parameters held by leaf ``leaf`` of the stack, each with its part of ``row`` (one run's row of
    a tensor laid out like that leaf), shaped like the parameter."""
    if leaf < len(stack.guide_leaves):
        segments = stack.layouts[run].segments
        return [(s.loc if leaf == 0 else s.raw_scale, row[..., s.start : s.stop].view_as(s.loc)) for s in segments]
    (param,) = stack.run_parameters(run)[leaf]
    return [(param, row)]


_HOW = frozenset({"params", "name", "foreach", "fused", "capturable"})
"""Group entries that say which parameters a group holds or how torch computes its update, not what the update is:
the groups holding the parameters of one stacked tensor may differ in these."""


def _leaf_groups(optimizer: torch.optim.Optimizer, params: Sequence[nn.Parameter]) -> tuple[dict, ...]:
    """The distinct groups of ``optimizer`` that hold ``params`` (one run's parameters of one stacked tensor), in
    the order of ``params``."""
    by_param = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    groups: dict[int, dict] = {}
    for param in params:
        if id(param) not in by_param:
            raise ValueError("a trained parameter is in none of the optimiser's groups")
        groups.setdefault(id(by_param[id(param)]), by_param[id(param)])
    return tuple(groups.values())


def _one_setting(run: int, optimizer: torch.optim.Optimizer, groups: Sequence[dict], key: str, default=None):
    """The value of ``key`` that all of ``groups`` share (the groups of one run's stacked tensor).

    Raises:
        ValueError: Two of them differ (one line): the batched optimiser takes one value per run and stacked
            tensor, and would otherwise give every parameter in it the first group's.
    """
    value = groups[0].get(key, default)
    for group in groups[1:]:
        other = group.get(key, default)
        if other != value:
            index = {id(g): i for i, g in enumerate(optimizer.param_groups)}  # by identity: == compares tensors
            names = [g.get("name", index[id(g)]) for g in (groups[0], group)]
            raise ValueError(
                f"run {run}'s {type(optimizer).__name__} groups {names[0]!r} and {names[1]!r} hold parameters the "
                f"batch stacks into one tensor, with {key} {value!r} and {other!r}: a batch takes one {key} per run "
                "and stacked tensor; train the run alone"
            )
    return value


def check_adam(optimizers: Sequence[torch.optim.Optimizer]) -> tuple[tuple[float, float], float]:
    """The betas and eps the runs' optimisers share.

    Raises:
        ValueError: An optimiser is not a plain ``torch.optim.Adam``, or the runs' betas or eps differ.
    """
    return _shared_settings(optimizers, torch.optim.Adam, _adam_settings)


def _adam_settings(run: int, group: dict) -> tuple:
    if any(group.get(k) for k in ("amsgrad", "maximize", "differentiable", "decoupled_weight_decay")):
        raise ValueError(
            f"run {run}'s Adam uses amsgrad, maximize, differentiable or decoupled weight decay, which batched runs "
            "do not take"
        )
    return tuple(group["betas"]), group["eps"]


def _sgd_settings(run: int, group: dict) -> tuple:
    if group.get("dampening") or group.get("maximize") or group.get("differentiable"):
        raise ValueError(f"run {run}'s SGD uses dampening, maximize or differentiable, which batched runs do not take")
    return float(group["momentum"]), bool(group["nesterov"])


_SETTING_NAMES = {torch.optim.Adam: "betas and eps", torch.optim.SGD: "momentum and nesterov"}


def _shared_settings(optimizers: Sequence[torch.optim.Optimizer], kind: type, settings_of) -> tuple:
    """The settings every parameter group of every run shares (one line naming the run and group otherwise)."""
    shared, first = None, None
    names = _SETTING_NAMES[kind]
    for run, optimizer in enumerate(optimizers):
        if type(optimizer) not in _SETTING_NAMES:
            raise ValueError(
                f"run {run} trains with {type(optimizer).__name__}; batched runs take torch.optim.Adam or "
                "torch.optim.SGD only: train the run alone"
            )
        if type(optimizer) is not kind:
            raise ValueError(
                f"batched runs train with one optimiser, Adam or SGD; run {run} uses {type(optimizer).__name__}, run "
                f"0 {kind.__name__}"
            )
        for index, group in enumerate(optimizer.param_groups):
            settings = settings_of(run, group)
            where = f"run {run}'s {kind.__name__} group {group.get('name', index)!r}"
            if shared is None:
                shared, first = settings, where
            elif settings != shared:
                raise ValueError(
                    f"{where} has {names} {settings}, {first} {shared}: a batch takes one of each for all its runs "
                    "and groups; train the run alone"
                )
    return shared


def batched_optimizer(
    optimizers: Sequence[torch.optim.Optimizer], leaves: Sequence[torch.Tensor], *, stacked: bool | None = None
) -> BatchedAdam | BatchedSGD:
    """The batched optimiser over ``leaves`` that updates each run as its own optimiser would: a
    :class:`~pyro_bnn.batched.adam.BatchedAdam` for runs trained with ``torch.optim.Adam`` (its update ``stacked``
    or over rows; None: by size), a :class:`~pyro_bnn.batched.sgd.BatchedSGD` for ``torch.optim.SGD`` (the settings
    every group of every run shares: Adam's betas and eps, SGD's momentum and Nesterov flag).

    Raises:
        ValueError: The runs use another optimiser, different ones, or settings that differ (one line).
    """
    if optimizers and type(optimizers[0]) is torch.optim.SGD:
        momentum, nesterov = _shared_settings(optimizers, torch.optim.SGD, _sgd_settings)
        return BatchedSGD(leaves, momentum=momentum, nesterov=nesterov)
    betas, eps = check_adam(optimizers)
    return BatchedAdam(leaves, betas=betas, eps=eps, stacked=stacked)


class OptimizerBridge:
    """Reads the runs' learning rates and weight decays, and ties each run's optimiser state (Adam's moments, SGD's
    momentum buffer) to the batched one.

    Args:
        stack: The runs' stacked values.
        optimizer: The batched optimiser over ``stack.leaves`` (:func:`batched_optimizer`).
        optimizers: Each run's own torch optimiser (over the same parameters as its guide and network).

    Raises:
        ValueError: A run's parameters stacked into one tensor sit in groups whose options differ (one line naming
            the run, the groups and the option): at the start, or when a schedule moves their rates apart.
    """

    def __init__(
        self, stack: RunStack, optimizer: BatchedAdam | BatchedSGD, optimizers: Sequence[torch.optim.Optimizer]
    ) -> None:
        self.stack, self.optimizer, self.optimizers = stack, optimizer, list(optimizers)
        # (run, leaf) -> the groups that hold the leaf's parameters in that run's optimiser; every option that
        # changes the update must agree among them (a per-site lr or weight decay would be the first site's)
        self._groups = [
            [_leaf_groups(opt, params) for params in stack.run_parameters(run)]
            for run, opt in enumerate(self.optimizers)
        ]
        for run, groups in enumerate(self._groups):
            for leaf_groups in groups:
                for key in sorted({k for g in leaf_groups for k in g} - _HOW):
                    _one_setting(run, self.optimizers[run], leaf_groups, key)
        self._runs, self._leaves = range(len(self.optimizers)), range(len(stack.leaves))
        self._cached: tuple | None = None
        self._shared_params = [
            [self._find_shared(run, leaf) for leaf in range(len(stack.leaves))] for run in range(len(self.optimizers))
        ]

    def learning_rates(self) -> list[torch.Tensor]:
        """Per leaf, the runs' current learning rates ``(R,)`` (float64; the same tensors while nothing changes)."""
        values = tuple(tuple(self._setting(run, leaf, "lr") for run in self._runs) for leaf in self._leaves)
        if self._cached is None or self._cached[0] != values:
            self._cached = (values, [torch.tensor(v, dtype=torch.float64) for v in values])
        return self._cached[1]

    def weight_decays(self) -> list[torch.Tensor | None]:
        """Per leaf, the runs' weight decays ``(R,)``, or None for a leaf no run decays."""
        out = []
        for leaf in range(len(self.stack.leaves)):
            values = [self._setting(run, leaf, "weight_decay", 0.0) for run in self._runs]
            out.append(None if not any(values) else torch.tensor(values, dtype=torch.float64))
        return out

    def _setting(self, run: int, leaf: int, key: str, default=None):
        """Run ``run``'s ``key`` for leaf ``leaf``, checked again on every read: a schedule may move the groups of one
        stacked tensor apart during training (a one-line ValueError then, as at the start)."""
        groups = self._groups[run][leaf]
        if len(groups) == 1:
            return groups[0].get(key, default)
        return _one_setting(run, self.optimizers[run], groups, key, default)

    def _shared(self, run: int, leaf: int) -> nn.Parameter | None:
        """The run's parameter that is the whole row ``leaf`` (so the two can share one state), or None."""
        return self._shared_params[run][leaf]

    def _find_shared(self, run: int, leaf: int) -> nn.Parameter | None:
        row = self.stack.leaves[leaf].detach()[run]
        pieces = _pieces(self.stack, run, leaf, row)
        if len(pieces) == 1 and pieces[0][0].shape == row.shape:
            return pieces[0][0]
        return None

    @torch.no_grad()
    def load(self, run: int) -> None:
        """Ties run ``run``'s Adam state (fresh, or loaded from a checkpoint) to the batched optimiser's."""
        optimizer = self.optimizers[run]
        for leaf in range(len(self.stack.leaves)):
            param = self._shared(run, leaf)
            if param is not None:  # one state for both, updated in place by the batched step
                optimizer.state[param] = self.optimizer.share(leaf, run, optimizer.state[param])
                continue
            pieces = _pieces(self.stack, run, leaf, self.stack.leaves[leaf].detach()[run])
            saved = [optimizer.state.get(p, {}) for p, _ in pieces]
            keys = self.optimizer.row_keys
            if not all(s.get(k) is not None for s in saved for k in keys):
                self.optimizer.load_row(leaf, run, None)
                continue
            state = {k: torch.cat([s[k].reshape(-1) for s in saved]) for k in keys}
            if "step" in saved[0]:  # Adam's step count, one per parameter and the same for all of a run's
                state["step"] = saved[0]["step"]
            self.optimizer.load_row(leaf, run, state)

    @torch.no_grad()
    def store(self, run: int) -> None:
        """Writes run ``run``'s batched moments into its own Adam's state where the two do not share it (copies)."""
        optimizer = self.optimizers[run]
        for leaf in range(len(self.stack.leaves)):
            if self._shared(run, leaf) is not None:
                continue
            state = self.optimizer.row_state(leaf, run)
            if not state:
                continue
            pieces = {k: _pieces(self.stack, run, leaf, state[k]) for k in self.optimizer.row_keys}
            for index, (param, _) in enumerate(pieces[self.optimizer.row_keys[0]]):
                saved = {k: pieces[k][index][1].clone(memory_format=torch.contiguous_format) for k in pieces}
                if "step" in state:
                    saved["step"] = state["step"].clone()
                optimizer.state[param] = saved
