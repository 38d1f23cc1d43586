"""Measurements taken on a trained run beyond its ``metrics.json``, named in a :class:`~.spec.RunSpec` as
``"NAME:ARGS"`` and written into the run's ``result.json``.

- ``sampled_label_ece:BINS``: ECE and accuracy of the predictive whose class probabilities are the frequencies of
  labels sampled one per posterior draw (the One Simple Trick authors' predictive), with ``BINS`` equal-width bins.
- ``plateaus:PER_LAYER,IMAGES``: conditional likelihood slices of ``PER_LAYER`` sampled weights per weight tensor
  of the trained point network over its first ``IMAGES`` training images (``pyro-bnn diagnose --slices``), the
  fraction of them with a flat plateau, per layer, and the fraction of input features that are 0 on every one of
  those images (``dead_input_fraction``).
- ``accuracies``: the test accuracy of each posterior sample alone, of the posterior-mean network and of the
  ensemble of all samples (the run's ``num_samples``), with the reliability bins of the first sample, the
  posterior mean and the ensemble.
- ``pruning:F1,F2,...``: test error and NLL of the predictive after removing the fractions ``F`` of the weights by
  ``|mu| / sigma`` and by ``|mu|`` (:func:`pyro_bnn.diagnostics.pruning.pruning_table`, biases kept, the run's
  ``num_samples``), the pooled signal-to-noise histogram in dB and its thresholds at those fractions.
- ``ood:NAME,SAMPLES``: the test set of the data set ``NAME`` (same scaling as the run's own) as out-of-domain
  inputs, ``SAMPLES`` posterior samples on both test sets: detection metrics by entropy, mutual information and
  max probability (:func:`pyro_bnn.evaluation.ood_metrics`), histograms of entropy and mutual information on both
  sides, and the sampled predicted classes of the first five images of each.
- ``shift:SAMPLES,IMAGES,NAME[,temperature]``: corruption curves (Gaussian blend, salt-and-pepper) on the first
  ``IMAGES`` test images and out-of-domain detection against the first ``IMAGES`` test images of ``NAME``, with
  ``SAMPLES`` posterior samples; with ``temperature`` also after temperature scaling fitted on the validation split
  (:func:`pyro_bnn.reproduce.shift_measures.shift`).
- ``cubic``: RMSE, NLL and coverage of a 1-D regression run inside and outside the training inputs' range, and its
  predictive curve (:func:`pyro_bnn.reproduce.shift_measures.cubic_ranges`).
- ``posterior``: the mean-field guide's location and scale of every latent site, so that a report can draw from
  the posterior without the checkpoint (:func:`pyro_bnn.reproduce.priors_measures.posterior_parameters`).
- ``uncertainty:GALLERY``: per-class error, expected error and predictive variance, entropy and mutual information
  of right and wrong predictions, referral curves and galleries of ``GALLERY`` images
  (:func:`pyro_bnn.reproduce.priors_measures.uncertainty`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from pyro_bnn.evaluation import calibration
from pyro_bnn.evaluation.label_frequencies import label_frequencies
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult, load_data


def _sampled_label_ece(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], n_bins: str
) -> dict[str, Any]:
    prediction = result.prediction
    if not prediction.is_classification:
        raise ValueError("sampled_label_ece needs a classification run")
    generator = torch.Generator(device=prediction.probs.device).manual_seed(config.seed)
    frequencies = label_frequencies(prediction.probs, generator=generator)
    bins = int(n_bins)
    scored = calibration(frequencies, prediction.targets, n_bins=bins)
    accuracy = float((frequencies.argmax(-1) == prediction.targets).float().mean())
    return {f"ece_sampled_{bins}": scored.ece, "accuracy_sampled": accuracy}


def _plateaus(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], per_layer: str, images: str
) -> dict[str, Any]:
    from pyro_bnn.experiments.diagnose import DiagnoseOptions, diagnose_run

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


def _accuracies(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None]
) -> dict[str, Any]:
    from pyro_bnn.reproduce.bbb_measures import accuracies

    return accuracies(result, config)


def _pruning(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], *fractions: str
) -> dict[str, Any]:
    from pyro_bnn.reproduce.bbb_measures import pruning

    return pruning(result, config, [float(f) for f in fractions])


def _ood(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], name: str, samples: str
) -> dict[str, Any]:
    from pyro_bnn.reproduce.bbb_measures import out_of_domain

    return out_of_domain(result, config, name, data_dirs.get(name), int(samples))


def _shift(
    result: RunResult,
    folder: Path,
    config: RunConfig,
    data_dirs: Mapping[str, str | None],
    samples: str,
    images: str,
    name: str,
    *flags: str,
) -> dict[str, Any]:
    from pyro_bnn.reproduce.shift_measures import shift

    if any(flag != "temperature" for flag in flags):
        raise ValueError(f"shift takes SAMPLES,IMAGES,NAME[,temperature], got extra {','.join(flags)!r}")
    return shift(
        result,
        config,
        num_samples=int(samples),
        images=int(images),
        ood_name=name,
        ood_dir=data_dirs.get(name),
        temperature="temperature" in flags,
    )


def _cubic(result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None]) -> dict[str, Any]:
    from pyro_bnn.reproduce.shift_measures import cubic_ranges

    return cubic_ranges(result, config)


def _posterior(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None]
) -> dict[str, Any]:
    from pyro_bnn.reproduce.priors_measures import posterior_parameters

    return posterior_parameters(result)


def _uncertainty(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], gallery: str
) -> dict[str, Any]:
    from pyro_bnn.reproduce.priors_measures import uncertainty

    return uncertainty(result, config, int(gallery))


MEASURES: dict[str, Callable[..., dict[str, Any]]] = {
    "sampled_label_ece": _sampled_label_ece,
    "plateaus": _plateaus,
    "accuracies": _accuracies,
    "pruning": _pruning,
    "ood": _ood,
    "shift": _shift,
    "cubic": _cubic,
    "posterior": _posterior,
    "uncertainty": _uncertainty,
}
"""Measurement name -> ``fn(result, run_folder, config, data_dirs, *args) -> values`` (``data_dirs``: the folders
of the other data sets the run's spec names, :attr:`~pyro_bnn.reproduce.spec.RunSpec.other_data`)."""


def check_measure(spec: str) -> None:
    """Raises ValueError naming ``spec`` when it names no measurement."""
    name = spec.split(":", 1)[0]
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
