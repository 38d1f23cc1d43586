import math

import numpy as np
import pytest
import torch

from pyro_bnn.evaluation import accuracy, brier_score, nll


def test_accuracy_hand_case_mean_probs():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.5, 0.4, 0.1]])
    labels = torch.tensor([0, 2, 2, 1])
    # predictions 0, 1, 2, 0 against labels 0, 2, 2, 1: right, wrong, right, wrong -> 2 / 4
    assert accuracy(probs, labels) == pytest.approx(0.5)


def test_accuracy_uses_argmax_of_the_sample_mean_not_a_majority_vote(device):
    # Two of three samples vote for class 0, but the mean is [(0.6 + 0.6 + 0) / 3, (0.4 + 0.4 + 1) / 3] =
    # [0.4, 0.6], so the prediction is class 1.
    probs = torch.tensor([[[0.6, 0.4]], [[0.6, 0.4]], [[0.0, 1.0]]], device=device)
    assert accuracy(probs, torch.tensor([1], device=device)) == 1.0
    assert accuracy(probs, torch.tensor([0], device=device)) == 0.0


def test_accuracy_breaks_ties_towards_the_lowest_class():
    probs = torch.tensor([[0.25, 0.5, 0.25, 0.0], [0.5, 0.5, 0.0, 0.0]])
    # row 0: class 1 wins outright; row 1: tie between 0 and 1 -> class 0
    assert accuracy(probs, torch.tensor([1, 0])) == 1.0
    assert accuracy(probs, torch.tensor([1, 1])) == 0.5


def _nll_oracle(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mixture NLL by an explicit loop in float64, the definition written out."""
    total = 0.0
    num_samples, num_points, _ = probs.shape
    for n in range(num_points):
        mixture = sum(float(probs[s, n, labels[n]]) for s in range(num_samples)) / num_samples
        total += -math.log(mixture)
    return total / num_points


def test_nll_matches_an_explicit_float64_loop(device):
    generator = torch.Generator().manual_seed(3)
    probs = torch.softmax(2.0 * torch.randn(7, 20, 5, generator=generator), dim=-1)
    labels = torch.randint(0, 5, (20,), generator=generator)
    # Data point 0: one posterior sample gives its label probability exactly 0, the others do not, so the
    # mixture stays finite and the NLL must match the direct computation (no clamping kicks in).
    probs[2, 0] = 0.0
    probs[2, 0, (labels[0] + 1) % 5] = 1.0
    expected = _nll_oracle(probs.double().numpy(), labels.numpy())
    assert math.isfinite(expected)
    assert nll(probs.to(device), labels.to(device)) == pytest.approx(expected, rel=1e-6)


def test_nll_hand_case_with_a_zero_in_one_sample():
    # p(y) = 0 in sample 0 and 0.5 in sample 1: mixture (0 + 0.5) / 2 = 0.25, NLL = log 4.
    probs = torch.tensor([[[0.0, 1.0]], [[0.5, 0.5]]])
    assert nll(probs, torch.tensor([0])) == pytest.approx(math.log(4.0), rel=1e-6)


def test_nll_of_mean_probs_is_minus_log_p():
    probs = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25]], dtype=torch.float64)
    # -(log 0.5 + log 0.25) / 2 = (log 2 + 2 log 2) / 2 = 1.5 log 2
    assert nll(probs, torch.tensor([0, 2])) == pytest.approx(1.5 * math.log(2.0), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nll_is_finite_when_the_label_has_probability_zero_everywhere(dtype):
    probs = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]]], dtype=dtype)
    # p(y) is clamped at the smallest positive normal float: -log(tiny) = 87.34 (float32), 708.40 (float64)
    expected = -math.log(torch.finfo(dtype).tiny)
    assert nll(probs, torch.tensor([1])) == pytest.approx(expected, rel=1e-6)


def test_brier_score_hand_case(device):
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]], device=device)
    labels = torch.tensor([0, 2], device=device)
    # row 0: (0.7 - 1)^2 + 0.2^2 + 0.1^2 = 0.09 + 0.04 + 0.01 = 0.14
    # row 1: 0.1^2 + 0.6^2 + (0.3 - 1)^2 = 0.01 + 0.36 + 0.49 = 0.86
    # mean: (0.14 + 0.86) / 2 = 0.5
    assert brier_score(probs, labels) == pytest.approx(0.5, abs=1e-6)


def test_brier_score_averages_samples_first():
    # Samples [1, 0] and [0, 1] average to [0.5, 0.5]: (0.5 - 1)^2 + 0.5^2 = 0.5. Averaging the per-sample
    # scores instead would give (0 + 2) / 2 = 1.
    probs = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    assert brier_score(probs, torch.tensor([0])) == pytest.approx(0.5)


def test_half_precision_probabilities_score_like_float32():
    probs = torch.tensor([[0.75, 0.25], [0.125, 0.875]])
    labels = torch.tensor([0, 0])
    for metric in (accuracy, nll, brier_score):
        assert metric(probs.half(), labels) == pytest.approx(metric(probs, labels), rel=1e-3)
