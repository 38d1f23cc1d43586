"""Training a run from a :class:`RunConfig`: what ``pyro-bnn train`` does (its model: :mod:`.run_model`; re-scoring:
:mod:`.evaluate`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyro
import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.bnn import BNN
from pyro_bnn.data import DatasetSplits, Task, TensorSplit, load_dataset
from pyro_bnn.data.partition import test_subset_indices
from pyro_bnn.diagnostics.weight_stats import WeightStatsRecorder
from pyro_bnn.guides import Capability, mean_posterior_scale, parse_guide
from pyro_bnn.infer import (
    Checkpoint,
    EarlyStopping,
    HistoryLogger,
    LRSchedulerOptions,
    NonFiniteLossError,
    ObjectiveOptions,
    ResumeOptions,
    RuntimeOptions,
    Trainer,
    ValidationOptions,
    load_checkpoint,
    parse_kl_schedule,
)
from pyro_bnn.infer.checkpoint import config_differences
from pyro_bnn.node_noise import count_latents
from pyro_bnn.predict import Prediction
from pyro_bnn.runs.config import RunConfig, resolve_device
from pyro_bnn.runs.config_compare import changed_keys, normalized_config, same_setting, spelled_as
from pyro_bnn.runs.optimisation import run_lr_scheduler, run_objective, run_optimizer
from pyro_bnn.runs.run_folder import (
    CHECKPOINT,
    STOPPED,
    RunFolder,
    check_not_a_grid,
    check_not_busy,
    check_writable,
)
from pyro_bnn.runs.run_model import DRAWS as DRAWS
from pyro_bnn.runs.run_model import _build as _build  # forwarded by the pyro_bnn.experiments.runs shim
from pyro_bnn.runs.run_model import build_bnn
from pyro_bnn.runs.run_model import meta_bnn as meta_bnn
from pyro_bnn.runs.run_model import restore as restore
from pyro_bnn.runs.scoring import save_prediction_figure, score


@dataclass
class RunResult:
    """What a finished run wrote and measured.

    Attributes:
        out_dir: The run folder.
        metrics: What ``metrics.json`` holds.
        prediction: The test-set prediction (``probs`` for classification, ``means`` for regression).
        figure: The figure written, ``reliability.png`` (regression: ``predictive.png``); None with ``figures=False``.
    """

    out_dir: Path
    metrics: dict[str, Any]
    prediction: Prediction
    figure: Path | None = None
    bnn: BNN | None = None
    guide: Any = None

    def moved_to(self, folder: Path) -> RunResult:
        """The result with its paths in ``folder`` (a staged run has just replaced its old folder there)."""
        return replace(self, out_dir=folder, figure=None if self.figure is None else folder / self.figure.name)


WRITES_PER_RUN = 100
"""About how often a run writes its checkpoint, history and weight statistics while it trains (and always at the
end): after every epoch for runs of up to 100 epochs, after every ``epochs // 100``-th for longer ones."""


MIN_WRITE_INTERVAL_S = 5.0
"""Seconds a run that writes every few epochs (at least ``2 * WRITES_PER_RUN`` epochs) waits at least between two
of its periodic checkpoint (and history) writes: a full-batch toy run of thousands of epochs of a few milliseconds
each otherwise writes 100 checkpoints in well under a minute (bench/TRAINING_IO.md). Shorter runs write after every
epoch, however short. Any checkpoint resumes to the numbers of an uninterrupted run; this only bounds what an
interruption loses: about 5 s of training and 1 % of the epochs (a write waits for both)."""


WEIGHT_STATS_PER_RUN = 20
"""About how many weight-statistics snapshots a run records (the first epoch, every ``epochs // 20``-th and the
last; every epoch for runs of up to 39 epochs): the checkpoint carries them all, and when each write re-encoded
every snapshot so far (before :class:`~pyro_bnn._io.JsonListText`), 100 snapshots of a 1 000-step full-batch run
spent more time in JSON and pickling (34 s) than in training (12 s)."""


def load_data(config: RunConfig) -> DatasetSplits:
    """The run's data splits (the split and training subset depend on the run's data seed, or its seed without
    one; a ``test_subset`` does not, so every seed is scored on the same test examples)."""
    data = load_dataset(
        config.dataset,
        data_dir=config.data_dir,
        normalization=config.normalization,
        val_size=config.val_size,
        train_subset=config.train_subset,
        seed=config.seed if config.data_seed is None else config.data_seed,
        **config.generator_options(),
    )
    if config.test_subset is None:
        return data
    chosen = test_subset_indices(len(data.test), config.test_subset)
    return replace(data, test=TensorSplit(data.test.x[chosen], data.test.y[chosen]))


