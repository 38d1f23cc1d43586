"""What a :class:`~pyro_bnn.infer.Trainer` checkpoint holds, and putting it back: the trainer's state as a dict of
tensors and JSON strings (so :func:`~pyro_bnn.infer.checkpoint.load_checkpoint` reads it without unpickling
arbitrary objects)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import torch

from pyro_bnn.infer.checkpoint import config_differences

if TYPE_CHECKING:
    from pyro_bnn.infer.trainer import Trainer


def trainer_state_dict(trainer: Trainer) -> dict[str, Any]:
    """Everything a resume needs: model, guide, optimiser, scheduler, counters, history, config, callbacks' state and
    the random state (torch's CPU generator and every CUDA generator)."""
    if trainer.optimizer is None:
        raise RuntimeError("nothing to save before training has started")
    return {
        "epoch": trainer.epoch,
        "global_step": trainer.global_step,
        "model": trainer.bnn.state_dict(),
        "guide": trainer.guide.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else {},
        "config": json.dumps(trainer.config),
        "history": json.dumps(trainer.history),
        "callbacks": {f"{i}:{type(cb).__name__}": cb.state_dict() for i, cb in enumerate(trainer.callbacks)},
        "rng_torch": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_trainer_state(trainer: Trainer, state: dict[str, Any], source: str | os.PathLike) -> None:
    """Puts :func:`trainer_state_dict`'s ``state`` (read from ``source``, named in errors) back into a set-up trainer.

    Raises:
        ValueError: The state was written with a config that differs from the trainer's in a key outside
            ``trainer.resume_may_change``.
    """
    trainer.bnn.load_state_dict(state["model"])
    trainer.guide.load_state_dict(state["guide"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.scheduler is not None and state["scheduler"]:
        trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.epoch, trainer.global_step = int(state["epoch"]), int(state["global_step"])
    trainer.history = json.loads(state["history"])
    saved_config = json.loads(state["config"])
    if trainer.config and saved_config:
        differing = config_differences(saved_config, trainer.config, ignore=trainer.resume_may_change)
        if differing:
            raise ValueError(f"cannot resume from {source}: it was written with a different config ({differing})")
    for i, callback in enumerate(trainer.callbacks):
        key = f"{i}:{type(callback).__name__}"
        if key in state.get("callbacks", {}):
            callback.load_state_dict(state["callbacks"][key])
    torch.set_rng_state(state["rng_torch"].cpu())
    if state["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])
