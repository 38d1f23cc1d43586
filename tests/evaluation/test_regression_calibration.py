"""Regression calibration metrics against hand-computed values, numerical integrals and binomial error bars."""

import math

import pytest
import torch

from pyro_bnn.evaluation import (
    central_interval,
    crps_gaussian,
    crps_gaussian_mixture,
    crps_samples,
    mixture_cdf,
    mixture_quantile,
    pit_values,
    quantile_calibration_error,
    regression_calibration,
    regression_metrics,
    sharpness,
)


def test_crps_of_a_standard_normal_at_its_mean():
    # z = 0: 2 phi(0) - 1/sqrt(pi) = sqrt(2/pi) - 1/sqrt(pi)
    expected = (math.sqrt(2) - 1) / math.sqrt(math.pi)
    assert float(crps_gaussian(torch.tensor(0.0), 1.0, torch.tensor(0.0))) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.233695, abs=1e-6)


def test_crps_gaussian_scales_with_sd_and_matches_the_integral():
    # CRPS(N(mu, s), y) = s CRPS(N(0, 1), (y - mu) / s), and = integral (F(x) - 1{x >= y})^2 dx
    y, mu, s = 1.3, 0.2, 2.0
    got = float(crps_gaussian(torch.tensor(mu), s, torch.tensor(y)))
    assert got == pytest.approx(s * float(crps_gaussian(torch.tensor(0.0), 1.0, torch.tensor((y - mu) / s))))
    x = torch.linspace(-30, 30, 600_001, dtype=torch.float64)
    cdf = torch.distributions.Normal(mu, s).cdf(x)
    integral = torch.trapezoid((cdf - (x >= y).double()) ** 2, x)
    assert got == pytest.approx(float(integral), abs=1e-4)


def test_crps_of_a_mixture_matches_the_integral_and_reduces_to_one_gaussian():
    means = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64).view(3, 1, 1)
    scales = torch.tensor([0.5, 1.0, 0.3], dtype=torch.float64).view(3, 1, 1)
    y = torch.tensor([[0.7]], dtype=torch.float64)
    got = float(crps_gaussian_mixture(means, scales, y))
    x = torch.linspace(-30, 30, 600_001, dtype=torch.float64)
    cdf = torch.distributions.Normal(means.view(3, 1), scales.view(3, 1)).cdf(x).mean(0)
    assert got == pytest.approx(float(torch.trapezoid((cdf - (x >= 0.7).double()) ** 2, x)), abs=1e-4)
    one = crps_gaussian_mixture(means[:1], scales[:1], y)
    assert float(one) == pytest.approx(float(crps_gaussian(torch.tensor(-1.0), 0.5, y)), rel=1e-12)


def test_crps_of_samples_by_hand():
    # samples {0, 1}, y = 0: mean |x - y| = 1/2, (1 / 2 M^2) sum |x_i - x_j| = (1/8) * 2 = 1/4
    samples = torch.tensor([0.0, 1.0]).view(2, 1, 1)
    assert float(crps_samples(samples, torch.tensor([[0.0]]))) == pytest.approx(0.25)
    # one sample: |x - y|
    assert float(crps_samples(torch.tensor([[[2.0]]]), torch.tensor([[-1.0]]))) == pytest.approx(3.0)
    # pairwise by brute force on random samples
    draws = torch.randn(9, 4, 2, dtype=torch.float64)
    y = torch.randn(4, 2, dtype=torch.float64)
    brute = (draws - y).abs().mean(0) - 0.5 * (draws.unsqueeze(0) - draws.unsqueeze(1)).abs().mean((0, 1))
    assert torch.allclose(crps_samples(draws, y), brute)
    # a mixture of near-point masses is the sample CRPS
    assert torch.allclose(crps_gaussian_mixture(draws, 1e-9, y), brute, atol=1e-7)


def test_quantiles_by_bisection():
    means = torch.zeros(1, 1, 1)
    assert float(mixture_quantile(means, 1.0, 0.95)) == pytest.approx(1.6448536269514722, abs=1e-10)
    symmetric = torch.tensor([-1.0, 1.0]).view(2, 1, 1)
    assert float(mixture_quantile(symmetric, 0.5, 0.5)) == pytest.approx(0.0, abs=1e-12)
    lower, upper = central_interval(symmetric, 0.5, 0.9)
    assert float(lower) == pytest.approx(-float(upper), abs=1e-10)
    level_at_upper = mixture_cdf(symmetric, 0.5, upper.float())
    assert float(level_at_upper) == pytest.approx(0.95, abs=1e-6)


