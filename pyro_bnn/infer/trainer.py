"""SVI training loop: any :class:`~pyro_bnn.infer.objectives.Objective`, KL annealing, checkpoints and callbacks.

The step itself (objective, backward, optimiser; eager or replayed from a CUDA graph) is a
:class:`~pyro_bnn.infer.steps.StepRunner`, the per-epoch validation a callback
(:class:`~pyro_bnn.infer.validation.Validation`), and what a checkpoint holds a
:class:`~pyro_bnn.infer.trainer_state.TrainerState`.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoDelta, AutoGuide
from torch import nn
from tqdm.auto import tqdm

from pyro_bnn._spec import enum_member
from pyro_bnn.bnn import BNN
from pyro_bnn.guides import GuideSpec, init_to_network, parse_guide
from pyro_bnn.guides.init import warn_symmetric_start
from pyro_bnn.guides.movement import StartingPoint, start_of, warn_if_unmoved
from pyro_bnn.infer.annealing import KLSchedule, constant
from pyro_bnn.infer.callbacks import Callback, last_checkpoint_text
from pyro_bnn.infer.checkpoint import load_checkpoint, save_checkpoint
from pyro_bnn.infer.divergence import NonFiniteLossError, non_finite_loss_message
from pyro_bnn.infer.kl_weighting import KLWeighting, minibatch_kl_weight
from pyro_bnn.infer.objectives import ElboKind, Objective, ObjectiveTerms, make_objective
from pyro_bnn.infer.optim import OptimizerFactory, build_optimizer, clip_gradients
from pyro_bnn.infer.steps import (
    GraphedStepRunner,
    NonFiniteStep,
    StepParts,
    StepRunner,
    StepRunnerFactory,
    default_step_runner,
    parameters_finite,
)
from pyro_bnn.infer.trainer_state import RunState, TrainerState
from pyro_bnn.infer.validation import Validation
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.predict.predictive import model_device

GuideBuilder = Callable[[BNN], AutoGuide]


def map_warm_start(bnn: BNN, train_loader: Iterable, epochs: int, **trainer_kwargs: Any) -> dict[str, torch.Tensor]:
    """Trains a MAP estimate (an AutoDelta started at the network's initial weights) and makes its weights the
    network's new initial values, so a guide built afterwards with locations from the network starts there.

    Deterministic parameters of the network (those the prior does not select) keep their MAP values too. A
    :class:`Trainer` given a guide spec with ``loc=map`` runs it before building the guide.

    Args:
        bnn: The model.
        train_loader: Training batches, as for :meth:`Trainer.fit`.
        epochs: Epochs of MAP training (>= 1).
        trainer_kwargs: Passed to :class:`Trainer` (``optim``, ``device``, ``seed``, ``progress``, ...).

    Returns:
        The MAP weights ``{site name: param_shape}``.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"a MAP warm start needs epochs >= 1, got {epochs!r}")
    trainer = Trainer(bnn, lambda model: AutoDelta(model, init_loc_fn=init_to_network(model)), **trainer_kwargs)
    trainer.fit(train_loader, epochs)
    median = trainer.guide.median()
    values = {name: median[name].detach() for name in bnn.site_names}
    bnn.set_initial_values(values)
    return values


class SchedulerInterval(str, Enum):
    """When the trainer steps its learning-rate scheduler."""

    EPOCH = "epoch"
    """Once after every epoch (``T_max`` and ``step_size`` count epochs)."""
    STEP = "step"
    """After every optimiser step (``T_max`` and ``step_size`` count steps)."""


def _dataset_size(loader: Iterable) -> int:
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise ValueError("the training loader must expose .dataset (a torch DataLoader or pyro_bnn BatchLoader)")
    return len(dataset)


