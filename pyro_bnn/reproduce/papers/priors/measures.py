"""The priors paper's measurements of a trained run (``posterior`` and ``uncertainty:``).

- :func:`posterior_parameters`: every latent site's variational location and scale (in the site's unconstrained
  space), small enough for a 2-5-5-2 network to keep in ``result.json``, so that the report draws predictive maps
  and weight histograms from the committed records alone, without the checkpoints.
- :func:`uncertainty`: what a classifier's posterior predictive says about its own errors on the test set: per true
  class, the error rate, the expected error rate (the share of posterior samples whose label differs from the
  predicted one) and the variance of the predicted probabilities (the paper's Fig. 4); the mean entropy and mutual
  information of right and wrong predictions; referral curves by entropy and by mutual information; galleries of
  the most confident mistakes and the least confident images, with their pixels (the paper's Figs. 5 and 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pyro_bnn.evaluation import entropy_decomposition
from pyro_bnn.evaluation.galleries import GalleryEntry, least_confident, most_confident_mistakes
from pyro_bnn.evaluation.referral import ReferralScore, referral_curve
from pyro_bnn.guides.inspect import posterior_loc_scale
from pyro_bnn.predict import predict
from pyro_bnn.reproduce.measures import register_measure
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult, load_data

DIGITS = 6
"""Significant digits kept of each stored posterior parameter."""

REFERRAL_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(11))
"""Referred fractions of the referral curves: 0 to 50 % in steps of 5 %."""


def _rounded(values: torch.Tensor) -> list[float]:
    return [float(f"{v:.{DIGITS}g}") for v in values.flatten().tolist()]


def posterior_parameters(result: RunResult) -> dict[str, Any]:
    """``{"posterior": {site: {"shape", "loc", "scale"}}}``: the trained mean-field guide's parameters.

    ``loc`` and ``scale`` are flat lists in the site's unconstrained space (a weight's own values; the logarithm of
    a hierarchical prior's scale or variance), ``shape`` the site's shape.

    Raises:
        ValueError: a run without a guide, or a guide :func:`~pyro_bnn.guides.inspect.posterior_loc_scale` cannot
            read (a mixture, an ensemble).
    """
    if result.guide is None:
        raise ValueError("the posterior measurement needs a run trained with a guide")
    pairs = posterior_loc_scale(result.guide)
    return {
        "posterior": {
            name: {"shape": list(loc.shape), "loc": _rounded(loc), "scale": _rounded(scale)}
            for name, (loc, scale) in sorted(pairs.items())
        }
    }


def stored_posterior(metrics: dict[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The ``{site: (loc, scale)}`` tensors of a record's ``posterior`` measurement (:func:`posterior_parameters`)."""
    return {
        name: (
            torch.tensor(values["loc"]).reshape(values["shape"]),
            torch.tensor(values["scale"]).reshape(values["shape"]),
        )
        for name, values in metrics["posterior"].items()
    }


def draw_stored_posterior(metrics: dict[str, Any], num_samples: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``{site: (S, *shape)}`` draws from a record's stored mean-field posterior (every site, in its unconstrained
    space), from a generator seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return {
        name: loc + scale * torch.randn((num_samples, *loc.shape), generator=generator)
        for name, (loc, scale) in stored_posterior(metrics).items()
    }


def _pixels(image: torch.Tensor) -> str:
    """An image as hex bytes, scaled to its own range (as :func:`~pyro_bnn.plots.plot_gallery` shows it)."""
    low, high = image.min(), image.max()
    scaled = (image - low) / (high - low) if high > low else torch.zeros_like(image)
    return bytes((scaled * 255).round().to(torch.uint8).flatten().tolist()).hex()


def decode_pixels(hex_pixels: str, shape: list[int]) -> torch.Tensor:
    """The ``(C, H, W)`` float image in [0, 1] of one gallery entry's stored pixels."""
    return torch.tensor(list(bytes.fromhex(hex_pixels)), dtype=torch.float32).reshape(shape) / 255


def _gallery(entries: list[GalleryEntry], images: torch.Tensor, expected_error: torch.Tensor) -> list[dict[str, Any]]:
    return [
        {
            "index": e.index,
            "label": e.label,
            "predicted": e.predicted,
            "probability": e.probability,
            "spread": e.spread,
            "expected_error": float(expected_error[e.index]),
            "pixels": _pixels(images[e.index]),
        }
        for e in entries
    ]


