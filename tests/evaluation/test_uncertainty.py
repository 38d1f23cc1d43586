import math

import numpy as np
import pytest
import scipy.stats
import torch

from pyro_bnn.evaluation import UncertaintySplit, entropy_decomposition

LOG2 = math.log(2.0)


def test_two_disagreeing_one_hot_samples_are_purely_epistemic(device):
    probs = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]], device=device)
    split = entropy_decomposition(probs)
    # mean [0.5, 0.5]: total = log 2; each sample is one-hot: aleatoric = 0 (0 log 0 = 0); epistemic = log 2
    assert isinstance(split, UncertaintySplit)
    assert split.total.shape == split.aleatoric.shape == split.epistemic.shape == (1,)
    assert split.total.item() == pytest.approx(LOG2, abs=1e-6)
    assert split.aleatoric.item() == pytest.approx(0.0, abs=1e-7)
    assert split.epistemic.item() == pytest.approx(LOG2, abs=1e-6)


def test_hand_case_with_partial_disagreement():
    probs = torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]]], dtype=torch.float64)
    split = entropy_decomposition(probs)
    # mean [0.75, 0.25]: total = -(0.75 log 0.75 + 0.25 log 0.25) = 0.562335...
    # aleatoric = (H[1, 0] + H[0.5, 0.5]) / 2 = (0 + log 2) / 2 = 0.346574...
    # epistemic = 0.562335 - 0.346574 = 0.215762...
    total = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert split.total.item() == pytest.approx(total, rel=1e-12)
    assert split.aleatoric.item() == pytest.approx(LOG2 / 2, rel=1e-12)
    assert split.epistemic.item() == pytest.approx(total - LOG2 / 2, rel=1e-12)


def test_agreeing_samples_carry_no_epistemic_uncertainty():
    row = torch.softmax(torch.randn(6, 4), dim=-1)
    probs = row.expand(10, 6, 4).clone()
    split = entropy_decomposition(probs)
    torch.testing.assert_close(split.epistemic, torch.zeros(6), atol=1e-6, rtol=0)
    torch.testing.assert_close(split.total, split.aleatoric, atol=1e-6, rtol=1e-6)


def test_identities_and_scipy_oracle_on_random_samples(device):
    generator = torch.Generator().manual_seed(7)
    probs = torch.softmax(2.0 * torch.randn(8, 30, 5, generator=generator, dtype=torch.float64), dim=-1)
    split = entropy_decomposition(probs.to(device))
    total, aleatoric, epistemic = (t.cpu() for t in (split.total, split.aleatoric, split.epistemic))

    samples = probs.numpy()
    expected_total = scipy.stats.entropy(samples.mean(axis=0), axis=-1)
    expected_aleatoric = scipy.stats.entropy(samples, axis=-1).mean(axis=0)
    np.testing.assert_allclose(total.numpy(), expected_total, rtol=1e-10)
    np.testing.assert_allclose(aleatoric.numpy(), expected_aleatoric, rtol=1e-10)
    torch.testing.assert_close(total, aleatoric + epistemic, rtol=1e-12, atol=1e-12)
    assert (epistemic >= 0).all()
    # Random samples disagree, so the mutual information is strictly positive here.
    assert (epistemic > 1e-3).all()


def test_mean_probs_input_has_zero_epistemic_part():
    probs = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    split = entropy_decomposition(probs)
    # row 0: log 2 (the 0 contributes 0 log 0 = 0); row 1: -(0.2 log 0.2 + 0.3 log 0.3 + 0.5 log 0.5)
    row_1 = -(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5))
    torch.testing.assert_close(split.total, torch.tensor([LOG2, row_1]))
    assert torch.equal(split.aleatoric, split.total)
    assert torch.equal(split.epistemic, torch.zeros(2))