def _check_all_labels(loader: Iterable, bnn: BNN, x: torch.Tensor) -> None:
    """Checks every training target at once where the loader holds them as tensors (labels >= C, wrong dtype).

    Call after ``bnn.validate_batch(x, ...)`` has accepted the batch's inputs.
    """
    tensors = getattr(getattr(loader, "dataset", None), "tensors", None)
    if tensors is not None and len(tensors) == 2:
        with torch.no_grad():
            output = bnn.apply_parameters(x[:1], bnn.initial_values())
        targets = tensors[1]
        # check_targets compares the batch dimension too, so hand it an output with as many rows as targets.
        bnn.likelihood.check_targets(output[:1].expand(len(targets), *output.shape[1:]), targets.to(output.device))


def _kept_in(part: str, name: str, doc: str) -> property:
    """A trainer attribute that lives in one of its parts, ``trainer.<part>.<name>``."""
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, value: setattr(getattr(self, part), name, value),
        doc=doc,
    )


class Trainer:
    """Trains a :class:`~pyro_bnn.BNN` and its guide by stochastic variational inference.

    Each step evaluates the objective (by default :class:`~pyro_bnn.infer.AutoELBO`: the fused fast path for a
    :class:`~pyro_bnn.guides.FlatMeanField` guide, Pyro's ``Trace_ELBO`` otherwise) on one minibatch with the KL weight
    ``kl_schedule(progress) * minibatch_kl_weight(step)``, then takes one optimiser step. The data term is scaled by
    N/B inside the likelihood, so the loss estimates the full-data negative ELBO. Per-step values stay on the
    device and are read at logging intervals (the progress bar, the end of an epoch).

    Args:
        bnn: The model.
        guide: A guide spec in the CLI's grammar (``"autonormal:0.01"``, ``"flat:rel=1,loc=map"``, or a parsed
            :class:`~pyro_bnn.guides.GuideSpec`; a ``loc=map`` spec runs its MAP warm start when training starts),
            a guide module, or a builder ``bnn -> guide`` called after the model has moved to ``device``, e.g.
            ``lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=1e-3)`` or
            ``BayesByBackprop``. Without ``init_to_network``, Pyro's AutoNormal starts every weight at 0, and a
            :class:`~pyro_bnn.guides.init.SymmetricStartWarning` says so when the guide is built.
        optim: A ``pyro.optim`` optimiser, a factory ``params -> torch.optim.Optimizer``, or None (Adam, lr 1e-3).
        objective: An :class:`~pyro_bnn.infer.objectives.Objective`, or the name of a built-in one
            (:class:`~pyro_bnn.infer.ElboKind`): ``"auto"`` (default), ``"trace"`` (Trace_ELBO), ``"meanfield"``
            (TraceMeanField_ELBO), or one of :class:`~pyro_bnn.infer.FastMeanFieldELBO`'s forms ``"fast"``,
            ``"fast-single"``, ``"fast-local"``, ``"fast-flipout"``.
        num_particles: Weight samples per step (for an objective given by name).
        vectorize_particles: Evaluate the particles in one vectorised pass (default: when num_particles > 1).
        kl_schedule: KL annealing weight as a function of progress in epochs (default: constant 1).
        kl_weighting: ``"uniform"`` or ``"blundell"`` minibatch KL weights.
        device: Where to train; the model, priors, guide and batches move there. Default: the model's device.
        seed: Seeds Pyro/torch at the start of a fresh run; two CPU runs with the same seed give identical results.
        num_val_samples: Posterior samples for the per-epoch validation metrics (:attr:`validation`).
        n_bins: Calibration bins for the validation ECE.
        callbacks: :class:`~pyro_bnn.infer.callbacks.Callback` s, run after every epoch in order (after the
            validation, so they see its metrics).
        lr_scheduler: Optional factory ``optimizer -> torch LR scheduler``.
        lr_scheduler_interval: ``"epoch"`` (step the scheduler after every epoch) or ``"step"`` (after every
            optimiser step).
        nan_check_every: Steps between host-side checks that the loss is finite. With 1 (the default) a NaN or
            infinite loss stops training before the optimiser step that would spread it; with k > 1 the check reads
            the device every k steps (cheaper on a GPU) and the error says the parameters may already be non-finite.
            Checkpoints are written at the end of an epoch only, so the last one stays good either way.
        progress: Show a tqdm progress bar per epoch.
        cuda_graph: On a CUDA device, replay each step from a captured CUDA graph where the objective and optimiser
            allow it (:mod:`pyro_bnn.infer.cuda_graph`; :attr:`graph_reason` says why not otherwise). The same random
            draws and, up to rounding, the same updates; a non-finite loss is then seen just after the step that
            used it.
        step_runner: A factory ``StepParts -> StepRunner`` (:mod:`pyro_bnn.infer.steps`) for the step itself, e.g.
            :class:`~pyro_bnn.infer.steps.EagerStep`; default: :func:`~pyro_bnn.infer.steps.default_step_runner`
            (as ``cuda_graph`` says).
        config: JSON-serialisable description of the run, stored in checkpoints; a resume refuses a checkpoint
            whose config differs.
        resume_may_change: Config keys that may differ on a resume (e.g. ``epochs``, to extend a finished run).
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
        objective: Objective | ElboKind | str = ElboKind.AUTO,
        num_particles: int = 1,
        vectorize_particles: bool | None = None,
        kl_schedule: KLSchedule | None = None,
        kl_weighting: KLWeighting | str = KLWeighting.UNIFORM,
        device: str | torch.device | None = None,
        seed: int | None = None,
        num_val_samples: int = 16,
        n_bins: int = 15,
        callbacks: Sequence[Callback] = (),
        lr_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
        lr_scheduler_interval: SchedulerInterval | str = SchedulerInterval.EPOCH,
        nan_check_every: int = 1,
        progress: bool = True,
        cuda_graph: bool = True,
        step_runner: StepRunnerFactory | None = None,
        config: dict[str, Any] | None = None,
        resume_may_change: Sequence[str] = (),
    ) -> None:
        if not isinstance(bnn, BNN):
            raise ValueError(f"Trainer trains a pyro_bnn.BNN, got {type(bnn).__name__}")
        self.device = torch.device(device) if device is not None else model_device(bnn)
        self.bnn = bnn.to(self.device)
        self.guide_spec: GuideSpec | None = parse_guide(guide) if isinstance(guide, str) else None
        if isinstance(guide, GuideSpec):
            self.guide_spec = guide
        if self.guide_spec is not None:
            guide = self.guide_spec.build
        self.guide: AutoGuide | None = guide if isinstance(guide, nn.Module) else None
        self._guide_builder = None if isinstance(guide, nn.Module) else guide
        if self.guide is None and not callable(guide):
            raise ValueError(
                f"guide must be a guide module, a builder bnn -> guide or a guide spec like 'flat:rel=1', got {guide!r}"
            )
        if vectorize_particles is None:
            vectorize_particles = num_particles > 1
        if isinstance(objective, (str, ElboKind)):
            objective = make_objective(objective, num_particles, vectorize_particles)
        elif num_particles != 1:
            raise ValueError("num_particles applies to an objective given by name; set it on the objective itself")
        if not isinstance(objective, Objective):
            raise ValueError(
                f"objective must be an ElboKind name ('auto', 'trace', ...) or an Objective, got {objective!r}"
            )
        self.objective = objective
        self.lr_scheduler_interval = enum_member(SchedulerInterval, lr_scheduler_interval, "scheduler interval")
        if isinstance(nan_check_every, bool) or not isinstance(nan_check_every, int) or nan_check_every < 1:
            raise ValueError(f"nan_check_every must be an int >= 1, got {nan_check_every!r}")
        self.nan_check_every = nan_check_every
        self.kl_schedule = kl_schedule if kl_schedule is not None else constant(1.0)
        self.kl_weighting = enum_member(KLWeighting, kl_weighting, "KL weighting")
        if self.kl_weighting is KLWeighting.BLUNDELL and bnn.likelihood.kl_scale is KLScale.PAPER:
            raise ValueError(
                "kl_weighting='blundell' assumes the data term is scaled by N/B, but the likelihood uses "
                "kl_scale='paper' (unscaled minibatch); use kl_weighting='uniform' or kl_scale='dataset'"
            )
        self.optim, self.lr_scheduler_factory = optim, lr_scheduler
        self.validation = Validation(num_val_samples, n_bins)
        """The per-epoch validation metrics, run before :attr:`callbacks` on ``fit``'s ``val_loader``."""
        self.seed = seed
        self.resume_may_change = frozenset(resume_may_change)
        self.callbacks = list(callbacks)
        self.progress = progress
        self.cuda_graph = bool(cuda_graph)
        self._step_runner_factory = step_runner
        self.step_runner: StepRunner | None = None
        """What takes the steps, built by ``fit``: anew for each, unless it has ``new_fit()`` (a runner that keeps
        state across fits, as a CUDA graph does); a loaded checkpoint drops it."""
        self.graph_reason = "training has not started"
        """Why steps are not replayed from a CUDA graph (None when they are)."""
        self.config = dict(config or {})
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
        with torch.no_grad(), poutine.block():
            self.guide(x, y)  # AutoGuides create their parameters on the first call
        if built:
            warn_symmetric_start(self.guide, self.bnn)
            self._start = start_of(self.guide)  # a guide passed in may be trained already: its start is unknown
        validate = getattr(self.objective, "validate", None)
        if validate is not None:
            with poutine.block():
                validate(self.bnn, self.guide, x, y)
        named, seen = [], set()
        for prefix, module in (("model", self.bnn), ("guide", self.guide)):
            for name, param in module.named_parameters():
                if id(param) not in seen and param.requires_grad:
                    seen.add(id(param))
                    named.append((f"{prefix}.{name}", param))
        if not named:
            raise ValueError("nothing to train: neither the model nor the guide has parameters")
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
                from its epoch with its optimiser state and random state.

        Returns:
            The history: one record per epoch with ``loss`` (mean -ELBO estimate), ``data_term``, ``kl_term``
            (the weighted KL as it entered the loss), ``kl_weight`` (mean factor on the latent sites), ``time_s``,
            ``lr`` and the validation metrics.

        Raises:
            NonFiniteLossError: if the loss becomes NaN/inf; the last checkpoint is left as it was.
        """
        if not (isinstance(epochs, int) and epochs >= 0):
            raise ValueError(f"epochs must be an int >= 0, got {epochs!r}")
        dataset_size = _dataset_size(train_loader)
        if dataset_size != self.bnn.likelihood.dataset_size:
            raise ValueError(
                f"the training loader has {dataset_size} examples but the likelihood was built with "
                f"dataset_size={self.bnn.likelihood.dataset_size}; they must match for the N/B scaling"
            )
        num_steps = len(train_loader)
        warm_start = self.guide_spec.map_warm_start_epochs if self.guide_spec is not None else 0
        if warm_start and resume_from is None and self.optimizer is None and self.guide is None:
            # The spec asks for a MAP warm start (loc=map): the guide's locations start at a short MAP fit, from
            # Python as from the CLI. A resumed run takes everything from its checkpoint instead.
            map_warm_start(
                self.bnn,
                train_loader,
                warm_start,
                optim=self.optim,
                device=self.device,
                seed=self.seed,
                progress=self.progress,
            )
        if resume_from is None and self.seed is not None and self.optimizer is None:
            pyro.set_rng_seed(self.seed)  # only a fresh run: a second fit() continues the same random stream
        x, y = next(iter(train_loader))
        x, y = x.to(self.device), y.to(self.device)
        self.setup(x, y)  # validates the first batch before anything else runs on it
        _check_all_labels(train_loader, self.bnn, x)
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        if hasattr(self.step_runner, "new_fit"):  # one that keeps state (a CUDA graph) is kept across fit() calls
            self.step_runner.new_fit()
        else:
            self.step_runner = self._make_step_runner()
        self.validation.loader = val_loader
        self.stop_training = False
        first_epoch = self.epoch
        for callback in self.callbacks:
            callback.on_train_start(self)
        while self.epoch < epochs and not self.stop_training:
            record = self._train_epoch(train_loader, num_steps, epochs)
            if not parameters_finite(self._params):
                # The last steps' updates can overflow although every loss was finite: never checkpoint that.
                raise NonFiniteLossError(
                    f"parameters became NaN or infinite during epoch {self.epoch + 1} (after its last checked loss); "
                    f"training stopped and {last_checkpoint_text(self.callbacks)}. Try a lower learning rate, a "
                    "smaller init scale or gradient clipping."
                )
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

    def _train_epoch(self, loader: Iterable, num_steps: int, epochs: int) -> dict[str, Any]:
        self.bnn.train()
        run, runner = self.run_state, self.step_runner
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(run.epoch)
        # Sums of the per-step loss and data term, kept on the device: read at logging intervals only.
        totals = torch.zeros(2, device=self.device, dtype=torch.float64)
        total_weight = 0.0
        start = time.perf_counter()
        bar = tqdm(
            loader,
            mininterval=1.0,
            total=num_steps,
            desc=f"epoch {run.epoch + 1}/{epochs}",
            disable=not self.progress,
            leave=False,
            dynamic_ncols=True,
        )
        for step, (x, y) in enumerate(bar, start=1):
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            kl_weight = self.kl_schedule(run.epoch + (step - 1) / num_steps)
            kl_weight *= minibatch_kl_weight(self.kl_weighting, step, num_steps)
            check = step % self.nan_check_every == 0 or step == num_steps
            try:
                terms: ObjectiveTerms = runner.step(x, y, kl_weight, check)
            except NonFiniteStep as stop:
                message = self._non_finite_message(stop.loss, step, x, applied=stop.applied)
                raise NonFiniteLossError(message) from stop.__cause__
            run.global_step += 1
            if self.scheduler is not None and self.lr_scheduler_interval is SchedulerInterval.STEP:
                self.scheduler.step()
            totals += torch.stack([terms.loss, terms.data_term]).double()
            total_weight += kl_weight
            if self.progress and (step % 10 == 0 or step == num_steps):
                bar.set_postfix(loss=f"{float(totals[0]) / step:.4g}", refresh=False)
        bar.close()
        total_loss, total_data = totals.tolist()
        return {
            "epoch": run.epoch + 1,
            "loss": total_loss / num_steps,
            "data_term": total_data / num_steps,
            "kl_term": (total_loss - total_data) / num_steps,
            "kl_weight": total_weight / num_steps,
            "time_s": time.perf_counter() - start,
            "lr": self.optimizer.param_groups[0]["lr"],
            # Named groups (ParamGroups: "model", "guide") each log their own rate.
            **{f"lr_{g['name']}": g["lr"] for g in self.optimizer.param_groups if "name" in g},
        }

    def _make_step_runner(self) -> StepRunner:
        """This fit's step runner (:attr:`graph_reason` says why it replays no CUDA graph, if it does not)."""
        clip = (lambda params: clip_gradients(params, **self._clip)) if self._clip else None
        parts = StepParts(self.objective, self.bnn, self.guide, self.optimizer, self._params, clip)
        if self._step_runner_factory is None:
            per_step = self.scheduler is not None and self.lr_scheduler_interval is SchedulerInterval.STEP
            runner, self.graph_reason = default_step_runner(
                parts, self.device, per_step_scheduler=per_step, cuda_graph=self.cuda_graph
            )
            return runner
        runner = self._step_runner_factory(parts)
        graphed = isinstance(runner, GraphedStepRunner)
        self.graph_reason = None if graphed else f"the step runner passed in is a {type(runner).__name__}"
        return runner

    def _non_finite_message(self, loss_value: float, step: int, x: torch.Tensor, applied: bool = False) -> str:
        """``applied``: the step's optimiser update was already made (a step replayed from a CUDA graph)."""
        return non_finite_loss_message(
            loss_value,
            epoch=self.epoch + 1,
            step=step,
            x=x,
            nan_check_every=self.nan_check_every,
            where=last_checkpoint_text(self.callbacks),
            applied=applied,
        )

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
