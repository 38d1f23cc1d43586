"""The measurements of the Bayes-by-Backprop reproductions (``accuracies``, ``pruning``, ``ood`` in
:mod:`.measures`): what a trained run is asked beyond its ``metrics.json``, as JSON-ready values.

Every function takes the finished run (:class:`~pyro_bnn.runs.runs.RunResult`: its model, guide and test
prediction with the run's ``num_samples`` posterior samples) and returns a dict merged into ``result.json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pyro_bnn.diagnostics.pruning import pruning_table
from pyro_bnn.diagnostics.weight_stats import BIAS_ATTR, weight_posteriors
from pyro_bnn.evaluation import calibration, entropy_decomposition
from pyro_bnn.predict import predict
from pyro_bnn.reproduce.measures import register_measure
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult, load_data

SNR_DB_EDGES = [-60.0 + 1.0 * i for i in range(101)]
"""Fixed edges of the pooled signal-to-noise histogram, ``10 log10(|mu| / sigma)`` from -60 to 40 dB, so runs can be
summed and compared bin by bin (values outside go to the end bins)."""

EXAMPLES_PER_DOMAIN = 5
"""Test images per domain whose sampled predicted classes are kept (the tutorial's five)."""

UNCERTAINTY_BINS = 40
"""Bins of the entropy and mutual-information histograms, over ``[0, log C]`` nats."""


def _reliability(probs: torch.Tensor, targets: torch.Tensor, n_bins: int) -> dict[str, Any]:
    """The reliability bins of ``probs`` ``(S, N, C)`` or ``(N, C)`` as lists (NaN for an empty bin)."""
    result = calibration(probs, targets, n_bins=n_bins)
    return {
        "ece": result.ece,
        "counts": result.bin_counts.tolist(),
        "confidence": result.bin_confidence.tolist(),
        "accuracy": result.bin_accuracy.tolist(),
    }


def accuracies(result: RunResult, config: RunConfig) -> dict[str, Any]:
    """Test accuracy of each of the S posterior samples alone, of the posterior-mean network and of the S-sample
    ensemble (the mean of the samples' probabilities; :meth:`~pyro_bnn.predict.Prediction.accuracies`), and their
    reliability bins (the first sample stands for the single samples). The Bayes-by-Backprop tutorial's ensemble
    (paper 004) averages log-softmax over the samples and the mean network instead; the difference and its measured
    size: :data:`pyro_bnn.reproduce.papers.bbb_fashion.plan.ENSEMBLE_DEFINITION`.

    Returns:
        ``sample_accuracies`` (S floats), ``ensemble_accuracy``, ``mean_network_accuracy`` and ``reliability``
        ``{"sample", "posterior_mean", "ensemble"}``, each with ``ece, counts, confidence, accuracy`` per bin.
    """
    prediction = result.prediction
    if not prediction.is_classification or prediction.targets is None or prediction.point is None:
        raise ValueError("the accuracies measurement needs a classification run scored with its posterior-mean network")
    breakdown = prediction.accuracies()
    targets = prediction.targets
    return {
        "sample_accuracies": list(breakdown.per_sample),
        "ensemble_accuracy": breakdown.ensemble,
        "mean_network_accuracy": breakdown.posterior_mean,
        "reliability": {
            "sample": _reliability(prediction.probs[0], targets, config.n_bins),
            "posterior_mean": _reliability(prediction.point.probs[0], targets, config.n_bins),
            "ensemble": _reliability(prediction.probs, targets, config.n_bins),
        },
    }


def _pooled_snr(result: RunResult) -> torch.Tensor:
    """``|mu| / sigma`` of every weight (biases excluded), pooled over layers, ``(D_weights,)`` float64."""
    scores = [
        (loc.abs() / scale).flatten().double()
        for site, loc, scale in weight_posteriors(result.guide, result.bnn, caller="pruning")
        if site.attr != BIAS_ATTR
    ]
    return torch.cat(scores).cpu()


def pruning(result: RunResult, config: RunConfig, fractions: list[float]) -> dict[str, Any]:
    """The pruning table (Blundell et al.'s Table 1) on the run's test set, and the pooled SNR distribution.

    Returns:
        ``pruning`` (rows of :func:`~pyro_bnn.diagnostics.pruning.pruning_table`: ``fraction``, ``error_snr``,
        ``error_magnitude``, ``nll_*``), ``snr_db_histogram`` (``counts`` over :data:`SNR_DB_EDGES`) and
        ``snr_db_thresholds`` (the dB value at each fraction's quantile).
    """
    prediction = result.prediction
    data = load_data(config)
    device = prediction.probs.device
    rows = pruning_table(
        result.bnn,
        result.guide,
        (data.test.x.to(device), data.test.y.to(device)),
        fractions=fractions,
        num_samples=config.num_samples,
        seed=config.seed,
    )
    snr_db = 10 * _pooled_snr(result).log10()
    edges = torch.tensor(SNR_DB_EDGES, dtype=torch.float64)
    counts = torch.histc(snr_db.clamp(edges[0], edges[-1]), bins=len(edges) - 1, min=edges[0], max=edges[-1])
    thresholds = {f"{f:g}": float(torch.quantile(snr_db, f)) for f in fractions if 0 < f < 1}
    return {
        "pruning": rows,
        "snr_db_histogram": {"counts": [int(c) for c in counts.round().tolist()], "edges": SNR_DB_EDGES},
        "snr_db_thresholds": thresholds,
    }


def _histogram(values: torch.Tensor, high: float) -> list[int]:
    counts = torch.histc(values.double().clamp(0, high), bins=UNCERTAINTY_BINS, min=0.0, max=high)
    return [int(c) for c in counts.round().tolist()]


def out_of_domain(
    result: RunResult, config: RunConfig, name: str, data_dir: str | None, num_samples: int
) -> dict[str, Any]:
    """The run's test set against the test set of the data set ``name``, preprocessed as the run preprocesses its
    own (:func:`pyro_bnn.runs.ood_scoring.ood_test_split`, as ``pyro-bnn evaluate --ood`` does).

    Args:
        result: The trained run.
        config: Its config.
        name: The out-of-domain data set (its inputs must have the run's input shape).
        data_dir: Where that data set lies (None: the usual places).
        num_samples: Posterior samples for both predictions.

    Returns:
        ``ood`` (:func:`pyro_bnn.evaluation.ood_metrics` of in- against out-of-domain), ``ood_uncertainty``
        (entropy and mutual-information histograms and means per domain, edges ``0 .. log C``) and
        ``ood_examples`` (per domain: the first images' labels and their counts of sampled predicted classes).
    """
    from pyro_bnn.evaluation import ood_metrics
    from pyro_bnn.runs.ood_scoring import check_ood, ood_test_split, parse_ood

    source = parse_ood(name)
    check_ood(source, config)
    own = load_data(config).test
    other = ood_test_split(source, config, own, {name: data_dir} if data_dir is not None else {})
    device = result.prediction.probs.device
    # Seeded, so a rerun of the measurement draws the same weights; the caller's random state is left as it was.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        domains = {
            domain: predict(result.bnn, result.guide, (split.x.to(device), split.y.to(device)), num_samples=num_samples)
            for domain, split in (("in", own), ("out", other))
        }
    num_classes = domains["in"].probs.shape[-1]
    high = math.log(num_classes)
    uncertainty, examples = {}, {}
    for domain, prediction in domains.items():
        split = entropy_decomposition(prediction.probs)
        uncertainty[domain] = {
            "entropy": _histogram(split.total, high),
            "mutual_information": _histogram(split.epistemic, high),
            "mean_entropy": float(split.total.mean()),
            "mean_mutual_information": float(split.epistemic.mean()),
        }
        sampled = prediction.probs[:, :EXAMPLES_PER_DOMAIN].argmax(-1)  # (S, 5): each sample's predicted class
        examples[domain] = {
            "labels": prediction.targets[:EXAMPLES_PER_DOMAIN].tolist(),
            "class_counts": [
                torch.bincount(sampled[:, i], minlength=num_classes).tolist() for i in range(sampled.shape[1])
            ],
        }
    return {
        "ood": {"data": name, "num_samples": num_samples, **ood_metrics(domains["in"].probs, domains["out"].probs)},
        "ood_uncertainty": {"edges_high": high, "bins": UNCERTAINTY_BINS, **uncertainty},
        "ood_examples": examples,
    }


def _accuracies(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None]
) -> dict[str, Any]:
    return accuracies(result, config)


def _pruning(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], *fractions: str
) -> dict[str, Any]:
    return pruning(result, config, [float(f) for f in fractions])


def _ood(
    result: RunResult, folder: Path, config: RunConfig, data_dirs: Mapping[str, str | None], name: str, samples: str
) -> dict[str, Any]:
    return out_of_domain(result, config, name, data_dirs.get(name), int(samples))


register_measure("accuracies", _accuracies)
register_measure("pruning", _pruning)
register_measure("ood", _ood)
