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
