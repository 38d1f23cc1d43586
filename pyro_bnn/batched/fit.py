"""Training R ordinary :class:`~pyro_bnn.infer.Trainer` s in lockstep, one batched step for all of them.

Each trainer keeps everything a run owns: its model, guide and torch optimiser, its KL schedule and minibatch KL
weighting, its learning-rate scheduler, its history, validation metrics and callbacks (checkpoints, early stopping,
history files). :func:`fit_batched` sets every trainer up as ``Trainer.fit`` would (the same seeding, so a run starts
from the guide a single run with its seed starts from), stacks their values into a :class:`~.stack.RunStack` and
then, per step, draws each run's batch from its own loader, each run's noise from its own generator, and trains all
of them with one :class:`~.step.BatchedStep`. At the end of every epoch each run's values and Adam state are copied
back into its own guide and optimiser, its validation metrics are computed (batched) and its callbacks run, so a
checkpoint written then is the checkpoint of an ordinary run.

A run whose loss or parameters become NaN or infinite is frozen and reported as failed (its
:class:`RunOutcome` holds the :class:`~pyro_bnn.infer.NonFiniteLossError` a single run would raise); a run that a
callback stops (early stopping) is frozen and finished; the others go on, their results unchanged by either.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from pyro_bnn.batched.exchange import OptimizerBridge, batched_optimizer
from pyro_bnn.batched.graph import GraphedBatchedStep
from pyro_bnn.batched.kl import BatchedKL
from pyro_bnn.batched.prepare import check_trainers, set_up
from pyro_bnn.batched.stack import RunStack
from pyro_bnn.batched.step import BatchedStep, RunNoise, StepInputs
from pyro_bnn.batched.validation import gather, validation_metrics
from pyro_bnn.infer.annealing import check_kl_weight
from pyro_bnn.infer.callbacks import last_checkpoint_text
from pyro_bnn.infer.divergence import DIVERGENCE_ADVICE, NonFiniteLossError
from pyro_bnn.infer.kl_weighting import minibatch_kl_weight
from pyro_bnn.infer.objective_registry import batched_form
from pyro_bnn.infer.trainer import SchedulerInterval, Trainer
from pyro_bnn.infer.trainer_loop import learning_rates


@dataclass
class RunOutcome:
    """How one run of a batch ended.

    Attributes:
        history: Its trainer's history (one record per completed epoch).
        error: The :class:`~pyro_bnn.infer.NonFiniteLossError` that stopped it, or None when it finished.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    error: Exception | None = None

    @property
    def failed(self) -> bool:
        """Whether the run stopped on a non-finite loss, parameter or prediction."""
        return self.error is not None


