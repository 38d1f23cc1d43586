"""OOD detection with a saved run: what ``pyro-bnn evaluate RUN --ood NAME`` does.

``NAME`` is another classification data set whose inputs have the run's shape (its test split, preprocessed as the
run preprocesses its own data) or a corruption of the run's own test inputs. Both sides are predicted with the run's
guide and rated by :func:`pyro_bnn.evaluation.ood_metrics`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._io import write_json_atomically
from pyro_bnn.bnn import BNN
from pyro_bnn.data import DatasetName, Normalization, Task, TensorSplit, dataset_shape, load_dataset, parse_corruption
from pyro_bnn.data.cifar import CIFAR_MEAN_STD
from pyro_bnn.data.corruptions import CORRUPTION_FAMILY, canonical_corruption
from pyro_bnn.data.images import FASHION_MNIST_MEAN_STD, MNIST_MEAN_STD
from pyro_bnn.data.normalization import normalize_pixels
from pyro_bnn.data.partition import test_subset_indices
from pyro_bnn.evaluation import ood_metrics, ood_scores
from pyro_bnn.predict import predict
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig, resolve_device
from pyro_bnn.runs.evaluate import DataDirs, check_data_dirs, check_data_dirs_used, read_run, with_data_dir
from pyro_bnn.runs.run_folder import CHECKPOINT


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
        canonical = canonical_corruption(spec)
    except ValueError as err:
        raise ValueError(f"--ood {spec!r}: {err}") from None
    if canonical is None:  # 'none' takes no value, so a spec with ':' never reads as it: a guard
        raise ValueError(f"--ood {spec!r}: 'none' is no corruption; name one such as 'gaussian:0.5', or a data set")
    return OodSource(canonical, corruption=canonical)


def check_ood(source: OodSource, config: RunConfig) -> None:
    """Checks, before any data is loaded, that ``source`` can be scored against a run of ``config``: a
    classification run, and an OOD data set other than its own whose inputs have the run's input shape (and, for
    images, that the run's preprocessing can be applied to them).

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
    if len(run_shape) == 3:  # images: the OOD set is preprocessed as the run's own (_as_run_inputs)
        _run_pixel_statistics(config)


_PIXEL_STATISTICS = {
    DatasetName.MNIST: MNIST_MEAN_STD,
    DatasetName.FASHION_MNIST: FASHION_MNIST_MEAN_STD,
    **{DatasetName(name): mean_std for name, mean_std in CIFAR_MEAN_STD.items()},
}
"""Pixel mean and std on the [0, 1] scale (CIFAR: one per channel) of the data sets whose ``standard``
normalisation uses fixed values: the ones their loaders standardise with."""


def _run_pixel_statistics(config: RunConfig) -> tuple[Any, Any]:
    """The mean and std :func:`_as_run_inputs` standardises with: the run's data set's fixed ones under
    ``standard`` normalisation, ``(None, None)`` under the others.

    Raises:
        ValueError: ``standard`` normalisation of a data set whose statistics come from its split (digits).
    """
    if Normalization(config.normalization) is not Normalization.STANDARD:
        return None, None
    run_set = DatasetName(config.dataset)
    if run_set not in _PIXEL_STATISTICS:
        raise ValueError(f"--ood needs fixed pixel statistics for standard normalisation of {run_set.value}")
    return _PIXEL_STATISTICS[run_set]


def _as_run_inputs(unit_pixels: torch.Tensor, config: RunConfig) -> torch.Tensor:
    """OOD images on the [0, 1] scale, transformed as the run transforms its own inputs.

    With ``standard`` normalisation that means the *run's* data set's mean and std, not the OOD set's: the network
    sees OOD pixels through the preprocessing it was trained with, and standardising them with their own statistics
    would make them look more like the training data than they are.
    """
    mean, std = _run_pixel_statistics(config)
    return normalize_pixels(unit_pixels, config.normalization, max_value=1.0, mean=mean, std=std)


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
    data_dirs: DataDirs | None = None,
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
    run, config, state = read_run(run_dir, num_samples=num_samples, device=device)
    check_ood(source, config)
    check_data_dirs_used(dirs, {config.dataset} | ({source.dataset.value} if source.dataset else set()))
    config = with_data_dir(config, dirs)
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
    from pyro_bnn.plots import plot_ood_histograms, save_figure  # matplotlib: imported when drawn

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
    data_dirs: DataDirs | None = None,
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
