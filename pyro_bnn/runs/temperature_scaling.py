"""Temperature scaling of a saved classification run: what ``pyro-bnn evaluate RUN --temperature`` does.

A temperature is fitted on the validation split the run held out (:func:`pyro_bnn.evaluation.fit_temperature`, on
a prediction with the run's guide and ``num_samples``), and the test split is scored with and without it. The
record, with the fitted temperature, is written to ``RUN/temperature.json``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyro_bnn._io import write_json_atomically
from pyro_bnn.bnn import BNN
from pyro_bnn.data import DatasetName, Task, TensorSplit
from pyro_bnn.evaluation import SUMMARY_KEYS, TemperatureMode, fit_temperature, nll
from pyro_bnn.predict import predict
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig, resolve_device
from pyro_bnn.runs.evaluate import DataDirs, check_data_dirs, check_data_dirs_used, read_run, with_data_dir
from pyro_bnn.runs.run_folder import CHECKPOINT

TEMPERATURE_FILE = "temperature.json"
"""The file ``--temperature`` writes into the run folder."""


def check_temperature_mode(mode: TemperatureMode | str) -> TemperatureMode:
    """Reads a ``--temperature-mode`` value (``"mean"`` or ``"samples"``).

    Raises:
        ValueError: one line naming ``mode`` and the modes there are.
    """
    try:
        return TemperatureMode(mode)
    except ValueError:
        names = ", ".join(member.value for member in TemperatureMode)
        raise ValueError(f"--temperature-mode must be one of {names}; got {mode!r}") from None


def check_temperature_run(config: RunConfig) -> None:
    """Checks, before any data is loaded, that a run of ``config`` can be temperature-scaled: a classification run
    that held out validation examples.

    Raises:
        ValueError: one line: a regression run, or a run trained with ``--val-size 0``.
    """
    dataset = DatasetName(config.dataset)
    if dataset.task is not Task.CLASSIFICATION:
        raise ValueError(
            f"--temperature does not apply to a regression run (dataset {dataset.value!r}): temperature scaling "
            "needs class probabilities"
        )
    if config.val_size is not None and float(config.val_size) == 0:
        raise ValueError(_no_validation_message(config))


def _no_validation_message(config: RunConfig) -> str:
    return (
        f"--temperature fits the temperature on the run's validation split, but this {config.dataset} run has no "
        f"validation examples (--val-size {config.val_size}); retrain with --val-size N > 0"
    )


@dataclass
class TemperatureEvaluation:
    """A saved run made ready for temperature scaling: its config, restored model, validation and test splits.

    Attributes:
        run_dir: The run folder.
        config: The run's config (``num_samples`` and ``device`` as asked).
        mode: How the temperature is applied (:class:`~pyro_bnn.evaluation.TemperatureMode`).
        bnn: The restored model.
        guide: The restored guide.
        val: The validation split the run held out, on the run's device, ``x (N_val, ...)``, ``y (N_val,)``.
        test: The test split, on the run's device.
    """

    run_dir: Path
    config: RunConfig
    mode: TemperatureMode
    bnn: BNN
    guide: Any
    val: TensorSplit
    test: TensorSplit


def load_temperature_evaluation(
    run_dir: str | os.PathLike,
    *,
    mode: TemperatureMode | str = TemperatureMode.MEAN,
    num_samples: int | None = None,
    device: str | None = None,
    data_dirs: DataDirs | None = None,
) -> TemperatureEvaluation:
    """Reads a run folder, restores its model and loads its validation and test splits.

    ``mode`` and ``data_dirs`` are checked before the checkpoint is read, the run (classification, with validation
    examples) before any data is loaded.

    Raises:
        FileNotFoundError: no ``config.json`` or checkpoint in ``run_dir``, or the data cannot be found.
        ValueError: a bad ``mode``, ``data_dirs`` entry or option, a regression run, or a run without validation
            examples.
    """
    mode = check_temperature_mode(mode)
    dirs = check_data_dirs(data_dirs)
    run, config, state = read_run(run_dir, num_samples=num_samples, device=device)
    check_temperature_run(config)
    check_data_dirs_used(dirs, {config.dataset})
    config = with_data_dir(config, dirs)
    resolved = resolve_device(config.device)
    data = runs.load_data(config)
    if len(data.val) == 0:  # a val_size that rounds to no examples
        raise ValueError(_no_validation_message(config))
    bnn, guide = runs.restore(config, data, run / CHECKPOINT, resolved, state)

    def on_device(split: TensorSplit) -> TensorSplit:
        return TensorSplit(split.x.to(resolved), split.y.to(resolved))

    return TemperatureEvaluation(run, config, mode, bnn, guide, on_device(data.val), on_device(data.test))


def score_temperature_evaluation(evaluation: TemperatureEvaluation) -> dict[str, Any]:
    """Fits the temperature on the validation split and scores the test split with and without it.

    Both splits are predicted with the run's guide and ``num_samples`` (validation first, then test, from the
    seed the run restores with). Writes the record to ``RUN/temperature.json`` atomically.

    Returns:
        ``{"temperature", "mode", "val_nll_before", "val_nll_after", "test", "test_tempered", "num_val",
        "num_test", "num_samples"}``; ``test`` and ``test_tempered`` hold ``accuracy, nll, brier, ece, mce`` of the
        test predictive before and after (:meth:`~pyro_bnn.predict.Prediction.metrics`). ``val_nll_after <=
        val_nll_before`` always (:func:`~pyro_bnn.evaluation.fit_temperature` keeps ``T = 1`` otherwise).
    """
    e, config = evaluation, evaluation.config
    val = predict(e.bnn, e.guide, (e.val.x, e.val.y), num_samples=config.num_samples)
    temperature = fit_temperature(val.probs, val.targets, mode=e.mode)
    val_tempered = val.tempered(temperature, mode=e.mode)
    test = predict(e.bnn, e.guide, (e.test.x, e.test.y), num_samples=config.num_samples)
    record = {
        "temperature": temperature,
        "mode": e.mode.value,
        "val_nll_before": nll(val.probs, val.targets),
        "val_nll_after": nll(val_tempered.probs, val_tempered.targets),
        "test": test.metrics(n_bins=config.n_bins),
        "test_tempered": test.tempered(temperature, mode=e.mode).metrics(n_bins=config.n_bins),
        "num_val": len(e.val.y),
        "num_test": len(e.test.y),
        "num_samples": config.num_samples,
    }
    write_json_atomically(e.run_dir / TEMPERATURE_FILE, record)
    return record


def fit_run_temperature(
    run_dir: str | os.PathLike,
    *,
    mode: TemperatureMode | str = TemperatureMode.MEAN,
    num_samples: int | None = None,
    device: str | None = None,
    data_dirs: DataDirs | None = None,
) -> dict[str, Any]:
    """Temperature scaling of a saved classification run, fitted on the validation split it held out.

    Args:
        run_dir: A run folder written by :func:`~pyro_bnn.runs.train_run`.
        mode: ``"mean"`` (temper the posterior predictive; the default and the one to report) or ``"samples"``
            (temper each posterior sample); see :class:`~pyro_bnn.evaluation.TemperatureMode`.
        num_samples: Posterior samples per input (default: the run's).
        device: Where to predict (default: the run's).
        data_dirs: Data folder per data set name (``{"mnist": path}``).

    Returns:
        The record :func:`score_temperature_evaluation` writes to ``RUN/temperature.json``.

    Raises:
        FileNotFoundError: no run in ``run_dir``, or its data cannot be found.
        ValueError: see :func:`load_temperature_evaluation`.
    """
    loaded = load_temperature_evaluation(
        run_dir, mode=mode, num_samples=num_samples, device=device, data_dirs=data_dirs
    )
    return score_temperature_evaluation(loaded)


def format_temperature_table(record: dict[str, Any]) -> str:
    """A small text table of a :func:`fit_run_temperature` record: the test metrics before and after."""
    lines = [
        f"temperature T = {record['temperature']:.4f} (mode {record['mode']}), fitted on {record['num_val']} "
        f"validation examples: val nll {record['val_nll_before']:.4f} -> {record['val_nll_after']:.4f}",
        f"test ({record['num_test']} examples, {record['num_samples']} posterior samples):",
        f"{'metric':<8}  {'before':>9}  {'tempered':>9}",
    ]
    for key in SUMMARY_KEYS:
        lines.append(f"{key:<8}  {record['test'][key]:>9.4f}  {record['test_tempered'][key]:>9.4f}")
    return "\n".join(lines)