class _Batch:
    """The state of one lockstep fit: the trainers, their stack and step, and which runs still train.

    ``seeds`` (each run's noise seed; None: its trainer's, a random one without) and ``stacked`` (the batched Adam's
    kind of update; None: by size) are given to a :meth:`part`, so that its runs train as they would in this batch.
    """

    def __init__(
        self,
        trainers: Sequence[Trainer],
        val_loaders: Sequence[Iterable | None],
        cuda_graph: bool,
        input_shape: tuple[int, ...],
        seeds: Sequence[int] | None = None,
        stacked: bool | None = None,
    ) -> None:
        self.trainers = list(trainers)
        self._options = (list(val_loaders), cuda_graph, input_shape)
        self.stack = RunStack([t.bnn for t in trainers], [t.guide for t in trainers])
        graphed = cuda_graph and self.stack.loc.device.type == "cuda"
        forms = {batched_form(t.objective) for t in trainers}
        if len(forms) != 1:
            raise ValueError(f"the runs of a batch compute different objectives {sorted(map(str, forms))}")
        self.form = forms.pop()
        for run, trainer in enumerate(trainers):
            held = {id(p) for params in self.stack.run_parameters(run) for p in params}
            if held != {id(p) for p in trainer._params}:
                raise ValueError(f"run {run} trains parameters the batch does not stack: train it alone")
        if self.form.mixture != (self.stack.components is not None):
            raise ValueError(
                "batched, a node-noise mixture guide trains with the mixture-mean objective (MixtureMeanKL, --elbo "
                f"auto or mixture) and that objective with it only: got {type(trainers[0].objective).__name__} for "
                f"{type(trainers[0].guide).__name__}"
            )
        self.optimizer = batched_optimizer([t.optimizer for t in trainers], self.stack.leaves, stacked=stacked)
        self.bridge = OptimizerBridge(self.stack, self.optimizer, [t.optimizer for t in trainers])
        for run in range(len(trainers)):
            self.bridge.load(run)
        loc = self.stack.loc
        models = [t.bnn for t in trainers]
        kl = BatchedKL(
            models, self.stack.sites, closed_form_kl=self.form.closed_form_kl, device=loc.device, dtype=loc.dtype
        )
        if self.form.mixture and kl.monte_carlo_segments:
            raise ValueError("batched runs compute the mixture-mean KL against Normal priors only: train the run alone")
        self.step = BatchedStep(self.stack, kl, self.optimizer, self.form)
        self.graph = GraphedBatchedStep(self.step) if graphed else None
        """The step replayed from a CUDA graph, on a CUDA device unless ``cuda_graph=False``; None otherwise."""
        particles, size = self.form.particles, self.stack.num_latents
        # Per run and step: (D,) for one draw, (P, D) for P particles; a point estimate draws its dropout masks'
        # values, M per example ((B M,), (0,) without dropout); node noise one draw per row, (B S, D).
        self._weight_noise = (size,) if particles == 1 else (particles, size)
        self._mask_size = sum(layer.size for layer in self.stack.dropout_layers(input_shape))
        if seeds is None:
            seeds = [t.seed if t.seed is not None else int(torch.randint(0, 2**62, ())) for t in trainers]
        self.noise = RunNoise(seeds, loc.device)
        self.val = [None if loader is None else gather(loader) for loader in val_loaders]
        self.active = [True] * len(trainers)
        """Which runs still train (a list: read on the host every step)."""
        self.outcomes = [RunOutcome(t.history) for t in trainers]

    def part(self, runs: Sequence[int]) -> _Batch:
        """A batch of ``runs`` (indices into this one) built from their trainers' current values and optimiser
        state: each with its noise seed and this batch's kind of update, so it trains as it would here (a run's
        values do not depend on the runs beside it)."""
        val_loaders, cuda_graph, input_shape = self._options
        seeds, stacked = [self.noise.seeds[r] for r in runs], getattr(self.optimizer, "stacked", None)
        trainers, loaders = [self.trainers[r] for r in runs], [val_loaders[r] for r in runs]
        return _Batch(trainers, loaders, cuda_graph, input_shape, seeds, stacked)

    def noise_shape(self, rows: int) -> tuple[int, ...]:
        """The shape of one run's noise for a step on ``rows`` examples."""
        if self.form.mixture:
            return (rows * self.form.copies, self.stack.num_latents)
        return (rows * self._mask_size,) if self.stack.point else self._weight_noise

    @torch.no_grad()
    def write_back(self, runs: list[int]) -> None:
        """Copies the stacked values and optimiser state of ``runs`` into their own guides, networks and
        optimisers."""
        self.stack.write_runs(runs)
        for run in runs:
            self.bridge.store(run)

    def finite(self) -> torch.Tensor:
        """``(R,)`` bool: the runs whose stacked values are all finite."""
        stack = self.stack
        finite = torch.ones(stack.num_runs, dtype=torch.bool, device=stack.loc.device)
        for value in stack.leaves:  # a network without weight sites has an empty loc, which is not a leaf
            finite &= torch.isfinite(value.reshape(value.shape[0], -1)).all(1)
        return finite

    def fail(self, run: int, message: str) -> None:
        self.active[run] = False
        self.outcomes[run].error = NonFiniteLossError(message)

    def running(self) -> list[int]:
        return [r for r, active in enumerate(self.active) if active]

    def run_step(self, inputs: StepInputs) -> tuple:
        """One step of every run still training (:meth:`BatchedStep.step <.step.BatchedStep.step>`), replayed from
        the graph where there is one."""
        inputs = inputs._replace(active=torch.tensor(self.active))  # on the host: the step moves it where needed
        if self.graph is not None:
            return self.graph(inputs)
        return self.step.step(inputs)

    def applied_non_finite(self) -> bool:
        """Whether the last step updated a run whose loss turned non-finite in it (a graph replayed with the rows
        update, which skips only the runs known to be inactive before the step)."""
        return self.graph is not None and self.graph.last_replayed and not self.optimizer.stacked


