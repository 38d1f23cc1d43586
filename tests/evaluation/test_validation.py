"""Every bad input raises ValueError, and the message names what was found."""

import re

import pytest
import torch

from pyro_bnn.evaluation import (
    accuracy,
    brier_score,
    calibration,
    entropy_decomposition,
    expected_calibration_error,
    label_frequencies_from_samples,
    maximum_calibration_error,
    nll,
    summarize,
)

GOOD_PROBS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]])
GOOD_LABELS = torch.tensor([0, 2])

LABELLED_METRICS = [
    accuracy,
    nll,
    brier_score,
    calibration,
    expected_calibration_error,
    maximum_calibration_error,
    summarize,
]


def _with(row: int, col: int, value: float) -> torch.Tensor:
    probs = GOOD_PROBS.clone()
    probs[row, col] = value
    return probs


BAD_PROBS = {
    "rank 1": (
        torch.tensor([0.5, 0.5]),
        "rank 2 (N, C) or rank 3 (num_samples, N, C); got shape (2,) (rank 1)",
    ),
    "rank 4": (torch.full((2, 2, 2, 2), 0.5), "got shape (2, 2, 2, 2) (rank 4)"),
    "integer dtype": (
        torch.tensor([[1, 0], [0, 1]]),
        "floating-point tensor of probabilities; got dtype torch.int64",
    ),
    "empty": (torch.empty(0, 3), "at least one sample, data point and class; got shape (0, 3)"),
    "not a tensor": ([[0.5, 0.5]], "probs must be a torch.Tensor; got list"),
    # 0.7 + 0.2 + 0.5 = 1.4
    "row sum": (
        _with(0, 2, 0.5),
        "sum to 1 over the last (class) dimension within 0.001; found row sum 1.4 at row (0,)",
    ),
    # non-negative scores that were never normalised: 2 + 1 + 0.5 = 3.5
    "unnormalised": (torch.tensor([[2.0, 1.0, 0.5]]), "found row sum 3.5 at row (0,) (pass probabilities"),
    # 0.9 + 0.2 - 0.1 = 1.0, so only the sign is wrong
    "negative": (torch.tensor([[0.9, 0.2, -0.1]]), "non-negative; found -0.1 at index (0, 2)"),
    "nan": (_with(1, 1, float("nan")), "finite; found nan at index (1, 1)"),
    "inf": (_with(1, 0, float("inf")), "finite; found inf at index (1, 0)"),
}

BAD_LABELS = {
    "float labels": (torch.tensor([0.0, 2.0]), "integer tensor of class indices; got dtype torch.float32"),
    "bool labels": (torch.tensor([True, False]), "got dtype torch.bool"),
    "label too large": (torch.tensor([0, 3]), "must lie in [0, 3) for C=3 classes; found 3 at index 1"),
    "negative label": (torch.tensor([-1, 0]), "found -1 at index 0"),
    "N mismatch": (torch.tensor([0, 1, 2]), "labels has N=3 entries but probs has N=2 data points"),
    "labels rank 2": (torch.tensor([[0], [2]]), "labels must have rank 1 (N,); got shape (2, 1) (rank 2)"),
    "labels not a tensor": ([0, 2], "labels must be a torch.Tensor; got list"),
}


@pytest.mark.parametrize("metric", LABELLED_METRICS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", list(BAD_PROBS), ids=str)
def test_bad_probs_raise_value_error_naming_the_value(metric, case):
    probs, message = BAD_PROBS[case]
    # Labels that fit the probabilities, so that only the probabilities are wrong.
    num_points = probs.shape[-2] if isinstance(probs, torch.Tensor) and probs.dim() >= 2 else 2
    labels = GOOD_LABELS[:num_points]
    with pytest.raises(ValueError, match=re.escape(message)):
        metric(probs, labels)


@pytest.mark.parametrize("case", [c for c in BAD_PROBS if c != "empty"], ids=str)
def test_entropy_decomposition_validates_probs(case):
    probs, message = BAD_PROBS[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        entropy_decomposition(probs)


@pytest.mark.parametrize("metric", LABELLED_METRICS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", list(BAD_LABELS), ids=str)
def test_bad_labels_raise_value_error_naming_the_value(metric, case):
    labels, message = BAD_LABELS[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        metric(GOOD_PROBS, labels)


def test_samples_layout_reports_the_worst_row_with_its_full_index():
    probs = torch.full((3, 2, 2), 0.5)
    probs[2, 1] = torch.tensor([0.5, 0.6])
    with pytest.raises(ValueError, match=re.escape("found row sum 1.1 at row (2, 1)")):
        nll(probs, torch.tensor([0, 1]))


def test_round_off_within_tolerance_is_accepted():
    # A float32 softmax over 1000 classes sums to 1 only up to round-off; that must pass.
    probs = torch.softmax(torch.randn(4, 1000), dim=-1)
    probs[0, 0] += 5e-4
    assert 0.0 <= accuracy(probs, torch.zeros(4, dtype=torch.int64)) <= 1.0


@pytest.mark.parametrize(
    ("n_bins", "message"),
    [
        (0, "n_bins must be an int >= 1, got 0"),
        (-3, "n_bins must be an int >= 1, got -3"),
        (2.5, "n_bins must be an int >= 1, got 2.5"),
        (10.0, "n_bins must be an int >= 1, got 10.0"),
        ("10", "n_bins must be an int >= 1, got '10'"),
        (True, "n_bins must be an int >= 1, got True"),
    ],
)
@pytest.mark.parametrize(
    "metric",
    [calibration, expected_calibration_error, maximum_calibration_error, summarize],
    ids=lambda f: f.__name__,
)
def test_bad_n_bins_raise_value_error(metric, n_bins, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        metric(GOOD_PROBS, GOOD_LABELS, n_bins=n_bins)


@pytest.mark.parametrize(
    ("sampled", "num_classes", "message"),
    [
        (torch.tensor([[0.0, 1.0]]), 2, "sampled_labels must be an integer tensor of class indices; got"),
        (torch.tensor([0, 1]), 2, "must have rank 2 (num_samples, N); got shape (2,) (rank 1)"),
        (torch.tensor([[0, 2]]), 2, "must lie in [0, 2) for C=2 classes; found 2 at index (0, 1)"),
        (torch.empty(0, 3, dtype=torch.int64), 2, "sampled_labels must not be empty; got shape (0, 3)"),
        (torch.tensor([[0, 1]]), 0, "num_classes must be an int >= 1, got 0"),
    ],
)
def test_label_frequencies_from_samples_validates(sampled, num_classes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        label_frequencies_from_samples(sampled, num_classes)


def test_a_numpy_integer_n_bins_is_accepted():
    numpy = pytest.importorskip("numpy")
    assert calibration(GOOD_PROBS, GOOD_LABELS, n_bins=numpy.int64(10)).n_bins == 10


def test_half_precision_rows_off_by_rounding_get_a_dtype_hint():
    # bfloat16 keeps 8 significant bits: 0.49 becomes 0.490234375, and the row sums to 0.990234375.
    probs = torch.tensor([[0.5, 0.49]], dtype=torch.bfloat16)
    message = "found row sum 0.990234 at row (0,) (torch.bfloat16 rounding"
    with pytest.raises(ValueError, match=re.escape(message)):
        accuracy(probs, torch.tensor([0]))
    assert accuracy(torch.tensor([[0.5, 0.5]], dtype=torch.bfloat16), torch.tensor([0])) == 1.0
