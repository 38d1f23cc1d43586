"""Split conformal regression against its oracles: the finite-sample guarantee over many exchangeable splits for
both scores (and a broken quantile that fails it), and intervals by hand."""

from __future__ import annotations

import math

import pytest
import torch

from pyro_bnn.evaluation import RegressionScore, calibrate_regressor, interval_metrics
from pyro_bnn.evaluation import conformal_regression as regression_module
from pyro_bnn.predict import Prediction

ALPHA = 0.1
N_CAL = 20  # E[coverage] = ceil(21 * 0.9) / 21 = 19/21 = 0.905; without the n + 1 correction 18/21 = 0.857
N_TEST = 50
TRIALS = 1000
# As for classification (tests/evaluation/test_conformal.py): the mean coverage over 1000 splits has sd <= 0.0024;
# 0.01 is four of them, and the broken quantile misses 1 - alpha by 0.043.
TOLERANCE = 0.01
NOISE = 0.2


def _split(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A heteroscedastic data set the model gets wrong: targets sin(x) + N(0, (0.1 + 0.3|x|)^2), and four sampled
    means 0.8 sin(x) + 0.3 N(0, 1) with a noise scale of 0.2 everywhere."""
    n = N_CAL + N_TEST
    x = 4 * torch.rand(n, 1, generator=generator, dtype=torch.float64) - 2
    y = torch.sin(x) + (0.1 + 0.3 * x.abs()) * torch.randn(n, 1, generator=generator, dtype=torch.float64)
    means = 0.8 * torch.sin(x) + 0.3 * torch.randn(4, n, 1, generator=generator, dtype=torch.float64)
    return means, y


def _prediction(means, y=None) -> Prediction:
    return Prediction(means=means, noise_scale=torch.tensor(NOISE), targets=y)


def _mean_coverage(score: str) -> float:
    generator = torch.Generator().manual_seed(11)
    total = 0.0
    for _ in range(TRIALS):
        means, y = _split(generator)
        regressor = calibrate_regressor(_prediction(means[:, :N_CAL], y[:N_CAL]), ALPHA, score=score)
        lower, upper = regressor.intervals(_prediction(means[:, N_CAL:]))
        total += interval_metrics(lower, upper, y[N_CAL:]).coverage
    return total / TRIALS


def _within_guarantee(coverage: float) -> bool:
    return 1 - ALPHA - TOLERANCE <= coverage <= 1 - ALPHA + 1 / (N_CAL + 1) + TOLERANCE


@pytest.mark.parametrize("score", [s.value for s in RegressionScore])
def test_mean_coverage_over_exchangeable_splits_lies_in_the_guaranteed_band(score):
    coverage = _mean_coverage(score)
    assert _within_guarantee(coverage), coverage
    # Scores without ties give exactly the rank's expectation, 19/21: a quantile one rank too high (20/21 = 0.952)
    # stays inside the band above, not here.
    assert abs(coverage - math.ceil((N_CAL + 1) * (1 - ALPHA)) / (N_CAL + 1)) <= TOLERANCE, coverage


def test_a_quantile_without_the_n_plus_1_correction_fails_the_same_check(monkeypatch):
    def broken(scores, alpha):
        return float(torch.sort(scores).values[math.ceil(scores.numel() * (1 - alpha)) - 1])

    monkeypatch.setattr(regression_module, "conformal_quantile", broken)
    coverage = _mean_coverage("absolute")
    assert not _within_guarantee(coverage), coverage


def test_intervals_by_hand():
    # two samples per point: means (0, 2) and (1, 1); noise 0.5. Mean 1 for both; sd sqrt(1 + 0.25), sqrt(0.25)
    means = torch.tensor([[[0.0], [1.0]], [[2.0], [1.0]]], dtype=torch.float64)
    noise = torch.tensor(0.5)
    calibration = Prediction(means=means, noise_scale=noise, targets=torch.tensor([[3.0], [0.0]]))
    # absolute residuals 2 and 1; alpha 0.5 takes ceil(3 * 0.5) = 2nd smallest: 2
    absolute = calibrate_regressor(calibration, 0.5, score="absolute")
    assert absolute.quantile == 2.0
    lower, upper = absolute.intervals(Prediction(means=means, noise_scale=noise))
    assert lower.flatten().tolist() == [-1.0, -1.0] and upper.flatten().tolist() == [3.0, 3.0]
    # normalised: 2 / sqrt(1.25) = 1.789 and 1 / 0.5 = 2: the quantile is 2, so the intervals are 1 ± 2 sd
    normalized = calibrate_regressor(calibration, 0.5, score="normalized")
    assert normalized.quantile == pytest.approx(2.0)
    lower, upper = normalized.intervals(Prediction(means=means, noise_scale=noise))
    assert upper.flatten().tolist() == pytest.approx([1 + 2 * math.sqrt(1.25), 2.0])
    metrics = interval_metrics(lower, upper, torch.tensor([[3.0], [0.0]]))
    assert metrics.coverage == 1.0 and metrics.mean_width == pytest.approx((4 * math.sqrt(1.25) + 2.0) / 2)


def test_several_outputs_take_the_worst_output_and_cover_jointly():
    means = torch.zeros(1, 3, 2, dtype=torch.float64)
    targets = torch.tensor([[0.5, -2.0], [1.0, 0.1], [-0.2, 0.3]], dtype=torch.float64)
    regressor = calibrate_regressor(Prediction(means=means, noise_scale=1.0, targets=targets), 0.25, score="absolute")
    assert regressor.quantile == 2.0  # point scores 2.0, 1.0, 0.3; ceil(4 * 0.75) = 3rd smallest
    lower, upper = regressor.intervals(Prediction(means=means, noise_scale=1.0))
    assert interval_metrics(lower, upper, targets + torch.tensor([[0.0, -0.5], [0, 0], [0, 0]])).coverage == 2 / 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: calibrate_regressor(p, 1.0), r"alpha must be a number in \(0, 1\), got 1.0"),
        (lambda p: calibrate_regressor(p, 0.01), "4 calibration points are too few for alpha=0.01"),
        (lambda p: calibrate_regressor(p, 0.5, score="quantile"), "unknown regression score 'quantile'"),
        (lambda p: calibrate_regressor(Prediction(probs=torch.ones(1, 4, 1)), 0.5), "needs a regression prediction"),
        (lambda p: calibrate_regressor(Prediction(means=p.means, noise_scale=p.noise_scale), 0.5), "needs targets"),
        (lambda p: interval_metrics(torch.ones(4, 1), torch.zeros(4, 1), torch.zeros(4, 1)), "upper end must be"),
        (lambda p: interval_metrics(torch.zeros(0, 1), torch.zeros(0, 1), torch.zeros(0, 1)), "got N = 0"),
        (lambda p: interval_metrics(torch.full((4, 1), math.nan), torch.ones(4, 1), p.targets), "lower holds NaN"),
        (lambda p: interval_metrics(p.targets.numpy(), p.targets, p.targets), "lower must be a torch.Tensor"),
        # Student-t noise with df <= 2 has no finite sd: the normalized score would be 0 and its intervals NaN
        (
            lambda p: calibrate_regressor(
                Prediction(means=p.means, noise_scale=0.5, noise_df=1.0, targets=p.targets), 0.5
            ),
            r"infinite for Student-t noise with df = 1 <= 2; use score='absolute'",
        ),
    ],
)
def test_bad_input_is_one_line(call, message):
    prediction = Prediction(means=torch.randn(2, 4, 1), noise_scale=torch.tensor(0.1), targets=torch.randn(4, 1))
    with pytest.raises(ValueError, match=message) as info:
        call(prediction)
    assert "\n" not in str(info.value)


def test_student_t_noise_with_df_at_most_2_keeps_the_absolute_score():
    """The absolute score needs no sd: its quantile is the ceil((n + 1)(1 - alpha))-th smallest |y - mean| whatever
    the noise, and its intervals are mean +- q (here: 3 points, alpha 0.5, the 2nd smallest of 0.5, 1, 2)."""
    means = torch.zeros(2, 3, 1)
    prediction = Prediction(means=means, noise_scale=0.5, noise_df=2.0, targets=torch.tensor([[1.0], [-0.5], [2.0]]))
    regressor = calibrate_regressor(prediction, 0.5, score="absolute")
    assert regressor.quantile == 1.0
    lower, upper = regressor.intervals(prediction)
    assert torch.equal(lower, torch.full((3, 1), -1.0, dtype=lower.dtype)) and torch.equal(upper, -lower)
    with pytest.raises(ValueError, match="df = 2 <= 2"):
        calibrate_regressor(prediction, 0.5)