RESUME_MAY_CHANGE = ("epochs", "device", "num_samples", "test_subset", "data_dir")
"""Config keys a resume may change: more epochs extend a finished run; where it runs and how it is scored or where
the data lies do not change what was trained."""


def prepare_run_dir(
    config: RunConfig, out_dir: str | os.PathLike, *, resume: bool, overwrite: bool, resumable: bool = True
) -> bool:
    """Checks, before any data is loaded, that ``out_dir`` may receive this run; leaves nothing behind (the
    writability probe of :func:`~pyro_bnn.runs.run_folder.check_writable` is removed again).

    Args:
        config: The run.
        out_dir: Its folder.
        resume: Continue the run in ``out_dir`` (same config required).
        overwrite: Replace the run in ``out_dir`` once the new one has finished.
        resumable: Whether the verb can resume at all (``train``: ``--resume``; ``sample``: no): the message for a
            folder that already holds a run names only the flags the verb has.

    Returns:
        Whether the run will resume from a checkpoint in ``out_dir``.

    Raises:
        ValueError: ``out_dir`` is empty or cannot be created or written, its checkpoint is not a safe pyro_bnn
            checkpoint, or ``resume`` is set but the checkpoint was written by a different config (naming the keys
            that differ) or has trained more epochs than ``config.epochs``, or ``resume`` and ``overwrite`` are
            both set.
        FileExistsError: ``out_dir`` holds another run's checkpoint and neither ``resume`` nor ``overwrite`` is
            set, holds a grid of runs (an ensemble's, a reproduction's), or another run is using it right now.
    """
    if resume and overwrite:  # resuming keeps the run, overwriting replaces it: one would be ignored
        raise ValueError(
            "resume=True and overwrite=True exclude each other: resume continues the run, overwrite replaces it"
        )
    check_writable(out_dir)  # the string as given: Path("") would be the current folder
    out = Path(out_dir)
    check_not_busy(out)
    check_not_a_grid(out)
    checkpoint = out / CHECKPOINT
    if not checkpoint.exists():
        return False
    if resume:
        state = load_checkpoint(checkpoint)
        saved = normalized_config(json.loads(state["config"]), checkpoint)
        current = json.loads(config.to_json())
        # Option strings equal up to the case their parsers ignore are the same setting ("TANH", "tanh").
        differing = config_differences(saved, current, ignore=RESUME_MAY_CHANGE, same=same_setting)
        if differing:
            changed = changed_keys(saved, current, ignore=RESUME_MAY_CHANGE)
            value = saved.get(changed[0])
            # a flag to name only where one setting differs and a flag with a value sets it back
            hint = (
                f"--{changed[0].replace('_', '-')} {value}"
                if len(changed) == 1 and isinstance(value, str | int | float) and not isinstance(value, bool)
                else "the settings in its config.json"
            )
            raise ValueError(
                f"cannot resume {checkpoint}: it was written by a different config ({differing}); resume it with "
                f"{hint}, or pass --overwrite to start again"
            )
        done = int(state.get("epoch", 0))
        if config.epochs < done:  # its config would claim fewer epochs than its weights have had
            raise ValueError(
                f"cannot resume {checkpoint} with --epochs {config.epochs}: it has trained {done} epochs; a resume "
                f"only extends a run (pass --epochs {done} or more, or --overwrite to start again)"
            )
        return True
    if not overwrite:
        flags = (
            "pass --resume to continue it or --overwrite to start again"
            if resumable
            else "pass --overwrite to replace it"
        )
        raise FileExistsError(f"{out} already holds a run ({CHECKPOINT}); {flags}")
    load_checkpoint(checkpoint)  # an unreadable or hostile file is refused here too, before any work
    return False


def _options_added_since(checkpoint: Path | None) -> tuple[str, ...]:
    """Config keys a checkpoint's stored config lacks (options added since it was written; ``prepare_run_dir`` has
    checked that this run leaves them at their defaults)."""
    if checkpoint is None:
        return ()
    saved = json.loads(load_checkpoint(checkpoint)["config"])
    return tuple(sorted(set(json.loads(RunConfig().to_json())) - set(saved)))


