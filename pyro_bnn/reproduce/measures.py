"""Measurements taken on a trained run beyond its ``metrics.json``, named in a :class:`~.planned.RunSpec` as
``"NAME:ARGS"`` and written into the run's ``result.json``.

- ``sampled_label_ece:BINS``: ECE and accuracy of the predictive whose class probabilities are the frequencies of
  labels sampled one per posterior draw (the One Simple Trick authors' predictive), with ``BINS`` equal-width bins.
  The bins are the library's, closed on the right (:func:`pyro_bnn.evaluation.calibration.assign_bins`), not the
  authors' estimator's: their ``ece.py`` bins ``int((conf.double() - eps) * BINS)`` of float32 frequencies, which puts
  the float32 values of 0.1, 0.2, 0.3, 0.4, 0.6 and 0.8 (just above the exact edge) in the upper bin. The committed
  grids were measured this way; the difference and its size are in
  :mod:`pyro_bnn.reproduce.papers.leaky_calibration.departures`. ``sampled_label_ece:BINS,authors`` also records
  ``ece_sampled_BINS_authors``, binned by the authors' rule (:func:`authors_ece`).
- ``plateaus:PER_LAYER,IMAGES``: conditional likelihood slices of ``PER_LAYER`` sampled weights per weight tensor
  of the trained point network over its first ``IMAGES`` training images (``pyro-bnn diagnose --slices``), the
  fraction of them with a flat plateau, per layer, and the fraction of input features that are 0 on every one of
  those images (``dead_input_fraction``).

These two are shared; a paper registers its own with :func:`register_measure` in its package's ``measures`` module
(``accuracies``, ``pruning`` and ``ood`` in :mod:`pyro_bnn.reproduce.papers.bayes_by_backprop.measures`; ``shift``
and ``cubic`` in :mod:`pyro_bnn.reproduce.papers.implicit_bnn.measures`; ``posterior`` and ``uncertainty`` in
:mod:`pyro_bnn.reproduce.papers.priors.measures`). A name the registry lacks loads the built-in papers first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from pyro_bnn.evaluation import calibration
from pyro_bnn.evaluation.label_frequencies import label_frequencies
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult, load_data

AUTHORS_BINNING = "authors"
"""The argument of ``sampled_label_ece:BINS,authors``: record the ECE binned by the authors' rule as well."""


def authors_ece(probs: torch.Tensor, targets: torch.Tensor, n_bins: int) -> float:
    """ECE binned as the One Simple Trick authors' ``src/metrics/classification/ece.py`` bins it.

    A confidence ``c`` (the largest of a row of float32 ``probs``) goes to bin ``int((c.double() - eps) * n_bins)``,
    ``eps`` the float64 machine epsilon: the float32 values of 0.1, 0.2, 0.3, 0.4, 0.6 and 0.8, a hair above the
    exact edge, land in the upper bin, where :func:`pyro_bnn.evaluation.calibration`'s right-closed bins put the
    exact edges in the lower one. The ECE is then the usual ``sum_b |accuracy_b - confidence_b| * n_b / N``.

    Args:
        probs: ``(N, C)`` class probabilities (here, label frequencies), float32 as the authors' are.
        targets: ``(N,)`` int64 labels.
        n_bins: Number of equal-width bins.

    Returns:
        The ECE, a float in [0, 1].

    Raises:
        ValueError: the inputs or ``n_bins`` fail :func:`pyro_bnn.evaluation.calibration`'s checks (one line).
    """
    if not isinstance(probs, torch.Tensor) or probs.dim() != 2:
        raise ValueError(f"authors_ece takes (N, C) probabilities, got {getattr(probs, 'shape', type(probs))}")
    calibration(probs, targets, n_bins=n_bins)  # its checks: a non-empty predictive, N labels, n_bins >= 1
    confidence, prediction = probs.max(-1)
    confidence = confidence.double()
    eps = torch.finfo(torch.float64).eps
    bins = ((confidence - eps) * n_bins).floor().long().clamp_(0, n_bins - 1)
    correct = (prediction == targets).double()
    counts = torch.bincount(bins, minlength=n_bins).double()
    gaps = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, bins, correct - confidence)
    # sum over bins of |sum_i (correct_i - conf_i)| / N = sum_b |accuracy_b - confidence_b| * n_b / N
    return float(gaps.abs().sum() / counts.sum())


def _sampled_label_ece(
    result: RunResult,
    folder: Path,
    config: RunConfig,
    data_dirs: Mapping[str, str | None],
    n_bins: str,
    binning: str | None = None,
) -> dict[str, Any]:
    """``ece_sampled_BINS`` and ``accuracy_sampled`` of the label-frequency predictive (one label drawn per posterior
    sample, seeded by the run's seed). Binned as :func:`pyro_bnn.evaluation.calibration` bins, right-closed, which
    differs from the authors' ``ece.py`` at the float32 frequencies 0.1, 0.2, 0.3, 0.4, 0.6 and 0.8 (see the module
    docstring); with ``binning="authors"`` also ``ece_sampled_BINS_authors``, binned by their rule
    (:func:`authors_ece`), from the same sampled labels."""
    if binning not in (None, AUTHORS_BINNING):
        raise ValueError(f"sampled_label_ece's second argument is {AUTHORS_BINNING!r} or nothing, got {binning!r}")
    prediction = result.prediction
    if not prediction.is_classification:
        raise ValueError("sampled_label_ece needs a classification run")
    generator = torch.Generator(device=prediction.probs.device).manual_seed(config.seed)
    frequencies = label_frequencies(prediction.probs, generator=generator)
    bins = int(n_bins)
    scored = calibration(frequencies, prediction.targets, n_bins=bins)
    accuracy = float((frequencies.argmax(-1) == prediction.targets).float().mean())
    values = {f"ece_sampled_{bins}": scored.ece, "accuracy_sampled": accuracy}
    if binning == AUTHORS_BINNING:
        values[f"ece_sampled_{bins}_authors"] = authors_ece(frequencies.float().cpu(), prediction.targets.cpu(), bins)
    return values