def uncertainty(result: RunResult, config: RunConfig, gallery: int) -> dict[str, Any]:
    """The test predictive's view of its own errors (see the module docstring).

    Reads the run's own test prediction (``config.num_samples`` posterior samples per image).

    Args:
        result: A trained classification run.
        config: Its config.
        gallery: Images per gallery.

    Returns:
        ``{"uncertainty": {"num_samples", "per_class": [{"label", "count", "error", "expected_error",
        "variance"}], "right": {...}, "wrong": {...}, "confident_mistakes", "referral": {score: curve},
        "image_shape", "galleries": {"most_confident_mistakes": [...], "least_confident": [...]}, "validation":
        {"per_class", "right", "wrong", "confident_mistakes"}}}`` (validation when the run has a validation split,
        with as many posterior samples), where
        ``right`` and ``wrong`` hold the count and the mean entropy, mutual information and expected error rate of
        the correctly and wrongly predicted images, and ``confident_mistakes`` counts the mistakes with an expected
        error rate of 0 (every sample agrees on the wrong label).

    Raises:
        ValueError: a regression run, or ``gallery`` < 1.
    """
    prediction = result.prediction
    if prediction is None or not prediction.is_classification:
        raise ValueError("the uncertainty measurement needs a classification run")
    if gallery < 1:
        raise ValueError(f"gallery must be >= 1 image, got {gallery}")
    data = load_data(config)
    images = data.test.x
    probs, labels = prediction.probs.detach().cpu(), prediction.targets.cpu()  # (S, N, C), (N,)
    if len(images) != len(labels):
        raise ValueError(f"the run's test prediction has {len(labels)} images but its test split {len(images)}")
    values, expected_error = _errors(probs, labels)
    # The two scores of the paper's referral figure (named, so that a new ReferralScore leaves the records alone).
    scores = (ReferralScore.ENTROPY, ReferralScore.MUTUAL_INFORMATION)
    values["referral"] = {
        score.value: referral_curve(probs, labels, REFERRAL_FRACTIONS, score=score).to_dict() for score in scores
    }
    values["image_shape"] = list(images.shape[1:])
    values["galleries"] = {
        "most_confident_mistakes": _gallery(most_confident_mistakes(probs, labels, gallery), images, expected_error),
        "least_confident": _gallery(least_confident(probs, labels, gallery), images, expected_error),
    }
    if len(data.val):
        # The validation images too, with as many posterior samples (the paper's Fig. 4 is on its validation set),
        # drawn from a generator seeded by the run's seed so a rerun of the measurement draws the same weights.
        device = prediction.probs.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(config.seed)
            val = predict(result.bnn, result.guide, (data.val.x, data.val.y), num_samples=probs.shape[0])
        validation, _ = _errors(val.probs.detach().cpu(), val.targets.cpu())
        values["validation"] = {key: validation[key] for key in ("per_class", "right", "wrong", "confident_mistakes")}
    return {"uncertainty": values}


def _errors(probs: torch.Tensor, labels: torch.Tensor) -> tuple[dict[str, Any], torch.Tensor]:
    """Per-class error, expected error and variance, and right / wrong summaries of ``probs (S, N, C)`` against
    ``labels (N,)``; and the ``(N,)`` expected error rate of every input."""
    predicted = probs.mean(0).argmax(-1)  # (N,)
    wrong = predicted != labels
    # The expected error rate: how often a posterior sample's own label differs from the predicted one, the
    # model's estimate of its chance of being wrong (no true label involved).
    expected_error = (probs.argmax(-1) != predicted).double().mean(0)  # (N,)
    variance = probs.double().var(0, unbiased=False).mean(-1)  # (N,) mean over classes of the variance over samples
    split = entropy_decomposition(probs)

    def summary(mask: torch.Tensor) -> dict[str, float]:
        count = int(mask.sum())
        if count == 0:
            return {"count": 0}
        return {
            "count": count,
            "entropy": float(split.total[mask].mean()),
            "mutual_information": float(split.epistemic[mask].mean()),
            "expected_error": float(expected_error[mask].mean()),
            "variance": float(variance[mask].mean()),
        }

    per_class = []
    for label in range(probs.shape[-1]):
        mask = labels == label
        if bool(mask.any()):
            per_class.append(
                {
                    "label": label,
                    "count": int(mask.sum()),
                    "error": float(wrong[mask].double().mean()),
                    "expected_error": float(expected_error[mask].mean()),
                    "variance": float(variance[mask].mean()),
                }
            )
    values = {
        "num_samples": probs.shape[0],
        "per_class": per_class,
        "right": summary(~wrong),
        "wrong": summary(wrong),
        "confident_mistakes": int((wrong & (expected_error == 0)).sum()),
    }
    return values, expected_error


def _posterior(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None]
) -> dict[str, Any]:
    return posterior_parameters(result)


def _uncertainty(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], gallery: str
) -> dict[str, Any]:
    return uncertainty(result, config, int(gallery))


register_measure("posterior", _posterior)
register_measure("uncertainty", _uncertainty)
