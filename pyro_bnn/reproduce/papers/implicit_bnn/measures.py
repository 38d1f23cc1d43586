"""The implicit-BNN paper's measurements of a trained classifier or regressor (``shift:`` and ``cubic``).

- :func:`shift`: the test predictive under input corruption (Gaussian blend and salt-and-pepper at rising
  intensity: accuracy, ECE, NLL and the mean predictive entropy split into its aleatoric and epistemic parts) and
  out-of-domain detection against another data set's test images (AUROC, AUPR and FPR95 by total entropy and by
  mutual information); optionally the same after post-hoc temperature scaling fitted on the run's validation split.
- :func:`cubic_ranges`: RMSE, NLL and coverage of a 1-D regression run inside and outside its training inputs'
  range, and the predictive mean and standard deviation on the test grid (the paper's Fig. 1).

Both read the trained run through its :class:`~pyro_bnn.runs.runs.RunResult` (a model and a parameter
source: a guide, or a deep ensemble), so an ensemble is measured exactly as a BNN is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pyro_bnn.data.corruptions import parse_corruption
from pyro_bnn.evaluation import entropy_decomposition, fit_temperature, ood_metrics
from pyro_bnn.evaluation.regression import regression_metrics
from pyro_bnn.predict import Prediction, predict
from pyro_bnn.reproduce.measures import register_measure
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult, load_data

CORRUPTIONS: dict[str, tuple[float, ...]] = {
    "gaussian": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    "salt-pepper": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5),
}
"""Corruption name (a :func:`~pyro_bnn.data.corruptions.parse_corruption` family) -> intensities: the blend weight
``gamma`` of standard Gaussian noise, and the probability ``p`` of setting an input element to 0 or 1. Level 0 is
the clean subset, so every curve starts where the test set is."""

TEMPERATURE_MODE = "mean"
"""How :func:`shift` tempers a predictive: the log of the posterior-mean probabilities divided by T."""

CUBIC_RANGE = ((-3.0, -1.0), (1.0, 3.0))
"""Where the cubic's training inputs lie (:func:`pyro_bnn.data.synthetic.cubic_regression`)."""


def _scores(prediction: Prediction, n_bins: int) -> dict[str, float]:
    """Accuracy, ECE, NLL and the mean entropy split of a classification predictive ``(S, N, C)``."""
    metrics = prediction.metrics(n_bins=n_bins)
    split = entropy_decomposition(prediction.probs)
    return {
        "accuracy": metrics["accuracy"],
        "ece": metrics["ece"],
        "nll": metrics["nll"],
        "entropy": float(split.total.mean()),
        "aleatoric": float(split.aleatoric.mean()),
        "epistemic": float(split.epistemic.mean()),
    }


