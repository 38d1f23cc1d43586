"""All headline metrics of a predictive in one call, for the trainer's logs and the CLI's tables."""

from __future__ import annotations

import torch

from pyro_bnn.evaluation._validation import check_positive_int, check_predictive
from pyro_bnn.evaluation.calibration import DEFAULT_NUM_BINS, _calibration_of
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
    n_bins = check_positive_int(n_bins, name="n_bins")
    checked = check_predictive(probs, labels)
    calibration_result = _calibration_of(checked, n_bins)
    return {
        "accuracy": _accuracy_of(checked),
        "nll": _nll_of(checked),
        "brier": _brier_score_of(checked),
        "ece": calibration_result.ece,
        "mce": calibration_result.mce,
    }