def train_run(
    config: RunConfig,
    out_dir: str | os.PathLike,
    *,
    data: DatasetSplits | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    cuda_graph: bool = True,
    figures: bool = True,
) -> RunResult:
    """Trains one run and writes ``config.json``, ``checkpoint.pt``, ``history.json``, ``metrics.json`` and
    ``reliability.png`` (classification) or ``predictive.png`` (regression) to ``out_dir``.

    Args:
        config: The run.
        out_dir: Output folder (created).
        data: The run's data if already loaded (``load_data(config)``); loaded here otherwise.
        resume: Continue from ``out_dir/checkpoint.pt`` if it exists (same config required).
        overwrite: Start afresh even if ``out_dir`` holds an earlier run's checkpoint.
        progress: Show progress bars.
        cuda_graph: On CUDA, replay training steps from a captured CUDA graph where possible (``Trainer``).
        figures: Draw the run's figures (the test figure and ``weight_stats.png``); a reproduction grid draws none
            (its report draws its own, and ``pyro-bnn evaluate RUN`` draws a run's reliability diagram later).

    Returns:
        The output folder, the metrics written, the test-set prediction and the figure's path.
    """
    config = config.resolved()
    resuming = prepare_run_dir(config, out_dir, resume=resume, overwrite=overwrite)
    device = resolve_device(config.device)
    data = data if data is not None else load_data(config)
    final = Path(out_dir)
    with RunFolder(final, overwrite=overwrite and not resuming) as out:
        result = _train_in(config, out, data, device, resuming, progress, cuda_graph, figures)
    return result.moved_to(final)


def _train_in(
    config: RunConfig,
    out: Path,
    data: DatasetSplits,
    device: torch.device,
    resuming: bool,
    progress: bool,
    cuda_graph: bool = True,
    figures: bool = True,
) -> RunResult:
    """Everything ``train_run`` does inside the (locked, possibly staging) run folder ``out``."""
    run = prepare_trainer(config, out, data, device, resuming, progress, cuda_graph)
    start = time.perf_counter()
    try:
        history = run.trainer.fit(run.train, config.epochs, val_loader=run.val, resume_from=run.resume_from)
    except NonFiniteLossError as err:
        record_stop(out, err)
        raise
    return finish_run(run, history, time.perf_counter() - start, figures=figures)


def record_stop(out: Path, err: NonFiniteLossError) -> None:
    """Writes :data:`~pyro_bnn.runs.run_folder.STOPPED` into the run folder ``out`` of a run that diverged, where its
    last good checkpoint stays (a run that diverged before its first checkpoint leaves no folder to explain)."""
    if (out / CHECKPOINT).exists():
        write_json_atomically(out / STOPPED, {"stopped": "diverged", "message": str(err)})


def check_validation_split(config: RunConfig, data: DatasetSplits) -> None:
    """Refuses early stopping without validation examples: a ``val_size`` fraction that rounds to none of the data
    set's examples (``0.0001`` of 1 438) passes the config's own check, which cannot count them before loading."""
    if config.patience and not len(data.val):
        raise ValueError(
            f"patience={config.patience} needs a validation split, but val_size={config.val_size!r} holds out no "
            f"example of {config.dataset!r}; pass a larger val_size (--val-size)"
        )


@dataclass
class PreparedRun:
    """A run set up to train in its folder: what ``Trainer.fit`` (or a batch of runs) needs, and what
    :func:`finish_run` scores and writes afterwards."""

    config: RunConfig
    out: Path
    data: DatasetSplits
    device: torch.device
    trainer: Trainer
    train: Any
    val: Any
    resume_from: Path | None
    recorder: WeightStatsRecorder | None


