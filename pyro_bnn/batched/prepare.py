"""What :func:`~pyro_bnn.batched.fit_batched` does before its first step: the checks that need no built run, and
each run set up as ``Trainer.fit`` sets it up (seeded, its first batch seen, its checkpoint loaded)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import pyro

from pyro_bnn.checks import non_negative_int
from pyro_bnn.infer.trainer import Trainer, _check_all_labels, _dataset_size


def check_trainers(trainers: Sequence[Trainer], loaders: Sequence[Iterable], epochs: int) -> int:
    """The number of steps per epoch every run takes.

    Raises:
        ValueError: The trainers and loaders cannot train as one batch (one line naming the reason).
    """
    if not trainers:
        raise ValueError("fit_batched needs at least one trainer")
    if len(loaders) != len(trainers):
        raise ValueError(f"fit_batched needs one training loader per trainer, got {len(loaders)} for {len(trainers)}")
    if len({id(t) for t in trainers}) != len(trainers):
        raise ValueError("the same trainer appears twice in the batch")
    non_negative_int(epochs, "epochs")
    devices = {str(t.device) for t in trainers}
    if len(devices) != 1:
        raise ValueError(f"the runs of a batch train on one device, got {sorted(devices)}")
    steps = {len(loader) for loader in loaders}
    if len(steps) != 1:
        raise ValueError(f"the runs of a batch take the same number of steps per epoch, got {sorted(steps)}")
    for run, (trainer, loader) in enumerate(zip(trainers, loaders, strict=True)):
        size = _dataset_size(loader)
        if size != trainer.bnn.likelihood.dataset_size:
            raise ValueError(
                f"run {run}: the training loader has {size} examples but the likelihood was built with "
                f"dataset_size={trainer.bnn.likelihood.dataset_size}"
            )
        if trainer.guide_spec is not None and trainer.guide_spec.map_warm_start_epochs:
            raise ValueError(f"run {run} starts its guide at a MAP warm start (loc=map): train it alone")
    return steps.pop()


def set_up(trainer: Trainer, loader: Iterable, resume_from: str | os.PathLike | None) -> tuple[tuple, tuple]:
    """What ``Trainer.fit`` does before its first epoch, for one run; returns the shapes of its first batch."""
    if resume_from is None and trainer.seed is not None and trainer.optimizer is None:
        pyro.set_rng_seed(trainer.seed)  # the guide starts where a single run with this seed starts
    x, y = next(iter(loader))
    x, y = x.to(trainer.device), y.to(trainer.device)
    trainer.setup(x, y)

    _check_all_labels(loader, trainer.bnn, x)
    if resume_from is not None:
        trainer.load_checkpoint(resume_from)
    if trainer._clip:
        raise ValueError("batched runs do not clip gradients: train a run with gradient clipping alone")
    trainer.stop_training = False
    return tuple(x.shape), tuple(y.shape)
