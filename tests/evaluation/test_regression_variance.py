"""The aleatoric / epistemic split of a regression predictive: a hand-made case and the law of total variance."""

import pytest
import torch

from pyro_bnn.evaluation import regression_variance_split


def test_hand_made_samples():
    means = torch.tensor([[[1.0], [0.0]], [[3.0], [0.0]]])  # (S=2, N=2, D=1)
    scales = torch.tensor([[[1.0], [2.0]], [[3.0], [2.0]]])
    split = regression_variance_split(means, scales)
    # point 0: aleatoric (1 + 9) / 2 = 5, epistemic var{1, 3} = 1; point 1: 4 and 0
    assert split.aleatoric.view(-1).tolist() == [5.0, 4.0]
    assert split.epistemic.view(-1).tolist() == [1.0, 0.0]
    assert split.total.view(-1).tolist() == [6.0, 4.0]
    assert split.aleatoric_sd.view(-1).tolist() == pytest.approx([5**0.5, 2.0])


def test_scalar_noise_and_student_t():
    means = torch.tensor([[[0.0]], [[2.0]]])
    assert regression_variance_split(means, 0.5).aleatoric.item() == pytest.approx(0.25)
    assert regression_variance_split(means, 0.5, df=4.0).aleatoric.item() == pytest.approx(0.25 * 2)
    assert regression_variance_split(means, 0.5, df=2.0).aleatoric.item() == float("inf")


def test_law_of_total_variance_against_monte_carlo():
    generator = torch.Generator().manual_seed(0)
    num_samples, n = 8, 3
    means = torch.randn(num_samples, n, 2, generator=generator, dtype=torch.float64) * 2
    scales = 0.2 + torch.rand(num_samples, n, 2, generator=generator, dtype=torch.float64)
    split = regression_variance_split(means, scales)
    draws = 400_000
    component = torch.randint(num_samples, (draws,), generator=generator)
    noise = torch.randn(draws, n, 2, generator=generator, dtype=torch.float64)
    y = means[component] + scales[component] * noise  # draws of the mixture predictive
    assert torch.allclose(y.var(0), split.total, rtol=0.02)
    # the within-component part: E over draws of the chosen component's noise variance
    assert torch.allclose((scales[component] ** 2).mean(0), split.aleatoric, rtol=0.02)