def test_a_perfect_gaussian_is_calibrated_within_binomial_error():
    generator = torch.Generator().manual_seed(0)
    n = 20_000
    mean = torch.randn(1, n, 1, generator=generator, dtype=torch.float64)
    sd = 0.1 + torch.rand(1, n, 1, generator=generator, dtype=torch.float64)
    y = mean[0] + sd[0] * torch.randn(n, 1, generator=generator, dtype=torch.float64)
    result = regression_calibration(mean, sd, y)
    for level in (50, 90, 95):
        p = level / 100
        assert result[f"coverage_{level}"] == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n))
        # width of a Gaussian central interval: 2 z sd
        z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor((1 + p) / 2)).item()
        assert result[f"width_{level}"] == pytest.approx(2 * z * float(sd.mean()), rel=1e-6)
    assert result["qce"] < 0.01
    assert result["sharpness"] == pytest.approx(float(sd.mean()), rel=1e-9)
    # the mean CRPS of a calibrated N(mu, sd) is E[sd] / sqrt(pi) (E over y of the closed form)
    assert result["crps"] == pytest.approx(float(sd.mean()) / math.sqrt(math.pi), rel=0.02)
    pit = pit_values(mean, sd, y).view(-1)
    counts = torch.histc(pit, bins=10, min=0, max=1)
    assert (counts - n / 10).abs().max() < 5 * math.sqrt(n / 10)  # uniform PIT


def test_an_overconfident_predictive_under_covers():
    generator = torch.Generator().manual_seed(1)
    y = torch.randn(5000, 1, generator=generator)
    result = regression_calibration(torch.zeros(1, 5000, 1), 0.5, y)
    # P(|Y| <= 0.5 z_{0.95}) for Y ~ N(0, 1)
    expected = 2 * torch.distributions.Normal(0.0, 1.0).cdf(torch.tensor(0.5 * 1.959964)).item() - 1
    assert result["coverage_95"] == pytest.approx(expected, abs=0.02)
    assert result["qce"] > 0.1


def test_quantile_calibration_error_by_hand():
    pit = torch.tensor([0.1, 0.2, 0.3, 0.9])
    # levels 0.25, 0.5, 0.75: observed 2/4, 3/4, 3/4 -> gaps 0.25, 0.25, 0.0
    assert quantile_calibration_error(pit, (0.25, 0.5, 0.75)) == pytest.approx(0.5 / 3)
    with pytest.raises(ValueError, match=r"quantile level must be a number in \(0, 1\), got 1.0"):
        quantile_calibration_error(pit, (0.5, 1.0))
    with pytest.raises(ValueError, match=r"pit values must lie in \[0, 1\]"):
        quantile_calibration_error(torch.tensor([1.5]))


def test_heteroscedastic_noise_in_the_metrics():
    means = torch.tensor([[[0.0], [1.0]], [[0.2], [1.4]]])  # (S=2, N=2, D=1)
    scales = torch.tensor([[[0.5], [1.0]], [[1.5], [2.0]]])
    targets = torch.tensor([[0.1], [0.0]])
    # sd_n = sqrt(var_s(means) + mean_s(scale^2))
    sd = [math.sqrt(0.01 + (0.25 + 2.25) / 2), math.sqrt(0.04 + (1 + 4) / 2)]
    assert sharpness(means, scales) == pytest.approx(sum(sd) / 2, rel=1e-6)
    metrics = regression_metrics(means, scales, targets)
    log_mix = [
        math.log(0.5 * sum(math.exp(-0.5 * ((t - m) / s) ** 2) / (s * math.sqrt(2 * math.pi)) for m, s in pairs))
        for t, pairs in [(0.1, [(0.0, 0.5), (0.2, 1.5)]), (0.0, [(1.0, 1.0), (1.4, 2.0)])]
    ]
    assert metrics["nll"] == pytest.approx(-sum(log_mix) / 2, rel=1e-6)
    with pytest.raises(ValueError, match=r"noise_scale must be a scalar or a tensor of the means' shape"):
        regression_metrics(means, scales[0], targets)
    with pytest.raises(ValueError, match="noise_scale must be finite and > 0 everywhere; found 0.0"):
        regression_metrics(means, scales * 0, targets)


def test_student_t_metrics_by_hand():
    means, targets, df = torch.zeros(1, 1, 1), torch.tensor([[2.0]]), 3.0
    metrics = regression_metrics(means, 0.5, targets, df=df)
    log_pdf = float(torch.distributions.StudentT(df, 0.0, 0.5).log_prob(torch.tensor(2.0)))
    assert metrics["nll"] == pytest.approx(-log_pdf, rel=1e-6)
    # sd = 0.5 sqrt(3): |2| <= 2 sd = 1.73 fails
    assert metrics["coverage"] == 0.0
    with pytest.raises(ValueError, match="df must be a finite number > 0"):
        regression_metrics(means, 0.5, targets, df=0.0)