def prepare_trainer(
    config: RunConfig,
    out: Path,
    data: DatasetSplits,
    device: torch.device,
    resuming: bool,
    progress: bool,
    cuda_graph: bool = True,
) -> PreparedRun:
    """Writes ``config.json`` into the run folder ``out`` and builds the run's model, loaders, callbacks and trainer
    (nothing trains yet)."""
    check_validation_split(config, data)
    if resuming:  # keeps the checkpoint's spelling of options given in another case (prepare_run_dir allowed it)
        config = spelled_as(config, json.loads(load_checkpoint(out / CHECKPOINT)["config"]))
    write_json_atomically(out / "config.json", json.loads(config.to_json()))
    (out / STOPPED).unlink(missing_ok=True)  # an earlier session's divergence: this one trains again
    checkpoint = out / CHECKPOINT
    pyro.set_rng_seed(config.seed)
    bnn, _ = build_bnn(config, data)
    train, val, _ = data.loaders(config.batch_size, seed=config.seed, device=device)
    # Files written during training grow with the epochs, so a run of thousands of short epochs (full-batch toy
    # problems) writes them about 100 times in all rather than after every epoch: once per epoch made a
    # 5 000-epoch cubic run spend most of its time re-encoding JSON. An interrupted run then loses at most
    # MIN_WRITE_INTERVAL_S of training and 1 % of its epochs.
    every = max(1, config.epochs // WRITES_PER_RUN)
    interval = MIN_WRITE_INTERVAL_S if every > 1 else 0.0
    callbacks = [
        Checkpoint(checkpoint, every=every, min_interval_s=interval),
        HistoryLogger(out / "history.json", every=every, min_interval_s=interval),
    ]
    recorder = None
    if parse_guide(config.guide).offers(Capability.NORMAL_SCALES):
        # Histograms of mu, sigma and |mu| / sigma per layer (`pyro-bnn diagnose` plots them); before the
        # checkpoint, so a checkpoint holds the statistics of its own epoch.
        recorder = WeightStatsRecorder(out / "weight_stats.json", every=max(1, config.epochs // WEIGHT_STATS_PER_RUN))
        callbacks.insert(0, recorder)
    if config.patience:
        # Before Checkpoint, so the final checkpoint holds the restored best epoch that metrics.json scores.
        monitor, mode = ("val_nll", "min") if data.task is Task.REGRESSION else ("val_accuracy", "max")
        callbacks.insert(0, EarlyStopping(monitor, patience=config.patience, mode=mode, restore_best=True))
    trainer = Trainer(
        bnn,
        parse_guide(config.guide),  # a spec with loc=map starts the guide at a MAP warm start (not on a resume)
        optim=run_optimizer(config, len(data.train)),
        objective=ObjectiveOptions(
            run_objective(config),
            kl_schedule=parse_kl_schedule(config.kl_anneal),
            kl_weighting=config.kl_weighting,
            temperature=config.temperature,
        ),
        lr_scheduler=LRSchedulerOptions(run_lr_scheduler(config, len(train)), interval="step"),
        validation=ValidationOptions(config.num_val_samples, config.n_bins),
        runtime=RuntimeOptions(device=device, seed=config.seed, progress=progress, cuda_graph=cuda_graph),
        resume=ResumeOptions(
            json.loads(config.to_json()), RESUME_MAY_CHANGE + _options_added_since(checkpoint if resuming else None)
        ),
        callbacks=callbacks,
    )
    val = val if len(data.val) else None
    return PreparedRun(config, out, data, device, trainer, train, val, checkpoint if resuming else None, recorder)


def finish_run(
    run: PreparedRun, history: list[dict[str, Any]], train_time: float, *, figures: bool = True, **extra: Any
) -> RunResult:
    """Scores a trained run on its test set and writes ``metrics.json`` (with ``extra`` entries) and, with
    ``figures``, its figures into its folder."""
    config, out, data, device, trainer = run.config, run.out, run.data, run.device, run.trainer
    bnn = trainer.bnn
    metrics, prediction = score(bnn, trainer.guide, data.test.x.to(device), data.test.y.to(device), config)
    spec = parse_guide(config.guide)
    if bnn.sites and (spec.offers(Capability.NORMAL_SCALES) or spec.offers(Capability.NORMAL_MIXTURE)):
        # A Normal scale per weight (a mixture: the mean of its components' sigmas); other families declare none.
        metrics["mean_posterior_sigma"] = mean_posterior_scale(trainer.guide, bnn)[0]
    if config.node_noise:
        counts = count_latents(bnn.net)
        metrics.update(
            latent_input_nodes=counts.input_nodes,
            latent_bias_scalars=counts.bias_scalars,
            deterministic_weights=counts.weights,
        )
    # A resumed run's earlier sessions: the epoch times of the epochs its checkpoint restored (their set-up aside).
    earlier = sum(float(r.get("time_s", 0.0)) for r in history[: trainer.run_state.resumed_epochs])
    metrics.update(
        train_time_s=train_time + earlier,
        epochs_run=len(history),
        device=str(device),
        num_train=len(data.train),
        **extra,
        history=history,
    )
    write_json_atomically(out / "metrics.json", metrics)
    if not figures:
        return RunResult(out, metrics, prediction, None, bnn, trainer.guide)
    if run.recorder is not None and run.recorder.history:
        from pyro_bnn.plots import plot_weight_statistics, save_figure  # matplotlib: imported when a run draws

        save_figure(plot_weight_statistics(run.recorder.history), out / "weight_stats.png")
    title = f"{config.model} {config.activation} on {config.dataset}"
    if data.task is Task.REGRESSION:
        title += f", noise scale {config.noise_scale:g}"
    figure = save_prediction_figure(prediction, config, out, title=title, train=data.train, test=data.test)
    return RunResult(out, metrics, prediction, figure, bnn, trainer.guide)