def fit_batched(
    trainers: Sequence[Trainer],
    train_loaders: Sequence[Iterable],
    epochs: int,
    *,
    val_loaders: Sequence[Iterable | None] | None = None,
    resume_from: Sequence[str | os.PathLike | None] | None = None,
    progress: bool | None = None,
    cuda_graph: bool | None = None,
) -> list[RunOutcome]:
    """Trains every trainer until ``epochs`` epochs are complete, a callback stops it, or it diverges.

    Args:
        trainers: R trainers of compatible runs (:class:`~.stack.RunStack` says which are): each set up by this
            call, with its own seed, guide, optimiser, schedules and callbacks.
        train_loaders: Each run's training batches (the same number per epoch for every run; the same batch size).
        epochs: Total epochs of every run (counting those before a resume).
        val_loaders: Each run's validation batches or None; adds the ``val_*`` metrics to its records.
        resume_from: Each run's checkpoint to resume from, or None. Runs resumed at different epochs (a batch
            stopped while it wrote its checkpoints) train by level: those behind as a batch of their own until
            they reach the next runs' epoch, then with them; each ends exactly where it would have.
        progress: Show one progress bar over the batch's epochs; None (the default): where any trainer's
            :class:`~pyro_bnn.infer.RuntimeOptions` asks for a bar.
        cuda_graph: On a CUDA device, replay the batched step from a captured CUDA graph
            (:class:`~.graph.GraphedBatchedStep`; same results, fewer launches). False runs it op by op; None (the
            default): where every trainer's runtime options allow CUDA graphs.

    Returns:
        One :class:`RunOutcome` per trainer, in order. Each record of a history holds what a single run's holds;
        its ``time_s`` is the batch's epoch time divided by the runs that trained in it, and ``batched_runs`` says
        how many that was.

    Raises:
        ValueError: The runs cannot be batched (one line naming the run and the reason), before any step.
    """
    num_steps = check_trainers(trainers, train_loaders, epochs)
    count = len(trainers)
    progress = any(t.progress for t in trainers) if progress is None else progress
    cuda_graph = all(t.cuda_graph for t in trainers) if cuda_graph is None else cuda_graph
    val_loaders = list(val_loaders) if val_loaders is not None else [None] * count
    resume_from = list(resume_from) if resume_from is not None else [None] * count
    if len(val_loaders) != count or len(resume_from) != count:
        raise ValueError("val_loaders and resume_from need one entry per trainer")
    shapes = [
        set_up(trainer, loader, checkpoint)
        for trainer, loader, checkpoint in zip(trainers, train_loaders, resume_from, strict=True)
    ]
    for run, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise ValueError(
                f"run {run}'s first batch has shapes {shape[0]} and {shape[1]}, run 0's {shapes[0][0]} and "
                f"{shapes[0][1]}: the runs of a batch need the same batch size and data shapes"
            )
    for trainer, loader in zip(trainers, val_loaders, strict=True):
        if loader is not None:  # a validation count a mixture guide refuses, before any step
            trainer.validation.check_guide(trainer.guide)
    batch = _Batch(trainers, val_loaders, cuda_graph, shapes[0][0][1:])  # checks every run, before any step
    for trainer in trainers:
        for callback in trainer.callbacks:
            callback.on_train_start(trainer)
    for run, trainer in enumerate(trainers):
        if trainer.stop_training or trainer.epoch >= epochs:  # a resumed run that had met its stopping rule
            batch.active[run] = False
    first = min((trainers[r].epoch for r in batch.running()), default=epochs)
    bar = tqdm(total=max(0, epochs - first), desc=f"{count} batched runs", disable=not progress, dynamic_ncols=True)
    # Runs resumed from checkpoints of different epochs (a batch killed while it wrote them) train by level: the
    # runs furthest behind as a batch of their own until they reach the next runs' epoch, then with those. A run's
    # values do not depend on the runs beside it, so each continues exactly where it stopped.
    while waiting := batch.running():
        epoch = min(trainers[r].epoch for r in waiting)
        until = min((trainers[r].epoch for r in waiting if trainers[r].epoch > epoch), default=epochs)
        runs = [r for r in waiting if trainers[r].epoch == epoch]
        part = batch if epoch == first and runs == waiting else batch.part(runs)  # all in step: the batch itself
        loaders = train_loaders if part is batch else [train_loaders[r] for r in runs]
        while part.running():
            totals = _train_epoch(part, loaders, epoch, num_steps)
            _end_epoch(part, epoch, until, totals)
            epoch += 1
            bar.update(1)
        if part is not batch:
            for run, outcome in zip(runs, part.outcomes, strict=True):
                batch.outcomes[run].error = outcome.error
                trainer = trainers[run]
                batch.active[run] = not (outcome.failed or trainer.stop_training or trainer.epoch >= epochs)
    bar.close()
    for run, trainer in enumerate(trainers):
        if not batch.outcomes[run].failed:
            for callback in trainer.callbacks:
                callback.on_train_end(trainer)
    return batch.outcomes


