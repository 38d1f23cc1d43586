"""SVI training loop: any :class:`~pyro_bnn.infer.objectives.Objective`, KL annealing, checkpoints and callbacks."""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide
from torch import nn
from tqdm.auto import tqdm

from pyro_bnn._spec import enum_member
from pyro_bnn.bnn import BNN
from pyro_bnn.infer.annealing import KLSchedule, constant
from pyro_bnn.infer.callbacks import Callback, Checkpoint
from pyro_bnn.infer.checkpoint import load_checkpoint, save_checkpoint
from pyro_bnn.infer.cuda_graph import GraphedStep, unavailable_reason
from pyro_bnn.infer.divergence import (
    NonFiniteLossError,
    NonFiniteOutputError,
    finite,
    is_argument_check,
    non_finite_loss_message,
)
from pyro_bnn.infer.kl_weighting import KLWeighting, minibatch_kl_weight
from pyro_bnn.infer.objectives import ElboKind, Objective, ObjectiveTerms, make_objective
from pyro_bnn.infer.optim import OptimizerFactory, build_optimizer, clip_gradients
from pyro_bnn.infer.trainer_state import restore_trainer_state, trainer_state_dict
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.predict import predict
from pyro_bnn.predict.predictive import model_device

GuideBuilder = Callable[[BNN], AutoGuide]


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


