import math

import pytest
import torch

from pyro_bnn.evaluation import (
    SUMMARY_KEYS,
    accuracy,
    brier_score,
    calibration,
    nll,
    summarize,
    summarize_runs,
)


@pytest.mark.parametrize("n_bins", [10, 15])
def test_summary_equals_the_individual_metrics(n_bins, device):
    generator = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(6, 40, 3, generator=generator), dim=-1).to(device)
    labels = torch.randint(0, 3, (40,), generator=generator).to(device)
    result = calibration(probs, labels, n_bins=n_bins)
    metrics = summarize(probs, labels, n_bins=n_bins)
    assert tuple(metrics) == SUMMARY_KEYS == ("accuracy", "nll", "brier", "ece", "mce")
    assert all(type(value) is float for value in metrics.values())
    assert metrics == {
        "accuracy": accuracy(probs, labels),
        "nll": nll(probs, labels),
        "brier": brier_score(probs, labels),
        "ece": result.ece,
        "mce": result.mce,
    }


def test_summary_default_uses_fifteen_bins():
    probs = torch.softmax(torch.randn(3, 40, 3), dim=-1)
    labels = torch.randint(0, 3, (40,))
    assert summarize(probs, labels)["ece"] == calibration(probs, labels, n_bins=15).ece


@pytest.mark.parametrize("n_bins", [4, 15])
def test_summarize_runs_equals_summarize_on_each_run(n_bins, device):
    """R runs at once give each run's summarize() (ties, a zero label probability and empty bins included)."""
    generator = torch.Generator().manual_seed(3)
    probs = torch.softmax(3 * torch.randn(5, 6, 50, 4, generator=generator), dim=-1)
    probs[0, :, 0] = torch.tensor([0.25, 0.25, 0.25, 0.25])  # a tie: the lowest class wins
    probs[1, 2, 3] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # one sample gives the label probability 0
    probs, labels = probs.to(device), torch.randint(0, 4, (5, 50), generator=generator).to(device)
    labels[1, 3] = 1

    batched = summarize_runs(probs, labels, n_bins=n_bins)
    for r in range(5):
        expected = summarize(probs[r], labels[r], n_bins=n_bins)
        assert tuple(batched[r]) == SUMMARY_KEYS
        for key in SUMMARY_KEYS:
            assert batched[r][key] == pytest.approx(expected[key], rel=1e-12, abs=1e-12), key


def test_summarize_runs_names_the_shapes_it_needs():
    with pytest.raises(ValueError, match=r"probs \(R, S, N, C\) and labels \(R, N\)"):
        summarize_runs(torch.ones(2, 3, 4) / 4, torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_summarize_runs_takes_labels_of_any_integer_dtype(dtype):
    """int32 labels crashed in one_hot ("only applicable to index tensor of type LongTensor"), while summarize casts
    them. Hand-computed: predictions 0 and 1 of labels 0 and 0, both confidences in the upper of 2 bins."""
    probs = torch.tensor([[[[0.75, 0.25], [0.4, 0.6]]]], dtype=torch.float64)  # (R, S, N, C) = (1, 1, 2, 2)
    labels = torch.tensor([[0, 0]], dtype=dtype)
    (metrics,) = summarize_runs(probs, labels, n_bins=2)
    assert metrics == pytest.approx(
        {
            "accuracy": 0.5,
            "nll": -(math.log(0.75) + math.log(0.4)) / 2,
            "brier": ((0.25**2 + 0.25**2) + (0.6**2 + 0.6**2)) / 2,  # 0.4225
            "ece": abs((1 + 0) - (0.75 + 0.6)) / 2,  # 0.175
            "mce": abs(1 / 2 - (0.75 + 0.6) / 2),  # 0.175
        },
        rel=1e-12,
    )
    generator = torch.Generator().manual_seed(4)
    probs = torch.softmax(torch.randn(2, 3, 4, 5, generator=generator), dim=-1)
    labels = torch.randint(0, 5, (2, 4), generator=generator)
    assert summarize_runs(probs, labels.to(dtype)) == summarize_runs(probs, labels)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (torch.zeros(2, 4), "labels must be an integer tensor of class indices; got dtype torch.float32"),
        (
            torch.zeros(2, 4, dtype=torch.bool),
            "labels must be an integer tensor of class indices; got dtype torch.bool",
        ),
        (
            torch.tensor([[0, 5, 1, 1], [0, 0, 0, 0]]),
            "labels must lie in [0, 5) for C=5 classes; found 5 at index (0, 1)",
        ),
        (
            torch.tensor([[0, 0, 0, 0], [0, 0, -1, 0]]),
            "labels must lie in [0, 5) for C=5 classes; found -1 at index (1, 2)",
        ),
    ],
)
def test_summarize_runs_refuses_labels_that_are_not_class_indices(labels, message):
    with pytest.raises(ValueError) as info:
        summarize_runs(torch.full((2, 3, 4, 5), 0.2), labels)
    assert str(info.value) == message
