"""SVI training loop: any :class:`~pyro_bnn.infer.objectives.Objective`, KL annealing, checkpoints and callbacks.

The options come in small checked groups (:mod:`pyro_bnn.infer.trainer_options`), the step itself (objective,
backward, optimiser; eager or replayed from a CUDA graph) is a :class:`~pyro_bnn.infer.steps.StepRunner`, one
epoch's loop :func:`~pyro_bnn.infer.trainer_loop.train_epoch`, the per-epoch validation a callback
(:class:`~pyro_bnn.infer.validation.Validation`), and what a checkpoint holds a
:class:`~pyro_bnn.infer.trainer_state.TrainerState`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import non_negative_int
from pyro_bnn.guides import GuideSpec
from pyro_bnn.guides.init import warn_symmetric_start
from pyro_bnn.guides.movement import StartingPoint, start_of, warn_if_unmoved
from pyro_bnn.infer.annealing import constant, tempered
from pyro_bnn.infer.callbacks import Callback
from pyro_bnn.infer.checkpoint import load_checkpoint, save_checkpoint
from pyro_bnn.infer.divergence import NonFiniteLossError
from pyro_bnn.infer.objectives import ElboKind, Objective
from pyro_bnn.infer.optim import OptimizerFactory, build_optimizer
from pyro_bnn.infer.steps import StepRunner, parameters_finite
from pyro_bnn.infer.trainable import TrainableModel
from pyro_bnn.infer.trainer_loop import check_all_labels as _check_all_labels
from pyro_bnn.infer.trainer_loop import (
    check_dataset_size,
    check_parameters_finite,
    guide_parts,
    kl_scale_of,
    make_step_runner,
    non_finite_message,
    spec_warm_start,
    train_epoch,
    trainable_parameters,
)
from pyro_bnn.infer.trainer_loop import dataset_size as _dataset_size  # noqa: F401 (pyro_bnn.batched imports it)
from pyro_bnn.infer.trainer_options import (
    LRSchedulerOptions,
    ObjectiveOptions,
    ResumeOptions,
    RuntimeOptions,
    SchedulerInterval,
    ValidationOptions,
    regroup,
)
from pyro_bnn.infer.trainer_state import RunState, TrainerState
from pyro_bnn.infer.validation import Validation
from pyro_bnn.infer.warm_start import map_warm_start
from pyro_bnn.nn.modes import preserved_state
from pyro_bnn.predict.predictive import model_device

__all__ = ["NonFiniteLossError", "SchedulerInterval", "Trainer", "map_warm_start"]

GuideBuilder = Callable[[BNN], AutoGuide]


def _kept_in(part: str, name: str, doc: str) -> property:
    """A trainer attribute that lives in one of its parts, ``trainer.<part>.<name>``."""
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, value: setattr(getattr(self, part), name, value),
        doc=doc,
    )


def _known_empty(loader: Iterable) -> bool:
    """Whether ``loader`` says it has no batch (a loader without a length, over an ``IterableDataset`` say, is not
    known to be empty: ``DataLoader.__len__`` raises ``TypeError`` there)."""
    try:
        return len(loader) == 0  # type: ignore[arg-type]
    except TypeError:
        return False


class Trainer:
    """Trains a :class:`~pyro_bnn.BNN` and its guide by stochastic variational inference.

    Each step evaluates the objective (by default :class:`~pyro_bnn.infer.AutoELBO`: the fused fast path for a
    :class:`~pyro_bnn.guides.FlatMeanField` guide, Pyro's ``Trace_ELBO`` otherwise) on one minibatch with the KL weight
    ``kl_schedule(progress) * minibatch_kl_weight(step)``, then takes one optimiser step. The data term is scaled by
    N/B inside the likelihood, so the loss estimates the full-data negative ELBO. Per-step values stay on the
    device and are read at logging intervals (the progress bar, the end of an epoch).

    The options come in groups (:mod:`pyro_bnn.infer.trainer_options`), each checked when it is built. The keywords
    they replaced (``num_particles=``, ``seed=``, ``progress=``, ...) are still taken, with a DeprecationWarning
    naming the group each belongs in.

    Args:
        bnn: The model: a :class:`~pyro_bnn.BNN`, or a user's Pyro model around random functions that follows
            :class:`~pyro_bnn.infer.trainable.TrainableModel` (:class:`pyro_bnn.compose.ComposedModel`; trained
            with a guide module such as :func:`pyro_bnn.compose.model_guide`'s and the ``trace`` objective).
        guide: A guide spec in the CLI's grammar (``"autonormal:0.01"``, ``"flat:rel=1,loc=map"``, or a parsed
            :class:`~pyro_bnn.guides.GuideSpec`; a ``loc=map`` spec runs its MAP warm start when training starts),
            a guide module, or a builder ``bnn -> guide`` called after the model has moved to ``device``, e.g.
            ``lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=1e-3)`` or
            ``BayesByBackprop``. Without ``init_to_network``, Pyro's AutoNormal starts every weight at 0, and a
            :class:`~pyro_bnn.guides.init.SymmetricStartWarning` says so when the guide is built.
        optim: A ``pyro.optim`` optimiser, a factory ``params -> torch.optim.Optimizer``, or None (Adam, lr 1e-3).
        objective: An :class:`~pyro_bnn.infer.ObjectiveOptions` (the objective, its particles, the KL schedule and
            minibatch weighting), or just the objective: an :class:`~pyro_bnn.infer.objectives.Objective` or a name
            (:class:`~pyro_bnn.infer.ElboKind`: ``"auto"``, ``"trace"``, ``"meanfield"``, ``"fast"``, ...).
        lr_scheduler: An :class:`~pyro_bnn.infer.LRSchedulerOptions` (a factory ``optimizer -> torch LR scheduler``
            and whether it steps per epoch or per step), just the factory (per epoch), or None.
        validation: :class:`~pyro_bnn.infer.ValidationOptions` for the per-epoch metrics on ``fit``'s
            ``val_loader`` (:attr:`validation`).
        runtime: :class:`~pyro_bnn.infer.RuntimeOptions`: device, seed, progress bar, CUDA graphs, NaN checks and
            the step runner.
        resume: :class:`~pyro_bnn.infer.ResumeOptions`: the run's config stored in checkpoints, and the keys a
            resume may change.
        callbacks: :class:`~pyro_bnn.infer.callbacks.Callback` s, run after every epoch in order (after the
            validation, so they see its metrics).
        **deprecated: The keywords the groups replaced (see :func:`~pyro_bnn.infer.trainer_options.regroup`).
    """

    epoch = _kept_in("run_state", "epoch", "Completed epochs.")
    global_step = _kept_in("run_state", "global_step", "Optimiser steps taken.")
    history = _kept_in("run_state", "history", "One record per completed epoch.")
    num_val_samples = _kept_in("validation", "num_samples", "Posterior samples for the validation metrics.")
    n_bins = _kept_in("validation", "n_bins", "Calibration bins for the validation ECE.")

    def __init__(
        self,
        bnn: BNN,
        guide: AutoGuide | GuideBuilder | GuideSpec | str,
        *,
        optim: pyro.optim.PyroOptim | OptimizerFactory | None = None,
        objective: ObjectiveOptions | Objective | ElboKind | str = ElboKind.AUTO,
        lr_scheduler: LRSchedulerOptions | Callable[[torch.optim.Optimizer], Any] | None = None,
        validation: ValidationOptions | None = None,
        runtime: RuntimeOptions | None = None,
        resume: ResumeOptions | None = None,
        callbacks: Sequence[Callback] = (),
        **deprecated: Any,
    ) -> None:
        given = dict(objective=objective, lr_scheduler=lr_scheduler, validation=validation, runtime=runtime)
        objective, schedule, validation, runtime, resume = regroup({**given, "resume": resume}, deprecated)
        if not isinstance(bnn, (BNN, TrainableModel)):
            raise ValueError(
                "Trainer trains a pyro_bnn.BNN or a model with the TrainableModel protocol (such as "
                f"pyro_bnn.compose.ComposedModel), got {type(bnn).__name__}"
            )
        self.device = runtime.device if runtime.device is not None else model_device(bnn)
        self.bnn = bnn.to(self.device)
        self.guide_spec: GuideSpec | None
        self.guide: AutoGuide | None  # built by setup() where a builder or spec was given
        self.guide_spec, self.guide, self._guide_builder = guide_parts(guide)
        if not isinstance(bnn, BNN) and self.guide is None:
            raise ValueError(
                f"a {type(bnn).__name__} takes a built guide module (pyro_bnn.compose.model_guide(...) builds one); "
                f"guide specs and builders make guides of a BNN, got {guide!r}"
            )
        objective.check_kl_scale(kl_scale_of(bnn))
        self.objective = objective.build()
        schedule_of_kl = objective.kl_schedule if objective.kl_schedule is not None else constant(1.0)
        self.kl_schedule = tempered(schedule_of_kl, objective.temperature)
        """The KL weight of progress in epochs: the annealing schedule times the likelihood temperature."""
        self.temperature = objective.temperature
        self.kl_weighting = objective.kl_weighting
        self.optim, self.lr_scheduler_factory = optim, schedule.factory
        self.lr_scheduler_interval = schedule.interval
        self.validation = Validation(validation.num_val_samples, validation.n_bins)
        """The per-epoch validation metrics, run before :attr:`callbacks` on ``fit``'s ``val_loader``."""
        self.seed, self.progress, self.cuda_graph = runtime.seed, runtime.progress, runtime.cuda_graph
        self.nan_check_every, self._step_runner_factory = runtime.nan_check_every, runtime.step_runner
        self.config, self.resume_may_change = dict(resume.config or {}), resume.resume_may_change
        self.callbacks = list(callbacks)
        self.step_runner: StepRunner | None = None
        """What takes the steps, built by ``fit``: anew for each, unless it has ``new_fit()`` (a runner that keeps
        state across fits, as a CUDA graph does); a loaded checkpoint drops it."""
        self.graph_reason = "training has not started"
        """Why steps are not replayed from a CUDA graph (None when they are)."""
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler = None
        self._clip: dict = {}
        self._params: list[nn.Parameter] = []
        self.run_state = RunState()
        """Epochs, steps and history so far (also :attr:`epoch`, :attr:`global_step`, :attr:`history`)."""
        self.stop_training = False
        self._start: StartingPoint | None = None  # the posterior's start, for the warning after fit()

    # ----------------------------------------------------------------------------------------------- set-up
    def setup(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Checks a first batch, builds the guide and its parameters, and the optimiser. Idempotent."""
        if self.optimizer is not None:
            return
        self.bnn.validate_batch(x, y)
        built = self.guide is None
        if built:
            self.guide = self._guide_builder(self.bnn)
        self.guide.to(self.device)
        # The set-up passes run the network in training mode (the objective checks what a training step will do);
        # they are no steps, so batch norm's running statistics are put back afterwards.
        with preserved_state(self.bnn):
            with torch.no_grad(), poutine.block():
                self.guide(x, y)  # AutoGuides create their parameters on the first call
            if built and isinstance(self.bnn, BNN):
                warn_symmetric_start(self.guide, self.bnn)
                self._start = start_of(self.guide)  # a guide passed in may be trained already: its start is unknown
            validate = getattr(self.objective, "validate", None)
            if validate is not None:
                with poutine.block():
                    validate(self.bnn, self.guide, x, y)
        named = trainable_parameters(self.bnn, self.guide)
        self._params = [p for _, p in named]
        self.optimizer, self._clip = build_optimizer(self.optim, named)
        self.scheduler = self.lr_scheduler_factory(self.optimizer) if self.lr_scheduler_factory else None

    # --------------------------------------------------------------------------------------------- training
    def fit(
        self,
        train_loader: Iterable,
        epochs: int,
        *,
        val_loader: Iterable | None = None,
        resume_from: str | os.PathLike | None = None,
    ) -> list[dict[str, Any]]:
        """Trains until ``epochs`` epochs are complete (counting those before a resume) or a callback stops it.

        Args:
            train_loader: Yields ``(x, y)`` minibatches and exposes ``.dataset`` (its length must equal the
                likelihood's ``dataset_size``). A ``set_epoch(epoch)`` method, if present, is called each epoch.
            epochs: Total number of epochs.
            val_loader: Optional validation batches; adds ``val_*`` metrics to each epoch's record.
            resume_from: A checkpoint written by this trainer's :class:`Checkpoint` callback; training continues
                from its epoch with its optimiser state and random state. One that does not fit this trainer (a
                tensor of another shape, a state written by another optimiser class: Adam's in an SGD trainer) is
                refused with a :class:`~pyro_bnn.infer.checkpoint.CheckpointMismatchError` naming what differs.

        Returns:
            The history: one record per epoch with ``loss`` (mean -ELBO estimate), ``data_term``, ``kl_term``
            (the weighted KL as it entered the loss), ``kl_weight`` (mean factor on the latent sites), ``time_s``,
            ``lr`` (the first parameter group's learning rate as the epoch's last step used it, under a per-step
            or a per-epoch schedule alike; ``lr_model`` and ``lr_guide`` for ParamGroups' groups) and the
            validation metrics.

        Raises:
            NonFiniteLossError: if the loss becomes NaN/inf; the last checkpoint is left as it was.
        """
        non_negative_int(epochs, "epochs")
        check_dataset_size(train_loader, self.bnn)
        if val_loader is not None and _known_empty(val_loader):
            raise ValueError("val_loader has no batch (an empty validation set?); pass val_loader=None for none")
        num_steps = len(train_loader)
        if isinstance(self.bnn, BNN) and getattr(self.objective, "vectorize_particles", True):  # fast ones: always
            self.bnn.check_vectorised_draws(getattr(self.objective, "num_particles", 1), training=True)
        if resume_from is None:  # a resumed run takes everything from its checkpoint instead
            spec_warm_start(self, train_loader)
        if resume_from is None and self.seed is not None and self.optimizer is None:
            pyro.set_rng_seed(self.seed)  # only a fresh run: a second fit() continues the same random stream
        x, y = next(iter(train_loader))
        x, y = x.to(self.device), y.to(self.device)
        self.setup(x, y)  # validates the first batch before anything else runs on it
        if isinstance(self.bnn, BNN):  # a composed model checks its own batches (validate_batch)
            _check_all_labels(train_loader, self.bnn, x)
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        if val_loader is not None:  # a count the guide refuses: said now, not after the first epoch's training
            self.validation.check_guide(self.guide)
        self.step_runner = make_step_runner(self)
        self.validation.loader = val_loader
        self.stop_training = False
        first_epoch = self.epoch
        for callback in self.callbacks:
            callback.on_train_start(self)
        while self.epoch < epochs and not self.stop_training:
            record = train_epoch(self, train_loader, num_steps, epochs)
            check_parameters_finite(self)  # the last updates can overflow although every loss was finite
            self.validation.on_epoch_end(self, record)
            self.epoch += 1
            self.history.append(record)
            if self.scheduler is not None and self.lr_scheduler_interval is SchedulerInterval.EPOCH:
                self.scheduler.step()
            for callback in self.callbacks:
                callback.on_epoch_end(self, record)
        for callback in self.callbacks:
            callback.on_train_end(self)
        if self.epoch > first_epoch:  # a fit that trained no epoch says nothing about the posterior
            warn_if_unmoved(self.guide, self._start)
        return self.history

    def _non_finite_message(self, loss_value: float, step: int, x: torch.Tensor, applied: bool = False) -> str:
        """``applied``: the step's optimiser update was already made (a step replayed from a CUDA graph)."""
        return non_finite_message(self, loss_value, step, x, applied)

    def evaluate(self, loader: Iterable, num_samples: int | None = None) -> dict[str, float]:
        """Posterior predictive metrics on ``loader`` (accuracy, nll, brier, ece, mce; or rmse, nll)."""
        return self.validation.evaluate(self.bnn, self.guide, loader, num_samples)

    # ------------------------------------------------------------------------------------------ persistence
    def model_state(self) -> dict[str, Any]:
        """Copies of the model's and guide's state dicts."""
        return {
            "model": copy.deepcopy(self.bnn.state_dict()),
            "guide": copy.deepcopy(self.guide.state_dict()),
        }

    def load_model_state(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`model_state` returned."""
        self.bnn.load_state_dict(state["model"])
        self.guide.load_state_dict(state["guide"])

    def checkpoint_state(self) -> TrainerState:
        """The parts of this trainer a checkpoint saves and restores (the trainer must be set up)."""
        if self.optimizer is None:
            raise RuntimeError("nothing to save before training has started")
        return TrainerState(
            self.run_state, self.bnn, self.guide, self.optimizer, self.scheduler, self.callbacks, self.config
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (:meth:`~pyro_bnn.infer.trainer_state.TrainerState.state_dict`)."""
        return self.checkpoint_state().state_dict()

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Writes :meth:`state_dict` atomically to ``path``; refuses (NonFiniteLossError) parameters that are not
        finite, so a checkpoint on disk is always one to resume from."""
        if not parameters_finite(self._params):
            raise NonFiniteLossError(f"refusing to write {path}: the parameters are NaN or infinite")
        save_checkpoint(self.state_dict(), path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restores a checkpoint into this (already set-up) trainer, random state included."""
        state = load_checkpoint(path, map_location=self.device)
        self.step_runner = None  # a CUDA graph was captured with the optimiser state tensors that loading replaces
        self._start = None  # the loaded posterior did not start at this trainer's initialisation
        self.checkpoint_state().load_state_dict(state, path, self.resume_may_change)