class Trainer:
    """Trains a :class:`~pyro_bnn.BNN` and its guide by stochastic variational inference.

    Each step evaluates the objective (by default :class:`~pyro_bnn.infer.AutoELBO`: the fused fast path for a
    :class:`~pyro_bnn.guides.FlatMeanField` guide, Pyro's ``Trace_ELBO`` otherwise) on one minibatch with the KL weight
    ``kl_schedule(progress) * minibatch_kl_weight(step)``, then takes one optimiser step. The data term is scaled by
    N/B inside the likelihood, so the loss estimates the full-data negative ELBO. Per-step values stay on the
    device and are read at logging intervals (the progress bar, the end of an epoch).

    Args:
        bnn: The model.
        guide: A guide module or a builder ``bnn -> guide`` called after the model has moved to ``device``, e.g.
            ``lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=1e-3)`` or
            ``BayesByBackprop``. (Without ``init_to_network``, Pyro's AutoNormal starts every weight at 0.)
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
        num_val_samples: Posterior samples for the per-epoch validation metrics.
        n_bins: Calibration bins for the validation ECE.
        callbacks: :class:`~pyro_bnn.infer.callbacks.Callback` s, run after every epoch in order.
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
        config: JSON-serialisable description of the run, stored in checkpoints; a resume refuses a checkpoint
            whose config differs.
        resume_may_change: Config keys that may differ on a resume (e.g. ``epochs``, to extend a finished run).
    """

    def __init__(
        self,
        bnn: BNN,
        guide: AutoGuide | GuideBuilder,
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
        config: dict[str, Any] | None = None,
        resume_may_change: Sequence[str] = (),
    ) -> None:
        if not isinstance(bnn, BNN):
            raise ValueError(f"Trainer trains a pyro_bnn.BNN, got {type(bnn).__name__}")
        self.device = torch.device(device) if device is not None else model_device(bnn)
        self.bnn = bnn.to(self.device)
        self.guide: AutoGuide | None = guide if isinstance(guide, nn.Module) else None
        self._guide_builder = None if isinstance(guide, nn.Module) else guide
        if self.guide is None and not callable(guide):
            raise ValueError(f"guide must be a guide module or a builder bnn -> guide, got {guide!r}")
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
        for name, value in (("num_val_samples", num_val_samples), ("n_bins", n_bins)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.seed, self.num_val_samples, self.n_bins = seed, num_val_samples, n_bins
        self.resume_may_change = frozenset(resume_may_change)
        self.callbacks = list(callbacks)
        self.progress = progress
        self.cuda_graph = bool(cuda_graph)
        self.graph_reason = "training has not started"
        """Why steps are not replayed from a CUDA graph (None when they are)."""
        self._graphed: GraphedStep | None = None
        self.config = dict(config or {})
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler = None
        self._clip: dict = {}
        self._params: list[nn.Parameter] = []
        self.history: list[dict[str, Any]] = []
        self.epoch = 0  # completed epochs
        self.global_step = 0
        self.stop_training = False

    # ----------------------------------------------------------------------------------------------- set-up
    def setup(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Checks a first batch, builds the guide and its parameters, and the optimiser. Idempotent."""
        if self.optimizer is not None:
            return
        self.bnn.validate_batch(x, y)
        if self.guide is None:
            self.guide = self._guide_builder(self.bnn)
        self.guide.to(self.device)
        with torch.no_grad(), poutine.block():
            self.guide(x, y)  # AutoGuides create their parameters on the first call
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
        if resume_from is None and self.seed is not None and self.optimizer is None:
            pyro.set_rng_seed(self.seed)  # only a fresh run: a second fit() continues the same random stream
        x, y = next(iter(train_loader))
        x, y = x.to(self.device), y.to(self.device)
        self.setup(x, y)  # validates the first batch before anything else runs on it
        _check_all_labels(train_loader, self.bnn, x)
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        if self._graphed is None:  # kept across fit() calls; a loaded checkpoint drops it (a capture holds state)
            self._graphed = self._make_graphed_step()
        else:
            self._graphed.new_fit()
        self.stop_training = False
        for callback in self.callbacks:
            callback.on_train_start(self)
        while self.epoch < epochs and not self.stop_training:
            record = self._train_epoch(train_loader, num_steps, epochs)
            if not self._parameters_finite():
                # The last steps' updates can overflow although every loss was finite: never checkpoint that.
                raise NonFiniteLossError(
                    f"parameters became NaN or infinite during epoch {self.epoch + 1} (after its last checked loss); "
                    f"training stopped and {self._last_checkpoint_text()}. Try a lower learning rate, a smaller "
                    "init scale or gradient clipping."
                )
            if val_loader is not None:
                record.update({f"val_{k}": v for k, v in self._validate(val_loader).items()})
            self.epoch += 1
            self.history.append(record)
            if self.scheduler is not None and self.lr_scheduler_interval is SchedulerInterval.EPOCH:
                self.scheduler.step()
            for callback in self.callbacks:
                callback.on_epoch_end(self, record)
        for callback in self.callbacks:
            callback.on_train_end(self)
        return self.history

    def _train_epoch(self, loader: Iterable, num_steps: int, epochs: int) -> dict[str, Any]:
        self.bnn.train()
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(self.epoch)
        # Sums of the per-step loss and data term, kept on the device: read at logging intervals only.
        totals = torch.zeros(2, device=self.device, dtype=torch.float64)
        total_weight = 0.0
        start = time.perf_counter()
        bar = tqdm(
            loader,
            mininterval=1.0,
            total=num_steps,
            desc=f"epoch {self.epoch + 1}/{epochs}",
            disable=not self.progress,
            leave=False,
            dynamic_ncols=True,
        )
        for step, (x, y) in enumerate(bar, start=1):
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            kl_weight = self.kl_schedule(self.epoch + (step - 1) / num_steps)
            kl_weight *= minibatch_kl_weight(self.kl_weighting, step, num_steps)
            check = step % self.nan_check_every == 0 or step == num_steps
            terms = self._graphed.step(x, y, kl_weight) if self._graphed is not None else None
            if terms is None:
                with self._graphed.eager_stream() if self._graphed is not None else contextlib.nullcontext():
                    terms = self._eager_step(x, y, kl_weight, step, check)
            elif check:
                loss_value = float(terms.loss)
                if not math.isfinite(loss_value):
                    raise NonFiniteLossError(self._non_finite_message(loss_value, step, x, applied=True))
            self.global_step += 1
            if self.scheduler is not None and self.lr_scheduler_interval is SchedulerInterval.STEP:
                self.scheduler.step()
            totals += torch.stack([terms.loss, terms.data_term]).double()
            total_weight += kl_weight
            if self.progress and (step % 10 == 0 or step == num_steps):
                bar.set_postfix(loss=f"{float(totals[0]) / step:.4g}", refresh=False)
        bar.close()
        total_loss, total_data = totals.tolist()
        return {
            "epoch": self.epoch + 1,
            "loss": total_loss / num_steps,
            "data_term": total_data / num_steps,
            "kl_term": (total_loss - total_data) / num_steps,
            "kl_weight": total_weight / num_steps,
            "time_s": time.perf_counter() - start,
            "lr": self.optimizer.param_groups[0]["lr"],
            # Named groups (ParamGroups: "model", "guide") each log their own rate.
            **{f"lr_{g['name']}": g["lr"] for g in self.optimizer.param_groups if "name" in g},
        }

    def _eager_step(self, x: torch.Tensor, y: torch.Tensor, kl_weight: float, step: int, check: bool):
        """Objective, backward pass and optimiser step, op by op; with ``check``, a non-finite loss stops training
        before the optimiser step. Returns the terms detached (no autograd graph outlives the step)."""
        self.optimizer.zero_grad(set_to_none=True)
        try:
            terms = self.objective(self.bnn, self.guide, x, y, kl_weight)
        except ValueError as err:
            # With validation on, divergence shows up first as a distribution's argument check.
            if finite(x) and self._parameters_finite() and not is_argument_check(err):
                raise
            raise NonFiniteLossError(self._non_finite_message(float("nan"), step, x)) from err
        if check:
            loss_value = float(terms.loss.detach())
            if not math.isfinite(loss_value):
                raise NonFiniteLossError(self._non_finite_message(loss_value, step, x))
        terms.loss.backward()
        if self._clip:
            clip_gradients(self._params, **self._clip)
        self.optimizer.step()
        return ObjectiveTerms(terms.loss.detach(), terms.data_term, terms.kl_term)

    def _make_graphed_step(self) -> GraphedStep | None:
        """The CUDA-graph step for this fit, or None (with :attr:`graph_reason` saying why)."""
        per_step = self.scheduler is not None and self.lr_scheduler_interval is SchedulerInterval.STEP
        reason = (
            unavailable_reason(self.objective, self.device, self.optimizer, per_step)
            if self.cuda_graph
            else "turned off (cuda_graph=False)"
        )
        self.graph_reason = reason
        if reason is not None:
            return None
        clip = (lambda params: clip_gradients(params, **self._clip)) if self._clip else None
        return GraphedStep(self.objective, self.bnn, self.guide, self.optimizer, self._params, clip=clip)

    def _parameters_finite(self) -> bool:
        """Whether every trained parameter is finite (one host read for all of them)."""
        if not self._params:
            return True
        return bool(torch.stack([torch.isfinite(p).all() for p in self._params]).all())

    def _last_checkpoint_text(self) -> str:
        paths = [str(cb.path) for cb in self.callbacks if isinstance(cb, Checkpoint) and cb.path.exists()]
        return f"the last good checkpoint is {paths[0]}" if paths else "no checkpoint had been written"

    def _non_finite_message(self, loss_value: float, step: int, x: torch.Tensor, applied: bool = False) -> str:
        """``applied``: the step was replayed from a CUDA graph, its optimiser update already made."""
        return non_finite_loss_message(
            loss_value,
            epoch=self.epoch + 1,
            step=step,
            x=x,
            nan_check_every=self.nan_check_every,
            where=self._last_checkpoint_text(),
            applied=applied,
        )

    def _validate(self, loader: Iterable) -> dict[str, float]:
        """:meth:`evaluate` during training: outputs that overflow mean the parameters diverged."""
        try:
            return self.evaluate(loader)
        except NonFiniteOutputError as err:
            raise NonFiniteLossError(
                f"{err} after epoch {self.epoch + 1}: the parameters diverged; training stopped and "
                f"{self._last_checkpoint_text()}. Try a lower learning rate, a smaller init scale or gradient clipping."
            ) from err

    @torch.no_grad()
    def evaluate(self, loader: Iterable, num_samples: int | None = None) -> dict[str, float]:
        """Posterior predictive metrics on ``loader`` (accuracy, nll, brier, ece, mce; or rmse, nll)."""
        num_samples = self.num_val_samples if num_samples is None else num_samples
        prediction = predict(self.bnn, self.guide, loader, num_samples=num_samples)
        outputs = prediction.probs if prediction.is_classification else prediction.means
        if not bool(torch.isfinite(outputs).all()):
            raise NonFiniteOutputError("the network's predictions on the validation data are NaN or infinite")
        return prediction.metrics(n_bins=self.n_bins)

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

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs (:func:`~pyro_bnn.infer.trainer_state.trainer_state_dict`)."""
        return trainer_state_dict(self)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Writes :meth:`state_dict` atomically to ``path``; refuses (NonFiniteLossError) parameters that are not
        finite, so a checkpoint on disk is always one to resume from."""
        if not self._parameters_finite():
            raise NonFiniteLossError(f"refusing to write {path}: the parameters are NaN or infinite")
        save_checkpoint(self.state_dict(), path)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restores a checkpoint into this (already set-up) trainer, random state included."""
        state = load_checkpoint(path, map_location=self.device)
        self._graphed = None  # captured with the optimiser state tensors that loading replaces
        restore_trainer_state(self, state, path)
