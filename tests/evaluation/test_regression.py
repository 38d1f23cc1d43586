"""``regression_metrics`` and ``predictive_moments`` against hand computations and scipy."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from pyro_bnn.evaluation import REGRESSION_KEYS, predictive_moments, regression_metrics

# S = 2 samples, N = 3 points, D = 1, sigma = 1.
#   point 0: means 0 and 2, y = 1   -> mean 1, var_s 1, sd sqrt(2); |y - mean| = 0   inside
#   point 1: means 1 and 1, y = 3.5 -> mean 1, var_s 0, sd 1;       |y - mean| = 2.5 outside (> 2)
#   point 2: means 2 and 4, y = 3   -> mean 3, var_s 1, sd sqrt(2); |y - mean| = 0   inside
# rmse = sqrt((0 + 2.5^2 + 0) / 3); coverage = 2/3.
# nll: at points 0 and 2 both components sit 1 away, so -log p = 0.5 + log(2 pi) / 2; at point 1 both sit
# 2.5 away, -log p = 3.125 + log(2 pi) / 2. Mean: log(2 pi) / 2 + (0.5 + 3.125 + 0.5) / 3.
MEANS = torch.tensor([[[0.0], [1.0], [2.0]], [[2.0], [1.0], [4.0]]])
TARGETS = torch.tensor([[1.0], [3.5], [3.0]])


def test_hand_computed_case():
    metrics = regression_metrics(MEANS, torch.tensor(1.0), TARGETS)
    assert tuple(metrics) == REGRESSION_KEYS
    assert metrics["rmse"] == pytest.approx(math.sqrt(2.5**2 / 3), rel=1e-12)
    assert metrics["coverage"] == pytest.approx(2 / 3, rel=1e-12)
    assert metrics["nll"] == pytest.approx(0.5 * math.log(2 * math.pi) + 4.125 / 3, rel=1e-12)
    assert all(isinstance(value, float) for value in metrics.values())


def test_predictive_moments_by_hand():
    mean, sd = predictive_moments(MEANS, torch.tensor(1.0))
    torch.testing.assert_close(mean, torch.tensor([[1.0], [1.0], [3.0]], dtype=torch.float64))
    torch.testing.assert_close(sd, torch.tensor([[2**0.5], [1.0], [2**0.5]], dtype=torch.float64))


def test_unequal_components_against_scipy():
    # sigma = 0.5 and components at different distances: the mixture density is not a single Gaussian's.
    means = torch.tensor([[[0.0], [1.0], [-2.0]], [[0.7], [3.0], [-1.0]]])
    targets = torch.tensor([[0.2], [1.5], [0.5]])
    sigma = 0.5
    m, y = means.double().numpy()[..., 0], targets.double().numpy()[:, 0]
    density = 0.5 * stats.norm.pdf(y, m[0], sigma) + 0.5 * stats.norm.pdf(y, m[1], sigma)
    sd = np.sqrt(m.var(0) + sigma**2)
    expected_coverage = np.mean(np.abs(y - m.mean(0)) <= 2 * sd)
    metrics = regression_metrics(means, torch.tensor(sigma), targets)
    assert metrics["nll"] == pytest.approx(-np.log(density).mean(), rel=1e-10)
    assert metrics["rmse"] == pytest.approx(np.sqrt(np.mean((y - m.mean(0)) ** 2)), rel=1e-10)
    assert metrics["coverage"] == pytest.approx(expected_coverage)
    assert 0 < expected_coverage < 1  # the case separates inside from outside


def test_two_outputs_sum_the_log_density_and_count_each_entry():
    generator = torch.Generator().manual_seed(0)
    means = torch.randn(4, 5, 2, generator=generator)
    targets = torch.randn(5, 2, generator=generator) * 2
    sigma = 0.8
    m, y = means.double().numpy(), targets.double().numpy()
    component = stats.norm.pdf(y[None], m, sigma).prod(-1)  # (S, N): the D outputs multiply
    metrics = regression_metrics(means, sigma, targets, num_sd=1.0)
    assert metrics["nll"] == pytest.approx(-np.log(component.mean(0)).mean(), rel=1e-10)
    assert metrics["rmse"] == pytest.approx(np.sqrt(((y - m.mean(0)) ** 2).sum(-1).mean()), rel=1e-10)
    sd = np.sqrt(m.var(0) + sigma**2)
    assert metrics["coverage"] == pytest.approx(np.mean(np.abs(y - m.mean(0)) <= sd))


def test_num_sd_widens_the_interval():
    narrow = regression_metrics(MEANS, 1.0, TARGETS, num_sd=1.0)["coverage"]
    wide = regression_metrics(MEANS, 1.0, TARGETS, num_sd=3.0)["coverage"]
    assert narrow == pytest.approx(2 / 3) and wide == 1.0


def test_one_sample_is_a_single_gaussian():
    means, targets = torch.tensor([[[0.0], [1.0]]]), torch.tensor([[1.0], [1.0]])
    metrics = regression_metrics(means, 2.0, targets)
    assert metrics["nll"] == pytest.approx(-stats.norm.logpdf([1.0, 1.0], [0.0, 1.0], 2.0).mean(), rel=1e-12)


def test_device(device):
    metrics = regression_metrics(MEANS.to(device), torch.tensor(1.0, device=device), TARGETS)
    assert metrics["coverage"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"means": MEANS[0]}, r"means must have shape \(S, N, D\)"),
        ({"means": MEANS.long()}, "floating-point"),
        ({"means": MEANS.clone().fill_(float("nan"))}, "means must be finite"),
        ({"targets": TARGETS[:, 0]}, r"targets must have shape \(N, D\) = \(3, 1\)"),
        ({"targets": torch.tensor([[1.0], [float("inf")], [0.0]])}, "targets must be finite"),
        ({"noise_scale": torch.tensor(0.0)}, "noise_scale must be a finite number > 0; got 0.0"),
        ({"noise_scale": float("nan")}, "noise_scale must be a finite number > 0; got nan"),
        ({"noise_scale": torch.ones(2)}, "noise_scale must be a scalar"),
        ({"num_sd": 0}, "num_sd must be a finite number > 0"),
    ],
)
def test_bad_inputs(kwargs, match):
    arguments = {"means": MEANS, "noise_scale": torch.tensor(1.0), "targets": TARGETS, **kwargs}
    with pytest.raises(ValueError, match=match):
        regression_metrics(**arguments)


def test_coverage_is_undefined_where_student_t_noise_has_no_variance():
    """For df <= 2 the predictive sd is infinite and mean ± 2 sd the whole line: coverage was 1.0 for targets a
    million noise scales away. It is NaN; RMSE and NLL are still scored, and df just above 2 gives a finite
    interval."""
    means, targets = torch.zeros(4, 3, 1), torch.full((3, 1), 1e6)
    for df in (1.5, 2.0):
        metrics = regression_metrics(means, 0.1, targets, df=df)
        assert math.isnan(metrics["coverage"])
        assert metrics["rmse"] == pytest.approx(1e6, rel=1e-12)
        assert metrics["nll"] == pytest.approx(-stats.t.logpdf(1e6, df, 0.0, 0.1), rel=1e-9)
    # df = 2.5: sd = 0.1 sqrt(2.5 / 0.5) = 0.2236, so 2 sd = 0.447: 0.4 and -0.44 are inside, 0.5 is not
    inside = regression_metrics(torch.zeros(2, 3, 1), 0.1, torch.tensor([[0.4], [0.5], [-0.44]]), df=2.5)
    assert inside["coverage"] == pytest.approx(2 / 3, rel=1e-12)
