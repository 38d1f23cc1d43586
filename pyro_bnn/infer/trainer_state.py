"""What a :class:`~pyro_bnn.infer.Trainer` checkpoint holds, and putting it back: the trainer's state as a dict of
tensors and JSON strings (so :func:`~pyro_bnn.infer.checkpoint.load_checkpoint` reads it without unpickling
arbitrary objects).

:class:`TrainerState` names the parts of a trainer a checkpoint covers; :class:`RunState` holds the counters and the
history, which the trainer keeps in one (``trainer.run_state``) and a resume replaces.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pyro_bnn._io import JsonListText
from pyro_bnn.infer.checkpoint import CheckpointMismatchError, config_differences, state_dict_mismatch

if TYPE_CHECKING:
    from pyro_bnn.infer.callbacks import Callback
    from pyro_bnn.infer.trainer import Trainer


@dataclass
class RunState:
    """How far training has gone: what a resume continues from (``trainer.run_state``)."""

    epoch: int = 0
    """Completed epochs."""
    global_step: int = 0
    """Optimiser steps taken."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """One record per completed epoch."""
    history_json: JsonListText = field(default_factory=JsonListText, repr=False, compare=False)
    """Encodes :attr:`history` for checkpoints (``json.dumps(history)``), each record once."""
    resumed_epochs: int = 0
    """The epochs a resume restored from a checkpoint (0: trained from the start); the first records of
    :attr:`history` are theirs."""


@dataclass(frozen=True)
class TrainerState:
    """The parts of a set-up trainer that a checkpoint saves and a resume restores (in place: the modules, the
    optimiser, the scheduler and the callbacks load their state dicts; ``run``'s fields are replaced).

    The checkpoint also holds the random state (torch's CPU generator and every CUDA generator).
    """

    run: RunState
    model: nn.Module
    guide: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any | None
    callbacks: Sequence[Callback]
    config: dict[str, Any]

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's contents (the format :func:`~pyro_bnn.infer.checkpoint.save_checkpoint` adds aside)."""
        return {
            "epoch": self.run.epoch,
            "global_step": self.run.global_step,
            "model": self.model.state_dict(),
            "guide": self.guide.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "optimizer_class": class_name(type(self.optimizer)),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else {},
            "config": json.dumps(self.config),
            "history": self.run.history_json.text(self.run.history),
            "callbacks": {_callback_key(i, cb): cb.state_dict() for i, cb in enumerate(self.callbacks)},
            "rng_torch": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def load_state_dict(
        self, state: dict[str, Any], source: str | os.PathLike, resume_may_change: Iterable[str] = ()
    ) -> None:
        """Puts :meth:`state_dict`'s ``state`` (read from ``source``, named in errors) back.

        Raises:
            ValueError: The state was written with a config that differs from :attr:`config` in a key outside
                ``resume_may_change``.
        """
        try:
            self.model.load_state_dict(state["model"])
            self.guide.load_state_dict(state["guide"])
            _check_optimizer_class(self.optimizer, state["optimizer"], state.get("optimizer_class"))
            _check_optimizer_state(self.optimizer, state["optimizer"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as err:
            raise CheckpointMismatchError(
                f"cannot resume from {source}: it does not fit this trainer: {state_dict_mismatch(err)}"
            ) from err
        if self.scheduler is not None and state["scheduler"]:
            self.scheduler.load_state_dict(state["scheduler"])
        self.run.epoch, self.run.global_step = int(state["epoch"]), int(state["global_step"])
        self.run.resumed_epochs = self.run.epoch
        self.run.history = json.loads(state["history"])
        saved_config = json.loads(state["config"])
        if self.config and saved_config:
            differing = config_differences(saved_config, self.config, ignore=resume_may_change)
            if differing:
                raise ValueError(f"cannot resume from {source}: it was written with a different config ({differing})")
        for i, callback in enumerate(self.callbacks):
            key = _callback_key(i, callback)
            if key in state.get("callbacks", {}):
                callback.load_state_dict(state["callbacks"][key])
        torch.set_rng_state(state["rng_torch"].cpu())
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])


PARAMETER_SHAPED_STATE = frozenset(
    {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "square_avg", "grad_avg", "sum",
     "acc_delta", "prev", "step_size", "ax"}
)  # fmt: skip
"""The per-parameter state of torch's optimisers that has the parameter's shape (Adam's moments, SGD's momentum,
...); other keys may have another (Adafactor's factored ``row_var`` and ``col_var``) and are not checked."""


def class_name(kind: type) -> str:
    """``module.qualname`` of a class, as a checkpoint records its optimiser's (``torch.optim.adam.Adam``)."""
    return f"{kind.__module__}.{kind.__qualname__}"


IMPLEMENTATION_OPTIONS = frozenset(
    {"params", "name", "initial_lr", "foreach", "fused", "capturable", "differentiable", "maximize"}
)
"""Parameter-group keys that say nothing of which optimiser wrote a state: the parameters, ParamGroups' name, the
``initial_lr`` an LR scheduler adds, and implementation switches that torch versions add to one class or another."""


def _check_optimizer_class(optimizer: torch.optim.Optimizer, saved: dict[str, Any], recorded: str | None) -> None:
    """Refuses an optimiser state written by another optimiser class: ``load_state_dict`` takes any, and the first
    step then fails inside torch (an Adam state in SGD: ``KeyError: 'momentum'``) or the load says only
    ``it holds no 'step'``.

    ``recorded`` is the class the checkpoint names (:func:`class_name`); a checkpoint written before it recorded one
    is judged by its parameter groups' options: one this optimiser does not have (SGD's ``momentum`` in an Adam
    trainer, Adam's ``betas`` in an SGD one) says another class wrote it. Classes with the same options (Adam and
    AdamW) are not told apart there, and the other checks still apply.
    """
    current = class_name(type(optimizer))
    if recorded is not None:
        if recorded != current:
            names = [name.rsplit(".", 1)[-1] for name in (recorded, current)]
            if names[0] == names[1]:  # two classes of one name (a user's Adam): the modules tell them apart
                names = [recorded, current]
            raise ValueError(f"it was written by the optimiser {names[0]}, this trainer's is {names[1]}")
        return
    options = {key for group in optimizer.param_groups for key in group}
    foreign = sorted(
        {key for group in saved.get("param_groups", []) for key in group} - options - IMPLEMENTATION_OPTIONS
    )
    if foreign:
        raise ValueError(
            f"its optimiser state has options {', '.join(foreign)} that this trainer's {type(optimizer).__name__} "
            "does not have: another optimiser class wrote it"
        )


def _check_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Refuses a saved optimiser state whose parameter-shaped tensors (:data:`PARAMETER_SHAPED_STATE`: Adam's
    moments) differ in shape from the parameters they belong to: ``load_state_dict`` takes them, and a fused step
    then reads past their end (a segmentation fault on the CPU)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    indices = [i for group in saved.get("param_groups", []) for i in group.get("params", [])]
    if len(indices) != len(params):
        raise ValueError(f"the optimiser state covers {len(indices)} parameters, this trainer has {len(params)}")
    for index, param in zip(indices, params, strict=True):
        for name, value in saved.get("state", {}).get(index, {}).items():
            if name in PARAMETER_SHAPED_STATE and isinstance(value, torch.Tensor) and value.shape != param.shape:
                raise ValueError(
                    f"the optimiser's {name!r} of parameter {index} has shape {tuple(value.shape)}, the parameter "
                    f"{tuple(param.shape)}"
                )


def _callback_key(index: int, callback: Callback) -> str:
    return f"{index}:{type(callback).__name__}"


def trainer_state_dict(trainer: Trainer) -> dict[str, Any]:
    """Everything a resume needs: model, guide, optimiser, scheduler, counters, history, config, callbacks' state and
    the random state (:meth:`TrainerState.state_dict` of ``trainer.checkpoint_state()``)."""
    return trainer.checkpoint_state().state_dict()


def restore_trainer_state(trainer: Trainer, state: dict[str, Any], source: str | os.PathLike) -> None:
    """Puts :func:`trainer_state_dict`'s ``state`` (read from ``source``, named in errors) back into a set-up trainer.

    Raises:
        ValueError: The state was written with a config that differs from the trainer's in a key outside
            ``trainer.resume_may_change``.
    """
    trainer.checkpoint_state().load_state_dict(state, source, trainer.resume_may_change)