def _plateaus(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], per_layer: str, images: str
) -> dict[str, Any]:
    from pyro_bnn.runs.diagnose import DiagnoseOptions, diagnose_run

    options = DiagnoseOptions(slices=int(per_layer), slice_images=int(images), seed=config.seed).check()
    report = diagnose_run(folder, options, device=str(result.metrics.get("device", "cpu")))
    layers = report["slices"]["layers"]
    # A first-layer weight whose input is 0 on every slice image (MNIST's border pixels) has an exactly flat
    # likelihood under any activation: a plateau of the data, not of ReLU. Its share of the inputs is recorded so
    # that the report can tell the two apart.
    x = load_data(config).train.x[: int(images)].flatten(1)
    return {
        "plateau_fraction": {name: layer["fraction"] for name, layer in layers.items()},
        "plateau_sampled": {name: layer["sampled"] for name, layer in layers.items()},
        "plateau_seconds": report["slices"]["seconds"],
        "dead_input_fraction": float((x.abs().sum(0) == 0).double().mean()),
    }


Measure = Callable[..., dict[str, Any]]
"""``fn(result, run_folder, config, data_dirs, *args) -> values``: a measurement (``data_dirs``: the folders of the
other data sets the run's spec names, :attr:`~pyro_bnn.reproduce.planned.RunSpec.other_data`; ``args``: the strings
after ``NAME:``, split at commas)."""

MEASURES: dict[str, Measure] = {}
"""Measurement name -> function (:data:`Measure`), filled by :func:`register_measure`: the shared ones below, a
paper's own by its package (``pyro_bnn.reproduce.papers.<paper>.measures``) when it is imported."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def register_measure(name: str, function: Measure, *, replace: bool = False) -> Measure:
    """Makes ``function`` the measurement ``name`` (``RunSpec(measures=("NAME:ARGS",))``).

    A paper registers its own measurements when its package is imported; a process-pool worker receives the
    parent's registry (:func:`registered_measures`), so a measurement registered anywhere in the parent, a test
    included, is taken there too provided its function is importable by module and name.

    Args:
        name: Letters, digits, ``_``, ``.`` and ``-`` (no ``:`` or ``,``, which separate its arguments).
        function: ``fn(result, run_folder, config, data_dirs, *args) -> dict`` of the values to record.
        replace: Allow replacing another function registered under ``name`` (the same one again is always fine).

    Returns:
        ``function``, unchanged (so it also serves as a decorator's body).

    Raises:
        ValueError: An invalid name, or one taken by another function without ``replace``.
        TypeError: ``function`` is not callable.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"a measurement name is letters, digits, '_', '.' and '-', got {name!r}")
    if not callable(function):
        raise TypeError(f"measurement {name!r}: {function!r} is not callable")
    existing = MEASURES.get(name)
    if existing is not None and existing is not function and not replace:
        raise ValueError(f"measurement {name!r} is already registered; pass replace=True to override it")
    MEASURES[name] = function
    return function


def registered_measures() -> dict[str, Measure]:
    """A copy of the registry (what a pool worker is given, :func:`adopt_measures`)."""
    return dict(MEASURES)


def adopt_measures(measures: Mapping[str, Measure]) -> None:
    """Registers, in a worker process, the measurements its parent had registered."""
    for name, function in measures.items():
        MEASURES.setdefault(name, function)


def _load_papers() -> None:
    """Imports the built-in papers (and the registered plugins'), whose packages register their measurements."""
    import pyro_bnn.reproduce.papers  # noqa: F401


register_measure("sampled_label_ece", _sampled_label_ece)
register_measure("plateaus", _plateaus)


def check_measure(spec: str) -> None:
    """Raises ValueError naming ``spec`` when it names no measurement."""
    name = spec.split(":", 1)[0]
    if name not in MEASURES:
        _load_papers()
    if name not in MEASURES:
        raise ValueError(f"unknown measurement {spec!r}; expected one of {sorted(MEASURES)}")


def take_measure(
    spec: str,
    result: RunResult,
    folder: Path,
    config: RunConfig,
    data_dirs: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """Takes the measurement ``spec`` (``"NAME:ARG,ARG"``) on the run ``config`` trained into ``folder`` and
    returns its values (``data_dirs``: folders of other data sets a measurement reads, by name)."""
    check_measure(spec)
    name, _, args = spec.partition(":")
    return MEASURES[name](result, folder, config, data_dirs or {}, *(a for a in args.split(",") if a))
