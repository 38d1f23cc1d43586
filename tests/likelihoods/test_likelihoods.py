import math
import re

import pytest
import torch
from pyro import poutine

from pyro_bnn.likelihoods import Categorical, Gaussian


def _trace(likelihood, output, y):
    trace = poutine.trace(likelihood).get_trace(output, y)
    trace.compute_log_prob()
    return trace.nodes["obs"]


def test_categorical_log_likelihood_is_scaled_by_n_over_b():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    y = torch.tensor([0, 2])
    site = _trace(Categorical(dataset_size=10), logits, y)
    direct = torch.log_softmax(logits, -1)[torch.arange(2), y].sum()
    assert site["log_prob_sum"].item() == pytest.approx(5 * direct.item(), rel=1e-6)


def test_gaussian_log_likelihood_with_fixed_scale():
    mean = torch.tensor([[0.0], [1.0], [2.0]])
    y = torch.tensor([[0.5], [1.0], [0.0]])
    site = _trace(Gaussian(dataset_size=6, scale=0.5), mean, y)
    direct = sum(
        -0.5 * ((a - b) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
        for a, b in [(0.5, 0.0), (1.0, 1.0), (0.0, 2.0)]
    )
    assert site["log_prob_sum"].item() == pytest.approx(2 * direct, rel=1e-6)


def test_learned_scale_is_a_parameter():
    likelihood = Gaussian(10, scale=2.0, learn_scale=True)
    assert [n for n, _ in likelihood.named_parameters()] == ["log_scale"]
    assert likelihood.scale.item() == pytest.approx(2.0)
    assert list(Gaussian(10).named_parameters()) == []


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "100"])
def test_dataset_size_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match=f"^dataset_size must be an int >= 1, got {re.escape(repr(bad))}$"):
        Categorical(bad)


def test_target_checks():
    logits = torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\).*found values in \[0, 3\]"):
        Categorical(10).check_targets(logits, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="4 labels for a batch of 3"):
        Categorical(10).check_targets(torch.zeros(3, 3), torch.tensor([0, 1, 2, 0]))
    with pytest.raises(ValueError, match=r"targets of shape \(4,\) do not match network outputs of shape \(4, 1\)"):
        Gaussian(10).check_targets(torch.zeros(4, 1), torch.zeros(4))
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        Gaussian(10, scale=0.0)