def _step_scheduler(scheduler) -> None:
    """Steps a run's learning-rate scheduler. Its optimiser never steps itself (the batched Adam updates the run), so
    torch would warn that the scheduler steps first; the rates are read before each batched update and the
    scheduler stepped after it, the order of a single run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
        scheduler.step()


def _train_epoch(batch: _Batch, loaders: Sequence[Iterable], epoch: int, num_steps: int) -> tuple:
    """One epoch's steps of every run; returns ``(per-run [loss, data term] sums, per-run KL weight sums, seconds,
    steps, {run: its last step's learning rates} under per-step schedules)`` for :func:`_end_epoch`."""
    trainers, stack = batch.trainers, batch.stack
    device, dtype = stack.loc.device, stack.loc.dtype
    for trainer in trainers:
        if not trainer.bnn.training:  # train() walks every module: only when something switched a run to eval
            trainer.bnn.train()
    for loader in loaders:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
    batch.noise.start_epoch(epoch)
    iterators = [iter(loader) for loader in loaders]
    count = len(trainers)
    totals = torch.zeros(count, 2, dtype=torch.float64, device=device)
    kl_totals = [0.0] * count
    used: dict[int, dict[str, float]] = {}  # each run's rates of its last step (per-step schedules)
    weight_decays = batch.bridge.weight_decays()
    start = time.perf_counter()
    for step in range(1, num_steps + 1):
        pairs = [next(it) for it in iterators]
        x = torch.stack([p[0] for p in pairs]).to(device, non_blocking=True)
        y = torch.stack([p[1] for p in pairs]).to(device, non_blocking=True)
        weights = []
        for run, trainer in enumerate(trainers):
            weight = trainer.kl_schedule(epoch + (step - 1) / num_steps)
            weight = check_kl_weight(weight * minibatch_kl_weight(trainer.kl_weighting, step, num_steps))
            weights.append(weight)
            kl_totals[run] += weight
        eps = batch.noise.draw(batch.noise_shape(x.shape[1]), dtype=dtype, device=device)
        kl_weight = torch.tensor(weights, dtype=dtype, device=device)
        terms, updated = batch.run_step(StepInputs(x, y, kl_weight, eps, batch.bridge.learning_rates(), weight_decays))
        for run in [r for r, ok in enumerate(updated.tolist()) if batch.active[r] and not ok]:
            trainer = trainers[run]
            message = trainer._non_finite_message(float(terms.loss[run]), step, x[run], batch.applied_non_finite())
            batch.fail(run, message)
        totals += torch.stack([terms.loss, terms.data_term], 1).double() * updated[:, None]
        for run in batch.running():
            trainer = trainers[run]
            trainer.global_step += 1
            if trainer.scheduler is not None and trainer.lr_scheduler_interval is SchedulerInterval.STEP:
                used[run] = learning_rates(trainer.optimizer)  # this step's rates, as a single run records them
                _step_scheduler(trainer.scheduler)
    return totals.tolist(), kl_totals, time.perf_counter() - start, num_steps, used


def _end_epoch(batch: _Batch, epoch: int, epochs: int, epoch_totals: tuple) -> None:
    trainers = batch.trainers
    totals, kl_totals, seconds, num_steps, used = epoch_totals
    finite = batch.finite()
    for run in batch.running():
        if not bool(finite[run]):
            batch.fail(
                run,
                f"parameters became NaN or infinite during epoch {epoch + 1} (after its last checked loss); training "
                f"stopped and {last_checkpoint_text(trainers[run].callbacks)}. {DIVERGENCE_ADVICE}",
            )
    running = batch.running()
    batch.write_back(running)
    records = {}
    for run in running:
        trainer = trainers[run]
        (loss, data), optimizer = totals[run], trainer.optimizer
        records[run] = {
            "epoch": epoch + 1,
            "loss": loss / num_steps,
            "data_term": data / num_steps,
            "kl_term": (loss - data) / num_steps,
            "kl_weight": kl_totals[run] / num_steps,
            "time_s": seconds / max(1, len(running)),
            "batched_runs": len(running),
            **used.get(run, learning_rates(optimizer)),
        }
    _validate(batch, running, records, epoch)
    for run in batch.running():
        trainer, record = trainers[run], records[run]
        trainer.epoch += 1
        trainer.history.append(record)
        if trainer.scheduler is not None and trainer.lr_scheduler_interval is SchedulerInterval.EPOCH:
            _step_scheduler(trainer.scheduler)
        for callback in trainer.callbacks:
            callback.on_epoch_end(trainer, record)
        if trainer.stop_training or trainer.epoch >= epochs:
            batch.active[run] = False


def _validate(batch: _Batch, running: list[int], records: dict[int, dict], epoch: int) -> None:
    """Adds every running run's validation metrics to its record (batched over the runs with validation data of
    one size); a run whose predictions are not finite fails, as a single run's ``Validation`` makes it."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    for run in running:
        if batch.val[run] is not None:
            validation = batch.trainers[run].validation
            key = (batch.val[run][0].shape[0], validation.samples_for(batch.trainers[run].guide), validation.n_bins)
            groups.setdefault(key, []).append(run)
    device = batch.stack.loc.device
    for (_, num_samples, n_bins), runs in groups.items():
        data = [(batch.val[r][0].to(device), batch.val[r][1].to(device)) for r in runs]
        metrics = validation_metrics(batch.stack, runs, data, num_samples, n_bins, batch.noise)
        for run, values in zip(runs, metrics, strict=True):
            if values is None:
                batch.fail(
                    run,
                    f"the network's predictions on the validation data are NaN or infinite after epoch {epoch + 1}: "
                    f"the parameters diverged; training stopped and "
                    f"{last_checkpoint_text(batch.trainers[run].callbacks)}. {DIVERGENCE_ADVICE}",
                )
                continue
            records[run].update({f"val_{k}": v for k, v in values.items()})
