import pytest
import torch

from pyro_bnn.evaluation import (
    SUMMARY_KEYS,
    accuracy,
    brier_score,
    calibration,
    nll,
    summarize,
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
