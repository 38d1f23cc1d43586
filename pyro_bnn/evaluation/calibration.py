"""Calibration of a classifier's confidence: binned reliability statistics, ECE and MCE.

Binning follows the common convention (Guo et al., 2017): ``n_bins`` equal-width bins over ``[0, 1]`` that are
closed on the right, ``(lower, upper]``, so a confidence lying exactly on an edge is counted in the lower bin
(0.2 with 10 bins is in ``(0.1, 0.2]``) and a confidence of exactly 0 is counted in the first bin.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.evaluation._validation import CheckedPredictive, check_predictive
from pyro_bnn.evaluation.classification import _confidence_and_prediction

DEFAULT_NUM_BINS = 15
"""Equal-width confidence bins of the ECE unless told otherwise (the usual 15)."""


@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """Binned reliability statistics of one predictive.

    ``eq=False`` because field-wise ``==`` on tensors is elementwise and would make ``result == other`` raise.
    Tensors stay on the device of the probabilities they were computed from.

    Attributes:
        ece: expected calibration error, ``sum_b (n_b / N) |acc_b - conf_b|`` over non-empty bins.
        mce: maximum calibration error, ``max_b |acc_b - conf_b|`` over non-empty bins.
        bin_edges: ``(n_bins + 1,)`` float64 edges ``0, 1/n_bins, ..., 1``.
        bin_counts: ``(n_bins,)`` int64 number of data points per bin.
        bin_confidence: ``(n_bins,)`` float64 mean confidence per bin; NaN for an empty bin, which has none.
        bin_accuracy: ``(n_bins,)`` float64 accuracy per bin; NaN for an empty bin.
        n_bins: number of bins.
    """

    ece: float
    mce: float
    bin_edges: torch.Tensor
    bin_counts: torch.Tensor
    bin_confidence: torch.Tensor
    bin_accuracy: torch.Tensor
    n_bins: int

    def __post_init__(self) -> None:
        # Results are also built by hand (plots, tests); a shape mix-up would otherwise surface as a confusing
        # matplotlib error far from its cause.
        expected = {
            "bin_edges": (self.n_bins + 1,),
            "bin_counts": (self.n_bins,),
            "bin_confidence": (self.n_bins,),
            "bin_accuracy": (self.n_bins,),
        }
        for name, shape in expected.items():
            found = tuple(getattr(self, name).shape)
            if found != shape:
                raise ValueError(
                    f"CalibrationResult.{name} must have shape {shape} for n_bins={self.n_bins}; got {found}"
                )

    @property
    def num_points(self) -> int:
        """Number of data points N that were binned."""
        return int(self.bin_counts.sum())


def bin_edges(n_bins: int, *, dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> torch.Tensor:
    """Equal-width bin edges over ``[0, 1]``.

    Each edge is ``k / n_bins`` rounded once to ``dtype`` (not accumulated steps as in ``linspace``), so an
    edge equals the probability a user writes for it, e.g. ``torch.tensor(0.2)`` in float32 for k=2,
    n_bins=10.

    Args:
        n_bins: number of bins.
        dtype: floating dtype of the edges.
        device: device of the edges.

    Returns:
        ``(n_bins + 1,)`` edges from 0 to 1.
    """
    return torch.arange(n_bins + 1, dtype=dtype, device=device) / n_bins


def assign_bins(confidence: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Bin index of each confidence for ``n_bins`` right-closed bins ``(lower, upper]``.

    Args:
        confidence: ``(N,)`` confidences in ``[0, 1]``.
        n_bins: number of bins.

    Returns:
        ``(N,)`` int64 bin indices in ``[0, n_bins)``; 0 goes to the first bin, and values a round-off above 1
        go to the last.
    """
    # Edges in the confidence's own dtype, so that a confidence equal to an edge compares equal to it.
    edges = bin_edges(n_bins, dtype=confidence.dtype, device=confidence.device)
    # bucketize with right=False returns i with edges[i-1] < x <= edges[i], the (lower, upper] convention.
    return (torch.bucketize(confidence, edges, right=False) - 1).clamp_(0, n_bins - 1)


def _calibration_of(checked: CheckedPredictive, n_bins: int) -> CalibrationResult:
    confidence, prediction = _confidence_and_prediction(checked.mean)
    correct = (prediction == checked.labels).double()
    bin_index = assign_bins(confidence, n_bins)

    device = confidence.device
    counts = torch.bincount(bin_index, minlength=n_bins)
    # Sums in float64, so bins holding many thousands of points keep their means exact to float32 precision.
    confidence_sum = torch.zeros(n_bins, dtype=torch.float64, device=device).index_add_(
        0, bin_index, confidence.double()
    )
    correct_sum = torch.zeros(n_bins, dtype=torch.float64, device=device).index_add_(0, bin_index, correct)

    non_empty = counts > 0
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    safe_counts = counts.clamp_min(1).double()
    bin_confidence = torch.where(non_empty, confidence_sum / safe_counts, nan)
    bin_accuracy = torch.where(non_empty, correct_sum / safe_counts, nan)

    # n_b |acc_b - conf_b| = |correct_sum_b - confidence_sum_b|, which is 0 for empty bins.
    ece = (correct_sum - confidence_sum).abs().sum() / confidence.shape[0]
    mce = (bin_accuracy - bin_confidence).abs()[non_empty].max()
    ece_value, mce_value = torch.stack([ece, mce]).tolist()
    return CalibrationResult(
        ece=ece_value,
        mce=mce_value,
        bin_edges=bin_edges(n_bins, device=device),
        bin_counts=counts,
        bin_confidence=bin_confidence,
        bin_accuracy=bin_accuracy,
        n_bins=n_bins,
    )


def calibration(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = DEFAULT_NUM_BINS) -> CalibrationResult:
    """Reliability statistics of the posterior-mean prediction.

    Confidence is the largest sample-mean probability and the prediction its class (samples are averaged
    first; per-sample confidences are never binned). Bins are equal-width and right-closed, see the module
    docstring.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        n_bins: number of equal-width bins (15 by default; 10 is the other common choice).

    Returns:
        The per-bin counts, confidences and accuracies with ECE and MCE.

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    n_bins = positive_int(n_bins, "n_bins")
    return _calibration_of(check_predictive(probs, labels), n_bins)


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = DEFAULT_NUM_BINS) -> float:
    """Expected calibration error; ``calibration(probs, labels, n_bins).ece``.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        n_bins: number of equal-width bins.

    Returns:
        ECE in ``[0, 1]``.

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    return calibration(probs, labels, n_bins).ece


def maximum_calibration_error(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = DEFAULT_NUM_BINS) -> float:
    """Maximum calibration error; ``calibration(probs, labels, n_bins).mce``.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        n_bins: number of equal-width bins.

    Returns:
        MCE in ``[0, 1]``.

    Raises:
        ValueError: the inputs fail validation (see ``pyro_bnn.evaluation``).
    """
    return calibration(probs, labels, n_bins).mce
