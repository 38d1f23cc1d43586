"""Re-scoring a saved run, and OOD detection with it: what ``pyro-bnn evaluate`` (``--ood``) does.

The model is rebuilt from the config stored *in the checkpoint*, never from the editable ``config.json`` next to
it; a ``config.json`` that differs is refused, naming the keys. The checkpoint is read (and vetted) before any data
is loaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.bnn import BNN
from pyro_bnn.data import (
    DatasetName,
    DatasetSplits,
    Normalization,
    Task,
    TensorSplit,
    dataset_shape,
    load_dataset,
    parse_corruption,
)
from pyro_bnn.data.corruptions import CORRUPTION_FAMILY
from pyro_bnn.data.images import FASHION_MNIST_MEAN_STD, MNIST_MEAN_STD
from pyro_bnn.data.normalization import normalize_pixels
from pyro_bnn.data.partition import test_subset_indices
from pyro_bnn.evaluation import ood_metrics, ood_scores
from pyro_bnn.experiments import runs
from pyro_bnn.experiments.config import RunConfig, check_corruption, resolve_device
from pyro_bnn.experiments.run_folder import CHECKPOINT, check_writable
from pyro_bnn.infer import load_checkpoint
from pyro_bnn.infer.checkpoint import config_differences
from pyro_bnn.plots import save_figure
from pyro_bnn.plots.ood import plot_ood_histograms
from pyro_bnn.predict import predict


@dataclass
class Evaluation:
    """A saved run made ready for re-scoring: its config, data, restored model and (corrupted) test inputs."""

    run_dir: Path
    config: RunConfig
    bnn: BNN
    guide: Any
    x: torch.Tensor
    y: torch.Tensor
    corruption: str | None
    data: DatasetSplits | None = None


def check_run_folder(run_dir: str | os.PathLike) -> Path:
    """Checks, before anything is loaded, that ``run_dir`` is a run folder that ``evaluate`` and ``diagnose`` can
    write their results into; returns it as a path.

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``config.json`` (it is not a run folder, or does not exist).
        ValueError: ``run_dir`` is empty, cannot be looked at (a name too long) or cannot be written.
    """
    if os.fspath(run_dir) == "":
        raise ValueError("the run folder is empty; name the --out folder of a 'pyro-bnn train' run")
    run = Path(run_dir)
    try:
        found = (run / "config.json").is_file()
    except OSError as err:  # is_file() is False for a missing path, but a name too long raises
        raise ValueError(f"run folder {run} cannot be used: {err.strerror or err}") from None
    if not found:
        raise FileNotFoundError(f"{run} has no config.json: is it a folder written by 'pyro-bnn train'?")
    check_writable(run, option="run folder")
    return run


def _read_run(
    run_dir: str | os.PathLike, *, num_samples: int | None, device: str | None
) -> tuple[Path, RunConfig, dict[str, Any]]:
    """The run folder, the config its checkpoint was trained with (``num_samples`` and ``device`` replaced where
    given, validated) and the checkpoint itself; reads no data."""
    run = check_run_folder(run_dir)
    shown = RunConfig.load(run / "config.json")
    # The checkpoint, not the editable config.json, says what was trained; read (and vet) it before any data.
    state = load_checkpoint(run / CHECKPOINT)
    trained = runs.normalized_config(json.loads(state["config"]), run / CHECKPOINT)
    differing = config_differences(trained, json.loads(shown.to_json()), ignore=runs.RESUME_MAY_CHANGE)
    if differing:
        raise ValueError(
            f"{run / 'config.json'} does not match the config stored in {run / CHECKPOINT} ({differing}); "
            "restore config.json or retrain"
        )
    config = RunConfig.from_dict(trained)
    config.data_dir = shown.data_dir
    if num_samples is not None:
        config.num_samples = num_samples
    if device is not None:
        config.device = device
    config.validate()
    return run, config, state


def check_data_dirs(data_dirs: Mapping[str, str | os.PathLike] | None) -> dict[str, str | os.PathLike]:
    """Validates ``--data-dir DATASET=PATH`` entries before anything is read; returns them keyed by canonical data
    set name (``"fmnist"`` becomes ``"fashion-mnist"``).

    Raises:
        ValueError: a name is not a data set, or names one that is not read from files (only MNIST and
            Fashion-MNIST are).
    """
    checked: dict[str, str | os.PathLike] = {}
    for name, path in (data_dirs or {}).items():
        try:
            dataset = DatasetName(name)
        except ValueError as err:
            raise ValueError(f"--data-dir {name}={path}: {err}") from None
        if not dataset.reads_data_dir:
            raise ValueError(
                f"--data-dir {name}={path}: dataset {dataset.value!r} is not read from files "
                "(only mnist and fashion-mnist are)"
            )
        checked[dataset.value] = path
    return checked


def load_evaluation(
    run_dir: str | os.PathLike,
    *,
    num_samples: int | None = None,
    corruption: str | None = None,
    device: str | None = None,
    data_dirs: Mapping[str, str | os.PathLike] | None = None,
) -> Evaluation:
    """Reads a run folder written by :func:`train_run`, restores its model and prepares the test inputs.

    ``data_dirs`` (``{"mnist": path}``) names where a data set lies; an entry for the run's own data set replaces
    the folder its config recorded.

    Raises:
        FileNotFoundError: no ``config.json`` or checkpoint in ``run_dir``, or the data cannot be found.
        ValueError: ``run_dir`` cannot be written (:func:`check_run_folder`), a bad option or corruption string, or
            a corruption for a regression run.
    """
    dirs = check_data_dirs(data_dirs)
    run, config, state = _read_run(run_dir, num_samples=num_samples, device=device)
    check_corruption(corruption, config)
    _check_data_dirs_used(dirs, config, None)
    config.data_dir = dirs.get(config.dataset, config.data_dir)
    resolved = resolve_device(config.device)
    data = runs.load_data(config)
    bnn, guide = runs.restore(config, data, run / CHECKPOINT, resolved, state)
    x = data.test.x
    if corruption is not None:
        x = parse_corruption(corruption, generator=torch.Generator().manual_seed(config.seed))(x)
    return Evaluation(run, config, bnn, guide, x.to(resolved), data.test.y.to(resolved), corruption, data)


def score_evaluation(evaluation: Evaluation) -> dict[str, Any]:
    """Scores a :func:`load_evaluation` result; writes ``evaluation[-<corruption>].json`` and a reliability
    diagram (regression: ``predictive.png``) into the run folder and returns the metrics."""
    e, config = evaluation, evaluation.config
    metrics, prediction = runs.score(e.bnn, e.guide, e.x, e.y, config)
    metrics.update(corruption=e.corruption or "none", num_samples=config.num_samples)
    suffix = "" if e.corruption is None else "-" + e.corruption.replace(":", "_")
    write_json_atomically(e.run_dir / f"evaluation{suffix}.json", metrics)
    title = f"{config.model} {config.activation}, corruption {e.corruption or 'none'}"
    if not prediction.is_classification:
        title = f"{config.model} {config.activation} on {config.dataset}, noise scale {config.noise_scale:g}"
    train = e.data.train if e.data is not None else None
    test = TensorSplit(e.x.cpu(), e.y.cpu())
    runs.save_prediction_figure(prediction, config, e.run_dir, suffix=suffix, title=title, train=train, test=test)
    return metrics


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    num_samples: int | None = None,
    corruption: str | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Re-scores a saved run on its test split, optionally with corrupted inputs (``"gaussian:0.5"``; not for
    regression runs).

    Writes ``evaluation[-<corruption>].json`` and a matching reliability diagram (regression: ``predictive.png``)
    into the run folder.
    """
    return score_evaluation(load_evaluation(run_dir, num_samples=num_samples, corruption=corruption, device=device))


