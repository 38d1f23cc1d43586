"""Training callbacks: early stopping, checkpoints, logging. Each sees the trainer after every epoch.

The per-epoch validation metrics are a callback too (:class:`~pyro_bnn.infer.validation.Validation`), which the
trainer runs before these, so that they find the ``val_*`` keys in the epoch's record.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyro_bnn._io import JsonListText, write_text_atomically
from pyro_bnn.checks import non_negative_float, positive_int

if TYPE_CHECKING:
    from pyro_bnn.infer.trainer import Trainer


class Callback:
    """Base class. Override the hooks you need; set ``trainer.stop_training = True`` to stop after this epoch."""

    def on_train_start(self, trainer: Trainer) -> None:
        """Called once before the first epoch (after a resume has restored the trainer's state)."""

    def on_epoch_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        """Called after each epoch with that epoch's record (also appended to ``trainer.history``, with the
        validation metrics already in it)."""

    def on_train_end(self, trainer: Trainer) -> None:
        """Called once when training stops, normally or by early stopping."""

    def state_dict(self) -> dict[str, Any]:
        """State a resumed run needs (tensors, numbers, strings, booleans, None, lists, tuples, dicts); stored in
        checkpoints. A NumPy scalar or 0-d array is stored as the Python number it holds (``np.float64(0.5)`` loads
        as ``0.5``); anything else a checkpoint cannot hold is refused when the checkpoint is written, naming this
        callback's entry (:func:`~pyro_bnn.infer.checkpoint.save_checkpoint`)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""


class EarlyStopping(Callback):
    """Stops when ``monitor`` has not improved for ``patience`` epochs.

    Args:
        monitor: A key of the epoch record, e.g. ``"val_accuracy"`` or ``"val_nll"``.
        patience: Epochs without improvement before stopping (the One Simple Trick code uses 3).
        mode: ``"max"`` if larger is better, ``"min"`` otherwise.
        restore_best: Put the model and guide of the best epoch back when training stops.
    """

    def __init__(self, monitor: str = "val_accuracy", patience: int = 3, mode: str = "max", restore_best: bool = False):
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        patience = positive_int(patience, "patience")
        self.monitor, self.patience, self.mode, self.restore_best = monitor, patience, mode, restore_best
        self.best: float | None = None
        self.best_epoch: int | None = None
        self._best_state: dict | None = None

    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def on_train_start(self, trainer: Trainer) -> None:
        # A resumed run that had already met the stopping rule stays stopped.
        if self.best_epoch is not None and trainer.epoch - self.best_epoch >= self.patience:
            trainer.stop_training = True

    def on_epoch_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if self.monitor not in record:
            raise ValueError(
                f"EarlyStopping monitors {self.monitor!r}, which the epoch record lacks (keys: {sorted(record)}); "
                "pass a validation loader for val_* metrics"
            )
        value = float(record[self.monitor])
        if math.isfinite(value) and self._improved(value):
            self.best, self.best_epoch = value, record["epoch"]
            if self.restore_best:
                self._best_state = trainer.model_state()
        elif record["epoch"] - (self.best_epoch or 0) >= self.patience:
            trainer.stop_training = True

    def on_train_end(self, trainer: Trainer) -> None:
        if self.restore_best and self._best_state is not None:
            trainer.load_model_state(self._best_state)

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "best_state": self._best_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch, self._best_state = state["best"], state["best_epoch"], state["best_state"]


class Checkpoint(Callback):
    """Writes a resumable checkpoint (model, guide, optimiser, config, epoch, history, RNG, callback states) after
    every ``every`` epochs and when training ends, atomically: the previous file stays intact until the new one is
    complete. Put it after callbacks that change the model at the end (``EarlyStopping(restore_best=True)``), so the
    final checkpoint holds what training returns.

    Args:
        path: The checkpoint file.
        every: Write after every ``every``-th epoch (and after the epoch that stops training, and when it ends).
        min_interval_s: Also skip those writes while fewer seconds than this have passed since the last write (or
            since training started), for runs of thousands of epochs of a few milliseconds each, whose checkpoints
            would otherwise cost a good part of the run. Any checkpoint resumes to the numbers of an uninterrupted
            run, so this only decides how much an interruption loses: at most ``min_interval_s`` seconds of
            training and ``every`` epochs more (a write waits for the interval, then for the next ``every``-th
            epoch). 0 (the default) writes after every ``every``-th epoch.
    """

    def __init__(self, path: str | os.PathLike, every: int = 1, *, min_interval_s: float = 0.0) -> None:
        every = positive_int(every, "every")
        self.path, self.every = Path(path), every
        self._throttle = _Throttle(non_negative_float(min_interval_s, "min_interval_s"))

    def on_train_start(self, trainer: Trainer) -> None:
        self._throttle.restart()

    def on_epoch_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if trainer.stop_training or (record["epoch"] % self.every == 0 and self._throttle.due()):
            trainer.save_checkpoint(self.path)
            self._throttle.restart()

    def on_train_end(self, trainer: Trainer) -> None:
        if trainer.optimizer is not None:
            trainer.save_checkpoint(self.path)


class _Throttle:
    """Whether ``min_interval_s`` seconds have passed since :meth:`restart` (always, for 0)."""

    clock = staticmethod(time.monotonic)

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self._since = self.clock()

    def restart(self) -> None:
        self._since = self.clock()

    def due(self) -> bool:
        return self.min_interval_s <= 0 or self.clock() - self._since >= self.min_interval_s


def last_checkpoint_text(callbacks: Iterable[Callback]) -> str:
    """What a training error says of checkpoints: the first :class:`Checkpoint` file written, if any."""
    paths = [str(cb.path) for cb in callbacks if isinstance(cb, Checkpoint) and cb.path.exists()]
    return f"the last good checkpoint is {paths[0]}" if paths else "no checkpoint had been written"


class HistoryLogger(Callback):
    """Writes the history so far as indented JSON (atomically) after every ``every`` epochs and when training ends,
    for watching a long run.

    Each record is encoded once (:class:`~pyro_bnn._io.JsonListText`), so a rewrite costs little more than writing
    the file. The writes during training skip the ``fsync`` (a power cut may lose the file, never leave half of it;
    the checkpoint holds the history too); the one when training ends is synced.

    Args:
        path: The JSON file.
        every: Write after every ``every``-th epoch (and after the epoch that stops training, and when it ends).
        min_interval_s: Also skip those writes while fewer seconds than this have passed since the last one (or
            since training started), as :class:`Checkpoint`'s; 0 (the default) writes after every ``every``-th
            epoch. The file written when training ends always holds every epoch.
    """

    def __init__(self, path: str | os.PathLike, every: int = 1, *, min_interval_s: float = 0.0) -> None:
        every = positive_int(every, "every")
        self.path, self.every = Path(path), every
        self._text = JsonListText(indent=2)
        self._throttle = _Throttle(non_negative_float(min_interval_s, "min_interval_s"))

    def on_train_start(self, trainer: Trainer) -> None:
        self._throttle.restart()

    def on_epoch_end(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if trainer.stop_training or (record["epoch"] % self.every == 0 and self._throttle.due()):
            write_text_atomically(self.path, self._text.text(trainer.history), sync=False)
            self._throttle.restart()

    def on_train_end(self, trainer: Trainer) -> None:
        write_text_atomically(self.path, self._text.text(trainer.history))