def shift(
    result: RunResult,
    config: RunConfig,
    *,
    num_samples: int,
    images: int,
    ood_name: str,
    ood_dir: str | None,
    temperature: bool,
) -> dict[str, Any]:
    """Corruption curves and out-of-domain detection of a trained classification run.

    The first ``images`` test images are corrupted at every level of :data:`CORRUPTIONS` (noise drawn from a
    generator seeded by the run's data seed, or its seed without one, so every method of one seed sees the same
    corrupted images); the first
    ``images`` test images of ``ood_name`` (preprocessed as the run preprocesses its own) are the out-of-domain
    side. With ``temperature``, T is fitted on the run's validation split (mode :data:`TEMPERATURE_MODE`) and every
    predictive is also scored tempered.

    Args:
        result: The trained run (its model and parameter source).
        config: Its config.
        num_samples: Posterior samples of every predictive (one weight set per sample; the same ones for every
            input).
        images: Test images per corruption level and per OOD side.
        ood_name: The out-of-domain data set.
        ood_dir: Where it lies (None: the usual places).
        temperature: Also fit and apply a temperature.

    Returns:
        ``{"shift": {"num_samples", "images", "corruptions": {name: [{"level", "accuracy", "ece", "nll",
        "entropy", "aleatoric", "epistemic"}, ...]}, "ood": ood_metrics(...) with "data"}}``, and with
        ``temperature`` also ``"temperature"`` (T) and ``"tempered"``: the test metrics (of the run's own
        ``config.num_samples`` test predictive), corruption curves and OOD metrics of the tempered predictive, which
        is one distribution per input (its epistemic part and mutual information are 0).

    Raises:
        ValueError: a regression run; ``temperature`` without a validation split; a bad OOD set.
    """
    from pyro_bnn.runs.ood_scoring import check_ood, ood_test_split, parse_ood

    if result.prediction is None or not result.prediction.is_classification:
        raise ValueError("the shift measurement needs a classification run")
    data = load_data(config)
    if temperature and len(data.val) == 0:
        raise ValueError("temperature scaling needs a validation split, but the run has val_size 0")
    source = parse_ood(ood_name)
    check_ood(source, config)
    other = ood_test_split(source, config, data.test, {ood_name: ood_dir} if ood_dir is not None else {})
    device = result.prediction.probs.device
    x, y = data.test.x[:images], data.test.y[:images]
    # The data seed, not the run's seed: the members of a deep ensemble differ in seed, and the first member (the
    # deterministic baseline) must see the corrupted images and weight draws of its ensemble's other methods.
    seed = config.seed if config.data_seed is None else config.data_seed
    generator = torch.Generator().manual_seed(seed)

    def run(inputs: torch.Tensor, targets: torch.Tensor) -> Prediction:
        return predict(result.bnn, result.guide, (inputs, targets), num_samples=num_samples)

    # Seeded, so a rerun of the measurement draws the same weights; the caller's random state is left as it was.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        corrupted = {
            name: [run(parse_corruption(f"{name}:{level}", generator=generator)(x), y) for level in levels]
            for name, levels in CORRUPTIONS.items()
        }
        ood_in = run(x, y)
        ood_out = run(other.x[:images], other.y[:images])
        val = run(data.val.x, data.val.y) if temperature else None

    def scored(transform) -> dict[str, Any]:
        return {
            "corruptions": {
                name: [
                    {"level": level, **_scores(transform(p), config.n_bins)}
                    for level, p in zip(CORRUPTIONS[name], predictions, strict=True)
                ]
                for name, predictions in corrupted.items()
            },
            "ood": {"data": ood_name, **ood_metrics(transform(ood_in).probs, transform(ood_out).probs)},
        }

    values: dict[str, Any] = {"num_samples": num_samples, "images": images, **scored(lambda p: p)}
    if temperature:
        fitted = fit_temperature(val.probs, val.targets, mode=TEMPERATURE_MODE)

        def temper(prediction: Prediction) -> Prediction:
            # Mode "mean" leaves one sample, the tempered mixture; at T = 1 the samples would stay as they are, so
            # they are averaged here too, and the tempered scores never depend on whether T came out as 1 (their
            # epistemic part and mutual information are 0 either way).
            tempered = prediction.tempered(fitted, mode=TEMPERATURE_MODE)
            if tempered.probs.shape[0] > 1:
                tempered = Prediction(probs=tempered.probs.mean(0, keepdim=True), targets=tempered.targets)
            return tempered

        values["temperature"] = fitted
        values["tempered"] = {"test": _scores(temper(result.prediction), config.n_bins), **scored(temper)}
    return {"shift": values}


def cubic_ranges(result: RunResult, config: RunConfig) -> dict[str, Any]:
    """RMSE, NLL and coverage of mean ± 2 sd inside :data:`CUBIC_RANGE` and outside it (the gap and both
    extrapolation ends), and the predictive curve on the test grid.

    Returns:
        ``{"cubic": {"inside": metrics, "outside": metrics, "x": [...], "mean": [...], "sd": [...]}}`` where the
        curve's ``sd`` is the predictive standard deviation (spread of the sampled means and the noise scale).
    """
    prediction = result.prediction
    if prediction is None or prediction.is_classification:
        raise ValueError("the cubic measurement needs a regression run")
    x = load_data(config).test.x.reshape(-1).to(prediction.means.device)
    inside = torch.zeros_like(x, dtype=torch.bool)
    for low, high in CUBIC_RANGE:
        inside |= (x >= low) & (x < high)
    means, targets = prediction.means, prediction.targets  # (S, N, 1), (N, 1)

    def part(mask: torch.Tensor) -> dict[str, float]:
        return regression_metrics(means[:, mask], prediction.noise_scale, targets[mask])

    mean, sd = prediction.predictive_mean().reshape(-1), prediction.predictive_std().reshape(-1)
    return {
        "cubic": {
            "inside": part(inside),
            "outside": part(~inside),
            "x": x.tolist(),
            "mean": mean.tolist(),
            "sd": sd.tolist(),
        }
    }


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
    return cubic_ranges(result, config)


register_measure("shift", _shift)
register_measure("cubic", _cubic)