# ------------------------------------------------------------------------------------------------ OOD detection


@dataclass(frozen=True)
class OodSource:
    """What ``--ood`` names: another data set's test split, or the run's own test inputs corrupted.

    Attributes:
        spec: The canonical spelling: a data set's name (``"mnist"``) or a corruption (``"gaussian:0.5"``).
        dataset: The OOD data set, or None for a corruption.
        corruption: The corruption, or None for a data set.
    """

    spec: str
    dataset: DatasetName | None = None
    corruption: str | None = None

    @property
    def file_stem(self) -> str:
        """The name of the files written, without suffix: ``ood-mnist``, ``ood-gaussian_0.5``."""
        return "ood-" + self.spec.replace(":", "_")


def _classification_sets() -> str:
    return ", ".join(member.value for member in DatasetName if member.task is Task.CLASSIFICATION)


def parse_ood(spec: str) -> OodSource:
    """Reads an ``--ood`` value: a name without ``:`` is a data set (``mnist``, ``fashion-mnist``, ...), and
    ``NAME:VALUE`` a corruption of the run's own test inputs in ``--corruption``'s grammar (``gaussian:0.5``,
    ``salt-pepper:0.1``).

    Raises:
        ValueError: one line naming ``spec``: not a classification data set, or not a corruption with its value.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"--ood must name a data set ({_classification_sets()}) or a corruption such as 'gaussian:0.5'; "
            f"got {spec!r}"
        )
    if ":" not in spec:
        try:
            dataset = DatasetName(spec)
        except ValueError:
            raise ValueError(
                f"--ood {spec!r} is neither a data set ({_classification_sets()}) nor a corruption "
                f"({CORRUPTION_FAMILY.usages(', ')}; these take a value after ':')"
            ) from None
        if dataset.task is not Task.CLASSIFICATION:
            raise ValueError(
                f"--ood {spec!r}: {dataset.value!r} is a regression set; name a classification data set "
                f"({_classification_sets()})"
            )
        return OodSource(dataset.value, dataset=dataset)
    try:
        parsed = CORRUPTION_FAMILY.parse(spec)
    except ValueError as err:
        raise ValueError(f"--ood {spec!r}: {err}") from None
    arguments = ",".join(repr(float(value)) for value in parsed.values.values())
    canonical = f"{parsed.name}:{arguments}"
    return OodSource(canonical, corruption=canonical)


def check_ood(source: OodSource, config: RunConfig) -> None:
    """Checks, before any data is loaded, that ``source`` can be scored against a run of ``config``: a
    classification run, and an OOD data set other than its own whose inputs have the run's input shape.

    Raises:
        ValueError: one line naming the run's data set, and the shapes where they differ.
    """
    run_set = DatasetName(config.dataset)
    if run_set.task is not Task.CLASSIFICATION:
        raise ValueError(
            f"--ood does not apply to a regression run (dataset {run_set.value!r}): OOD detection scores a "
            "classifier's class probabilities"
        )
    if source.dataset is None:
        return
    if source.dataset is run_set:
        raise ValueError(
            f"--ood {source.spec} is the run's own data set; name another data set or a corruption such as "
            "'gaussian:0.5'"
        )
    ood_shape, run_shape = dataset_shape(source.dataset).input_shape, dataset_shape(run_set).input_shape
    if ood_shape != run_shape:
        raise ValueError(
            f"--ood {source.spec}: its inputs have shape {ood_shape}, but the run's model takes {run_set.value}'s "
            f"{run_shape}"
        )


def _check_data_dirs_used(dirs: Mapping[str, Any], config: RunConfig, source: OodSource | None) -> None:
    """Refuses a ``--data-dir`` entry for a data set this evaluation does not read (a typo, most likely)."""
    read = {config.dataset} | ({source.dataset.value} if source is not None and source.dataset else set())
    unused = sorted(set(dirs) - read)
    if unused:
        raise ValueError(
            f"--data-dir {unused[0]}={dirs[unused[0]]} is unused: this evaluation reads {', '.join(sorted(read))}"
        )


_PIXEL_STATISTICS = {DatasetName.MNIST: MNIST_MEAN_STD, DatasetName.FASHION_MNIST: FASHION_MNIST_MEAN_STD}
"""Pixel mean and std on the [0, 1] scale of the data sets whose ``standard`` normalisation uses fixed values."""


def _as_run_inputs(unit_pixels: torch.Tensor, config: RunConfig) -> torch.Tensor:
    """OOD images on the [0, 1] scale, transformed as the run transforms its own inputs.

    With ``standard`` normalisation that means the *run's* data set's mean and std, not the OOD set's: the network
    sees OOD pixels through the preprocessing it was trained with, and standardising them with their own statistics
    would make them look more like the training data than they are.
    """
    normalization = Normalization(config.normalization)
    mean = std = None
    if normalization is Normalization.STANDARD:
        run_set = DatasetName(config.dataset)
        if run_set not in _PIXEL_STATISTICS:
            raise ValueError(f"--ood needs fixed pixel statistics for standard normalisation of {run_set.value}")
        mean, std = _PIXEL_STATISTICS[run_set]
    return normalize_pixels(unit_pixels, normalization, max_value=1.0, mean=mean, std=std)


def ood_test_split(
    source: OodSource, config: RunConfig, test: TensorSplit, data_dirs: Mapping[str, Any] | None = None
) -> TensorSplit:
    """The OOD inputs and their labels: the run's test split with corrupted inputs, or the OOD set's test split
    preprocessed like the run's data (and cut to the run's ``test_subset``, where it has one, so that both sides
    are the same size).

    Args:
        source: What ``--ood`` named (:func:`parse_ood`), checked against the run (:func:`check_ood`).
        config: The run's config.
        test: The run's own test split, ``x (N, *input_shape)`` and ``y (N,)``.
        data_dirs: Data folder per data set name, for the OOD set (None: the usual places).

    Returns:
        ``x (N_out, *input_shape)`` and ``y (N_out,)``, the labels in the OOD set's own classes.
    """
    if source.corruption is not None:
        corrupt = parse_corruption(source.corruption, generator=torch.Generator().manual_seed(config.seed))
        return TensorSplit(corrupt(test.x), test.y)
    dirs = data_dirs or {}
    ood = load_dataset(
        source.dataset.value,
        data_dir=dirs.get(source.dataset.value),
        normalization=Normalization.UNIT,
        val_size=0,
        seed=config.seed,
    )
    x, y = ood.test.x, ood.test.y
    x = x if ood.normalization is None else _as_run_inputs(x, config)
    if config.test_subset is not None:
        chosen = test_subset_indices(len(x), min(config.test_subset, len(x)))
        x, y = x[chosen], y[chosen]
    return TensorSplit(x, y)


@dataclass
class OodEvaluation:
    """A saved run made ready for OOD detection: its config, restored model and both sets of inputs."""

    run_dir: Path
    config: RunConfig
    source: OodSource
    bnn: BNN
    guide: Any
    in_x: torch.Tensor
    out_x: torch.Tensor


def load_ood_evaluation(
    run_dir: str | os.PathLike,
    ood: str,
    *,
    num_samples: int | None = None,
    device: str | None = None,
    data_dirs: Mapping[str, str | os.PathLike] | None = None,
) -> OodEvaluation:
    """Reads a run folder, restores its model and loads the in-distribution (the run's test split) and OOD inputs.

    ``ood`` and ``data_dirs`` are checked before the checkpoint is read, and against the run's config before any
    data is loaded (see :func:`parse_ood`, :func:`check_ood`).

    Raises:
        FileNotFoundError: no ``config.json`` or checkpoint in ``run_dir``, or a data set cannot be found.
        ValueError: a bad ``ood`` or ``data_dirs`` entry, a regression run, an OOD set of another input shape or
            the run's own set, or a bad option.
    """
    source = parse_ood(ood)
    dirs = check_data_dirs(data_dirs)
    run, config, state = _read_run(run_dir, num_samples=num_samples, device=device)
    check_ood(source, config)
    _check_data_dirs_used(dirs, config, source)
    config.data_dir = dirs.get(config.dataset, config.data_dir)
    resolved = resolve_device(config.device)
    data = runs.load_data(config)
    out_x = ood_test_split(source, config, data.test, dirs).x
    bnn, guide = runs.restore(config, data, run / CHECKPOINT, resolved, state)
    return OodEvaluation(run, config, source, bnn, guide, data.test.x.to(resolved), out_x.to(resolved))


def score_ood_evaluation(evaluation: OodEvaluation) -> dict[str, Any]:
    """Predicts both sets of a :func:`load_ood_evaluation` result with the run's guide and rates every OOD score
    (:func:`pyro_bnn.evaluation.ood_metrics`).

    Writes ``ood-<name>.json`` (the record returned) and ``ood-<name>.png`` (histograms of the entropy and the
    mutual information on both sides) into the run folder.

    Returns:
        ``{"ood", "in_distribution", "num_in", "num_out", "num_samples", "metrics"}``, where ``metrics`` holds per
        score (``entropy``, ``mutual_information``, ``max_probability``) ``auroc``, ``aupr_in``, ``aupr_out``,
        ``fpr_at_95_tpr``, ``mean_in`` and ``mean_out``.
    """
    e, config = evaluation, evaluation.config
    in_probs = predict(e.bnn, e.guide, e.in_x, num_samples=config.num_samples).probs
    out_probs = predict(e.bnn, e.guide, e.out_x, num_samples=config.num_samples).probs
    metrics = ood_metrics(in_probs, out_probs)
    record = {
        "ood": e.source.spec,
        "in_distribution": config.dataset,
        "num_in": in_probs.shape[1],
        "num_out": out_probs.shape[1],
        "num_samples": config.num_samples,
        "metrics": metrics,
    }
    write_json_atomically(e.run_dir / f"{e.source.file_stem}.json", record)
    out_label = e.source.dataset.value if e.source.dataset else f"{config.dataset} test, {e.source.spec}"
    figure = plot_ood_histograms(
        ood_scores(in_probs),
        ood_scores(out_probs),
        in_label=f"{config.dataset} test",
        out_label=out_label,
        metrics=metrics,
        title=f"{config.model} {config.activation}: OOD detection against {e.source.spec}",
    )
    save_figure(figure, e.run_dir / f"{e.source.file_stem}.png")
    return record


def evaluate_ood(
    run_dir: str | os.PathLike,
    ood: str,
    *,
    num_samples: int | None = None,
    device: str | None = None,
    data_dirs: Mapping[str, str | os.PathLike] | None = None,
) -> dict[str, Any]:
    """Out-of-distribution detection with a saved classification run: its test split against ``ood``.

    Args:
        run_dir: A run folder written by :func:`train_run`.
        ood: A classification data set whose inputs have the run's input shape (``"mnist"`` for a Fashion-MNIST
            run and the reverse, ``"circles"`` for a moons run), loaded with the run's own preprocessing; or a
            corruption of the run's own test inputs, ``"gaussian:GAMMA"`` or ``"salt-pepper:P"``.
        num_samples: Posterior samples per input (default: the run's).
        device: Where to predict (default: the run's).
        data_dirs: Data folder per data set name (``{"mnist": path}``), for the OOD set and the run's own.

    Returns:
        The record :func:`score_ood_evaluation` writes to ``ood-<name>.json``; ``ood-<name>.png`` holds the
        histograms.

    Raises:
        FileNotFoundError: no run in ``run_dir``, or a data set cannot be found.
        ValueError: see :func:`load_ood_evaluation`.
    """
    loaded = load_ood_evaluation(run_dir, ood, num_samples=num_samples, device=device, data_dirs=data_dirs)
    return score_ood_evaluation(loaded)


_TABLE_COLUMNS = (
    ("auroc", "AUROC"),
    ("aupr_in", "AUPR-in"),
    ("aupr_out", "AUPR-out"),
    ("fpr_at_95_tpr", "FPR@95TPR"),
    ("mean_in", "mean in"),
    ("mean_out", "mean out"),
)


def format_ood_table(record: dict[str, Any]) -> str:
    """A small text table of an :func:`evaluate_ood` record: one row per score, one column per metric."""
    width = max(len(name) for name in record["metrics"])
    lines = [
        f"OOD detection: {record['in_distribution']} test ({record['num_in']}) against {record['ood']} "
        f"({record['num_out']}), {record['num_samples']} posterior samples",
        f"{'score':<{width}}  " + "  ".join(f"{title:>9}" for _, title in _TABLE_COLUMNS),
    ]
    for name, values in record["metrics"].items():
        lines.append(f"{name:<{width}}  " + "  ".join(f"{values[key]:>9.4f}" for key, _ in _TABLE_COLUMNS))
    return "\n".join(lines)
