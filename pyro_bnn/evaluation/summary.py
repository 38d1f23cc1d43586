"""All headline metrics of a predictive in one call, for the trainer's logs and the CLI's tables."""

from __future__ import annotations

import math

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.evaluation._validation import _check_class_range, _check_integer_tensor, check_predictive
from pyro_bnn.evaluation.calibration import DEFAULT_NUM_BINS, _calibration_of, assign_bins
from pyro_bnn.evaluation.classification import _accuracy_of, _brier_score_of, _nll_of

SUMMARY_KEYS = ("accuracy", "nll", "brier", "ece", "mce")
"""Keys of ``summarize``'s result, in the order they are inserted."""


def summarize(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = DEFAULT_NUM_BINS) -> dict[str, float]:
    """Accuracy, NLL, Brier score, ECE and MCE of a predictive, validating the input once.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        n_bins: number of equal-width calibration bins.

    Returns:
        ``{"accuracy", "nll", "brier", "ece", "mce"}`` as Python floats, each equal to what the metric of the
        same name returns on its own (``brier`` is ``brier_score``).

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    n_bins = positive_int(n_bins, "n_bins")
    checked = check_predictive(probs, labels)
    calibration_result = _calibration_of(checked, n_bins)
    return {
        "accuracy": _accuracy_of(checked),
        "nll": _nll_of(checked),
        "brier": _brier_score_of(checked),
        "ece": calibration_result.ece,
        "mce": calibration_result.mce,
    }


def summarize_runs(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = DEFAULT_NUM_BINS) -> list[dict[str, float]]:
    """:func:`summarize` of R predictives at once (R independent runs scored on their own data), in one pass.

    The same numbers as ``summarize(probs[r], labels[r], n_bins)`` for each r (to float64 rounding: bin sums are
    accumulated in another order), without its per-call validation of the probabilities: for predictions straight
    from a likelihood, as the per-epoch validation of batched runs makes them.

    Args:
        probs: ``(R, S, N, C)`` posterior samples of class probabilities.
        labels: ``(R, N)`` integer labels, any integer dtype (read as int64, as ``summarize`` reads them).
        n_bins: Equal-width calibration bins.

    Returns:
        One dict per run with the keys :data:`SUMMARY_KEYS`.

    Raises:
        ValueError: the shapes do not match, or ``labels`` is not an integer tensor with values in ``[0, C)``.
    """
    n_bins = positive_int(n_bins, "n_bins")
    if probs.dim() != 4 or labels.shape != probs.shape[:1] + probs.shape[2:3]:
        raise ValueError(
            f"summarize_runs takes probs (R, S, N, C) and labels (R, N), got {tuple(probs.shape)} and "
            f"{tuple(labels.shape)}"
        )
    runs, num_samples, num_points, num_classes = probs.shape
    # one_hot and gather take int64 indices only: int32 labels crashed in one_hot, where summarize casts them
    labels = _check_integer_tensor(labels, name="labels", rank=2, layout="(R, N)")
    labels = labels.to(device=probs.device, dtype=torch.int64)
    _check_class_range(labels, name="labels", num_classes=num_classes)
    mean = probs.mean(dim=1)
    confidence, prediction = mean.max(dim=-1)
    correct = (prediction == labels).double()
    index = labels.view(runs, 1, num_points, 1).expand(runs, num_samples, num_points, 1)
    label_probs = probs.gather(dim=-1, index=index).squeeze(-1)
    log_label_probs = label_probs.clamp_min(torch.finfo(probs.dtype).tiny).log().double()
    nll = -(torch.logsumexp(log_label_probs, dim=1) - math.log(num_samples)).mean(dim=1)
    one_hot = torch.nn.functional.one_hot(labels, num_classes=num_classes).double()
    brier = (mean.double() - one_hot).square().sum(dim=-1).mean(dim=1)
    bins = assign_bins(confidence, n_bins)
    zeros = torch.zeros(runs, n_bins, dtype=torch.float64, device=probs.device)
    counts = zeros.scatter_add(1, bins, torch.ones_like(correct))
    confidence_sum = zeros.scatter_add(1, bins, confidence.double())
    correct_sum = zeros.scatter_add(1, bins, correct)
    ece = (correct_sum - confidence_sum).abs().sum(dim=1) / num_points
    gap = (correct_sum / counts.clamp_min(1) - confidence_sum / counts.clamp_min(1)).abs()
    mce = torch.where(counts > 0, gap, torch.full_like(gap, -math.inf)).max(dim=1).values
    columns = torch.stack([correct.mean(dim=1), nll, brier, ece, mce], dim=1).tolist()
    return [dict(zip(SUMMARY_KEYS, row, strict=True)) for row in columns]
