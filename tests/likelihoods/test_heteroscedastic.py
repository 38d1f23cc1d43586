"""HeteroscedasticGaussian and StudentT: log densities by hand, shapes, errors, and a BNN that predicts with them."""

import math

import pytest
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.likelihoods import HeteroscedasticGaussian, NoiseScale, ScaleLink, StudentT, split_mean_scale
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior


def _normal_log_pdf(y, mean, sd):
    return -0.5 * ((y - mean) / sd) ** 2 - math.log(sd) - 0.5 * math.log(2 * math.pi)


def _student_log_pdf(y, df, mean, scale):
    z = (y - mean) / scale
    return (
        math.lgamma((df + 1) / 2)
        - math.lgamma(df / 2)
        - 0.5 * math.log(df * math.pi)
        - math.log(scale)
        - (df + 1) / 2 * math.log1p(z * z / df)
    )


def _softplus(r):
    return math.log1p(math.exp(r))


def test_heteroscedastic_log_likelihood_by_hand():
    output = torch.tensor([[0.0, 0.0], [1.0, -2.0], [2.0, 1.5]])  # (B, 2): mean, raw scale
    y = torch.tensor([[0.5], [1.0], [0.0]])
    likelihood = HeteroscedasticGaussian(dataset_size=6, min_scale=0.01)
    expected = [
        _normal_log_pdf(t, m, 0.01 + _softplus(r)) for (m, r), (t,) in zip(output.tolist(), y.tolist(), strict=True)
    ]
    assert likelihood.log_likelihood(output, y).tolist() == pytest.approx(expected, rel=1e-5)
    trace = poutine.trace(likelihood).get_trace(output, y)
    trace.compute_log_prob()
    assert trace.nodes["obs"]["log_prob_sum"].item() == pytest.approx(2 * sum(expected), rel=1e-5)  # N/B = 2


def test_exp_link_is_a_log_scale_head():
    output = torch.tensor([[0.3, math.log(0.5)]])
    means, scales = split_mean_scale(output, link="exp", min_scale=1e-3)
    assert means.item() == pytest.approx(0.3)
    assert scales.item() == pytest.approx(0.501)
    likelihood = HeteroscedasticGaussian(1, link=ScaleLink.EXP, min_scale=1e-3)
    got = likelihood.log_likelihood(output, torch.tensor([[1.0]])).item()
    assert got == pytest.approx(_normal_log_pdf(1.0, 0.3, 0.501), rel=1e-5)


@pytest.mark.parametrize("min_scale", [-1.0, 0.0, float("nan"), float("inf"), True])
def test_split_mean_scale_refuses_a_floor_that_is_not_positive(min_scale):
    """A floor of -1 gave the scale -1 + softplus(-50) = -1 (and NaN one NaN); the constructors already refused."""
    output = torch.tensor([[0.0, -50.0]])
    with pytest.raises(ValueError) as info:
        split_mean_scale(output, min_scale=min_scale)
    assert str(info.value) == f"split_mean_scale min_scale must be a finite number > 0, got {min_scale!r}"
    _, scales = split_mean_scale(output, link="exp", min_scale=0.25)  # 0.25 + exp(-50)
    assert scales.item() == 0.25


def test_two_outputs_per_target_and_the_floor():
    output = torch.randn(7, 5, 6)  # (S, B, 2 D) with D = 3
    output[..., 3:] = -1e4  # a scale the network drives to 0 stays at the floor
    fields = HeteroscedasticGaussian(10, min_scale=0.05).prediction_fields(output)
    assert fields["means"].shape == fields["noise_scale"].shape == (7, 5, 3)
    assert torch.equal(fields["means"], output[..., :3])
    assert torch.allclose(fields["noise_scale"], torch.full((7, 5, 3), 0.05))


def test_errors_name_the_bad_value():
    likelihood = HeteroscedasticGaussian(10)
    with pytest.raises(ValueError, match="outputs 2 D values .* got 3"):
        likelihood.distribution(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"targets of shape \(4, 2\) do not match the 1 means"):
        likelihood.check_targets(torch.zeros(4, 2), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="min_scale must be a finite number > 0, got 0"):
        HeteroscedasticGaussian(10, min_scale=0)
    with pytest.raises(ValueError, match="^unknown scale link 'relu'; expected one of 'softplus', 'exp'$"):
        HeteroscedasticGaussian(10, link="relu")
    with pytest.raises(ValueError, match="^unknown Student-t noise scale 'free'"):
        StudentT(10, df=3.0, noise="free")
    with pytest.raises(ValueError, match="StudentT df must be a finite number > 0, got -1"):
        StudentT(10, df=-1)


@pytest.mark.parametrize("noise", list(NoiseScale))
def test_student_t_log_likelihood_by_hand(noise):
    df = 4.0
    likelihood = StudentT(10, df=df, scale=0.7, noise=noise, min_scale=0.01)
    if noise is NoiseScale.PREDICTED:
        output = torch.tensor([[0.5, 0.2], [-1.0, -0.3]])
        scales = [0.01 + _softplus(0.2), 0.01 + _softplus(-0.3)]
    else:
        output = torch.tensor([[0.5], [-1.0]])
        scales = [0.7, 0.7]
    y = torch.tensor([[1.5], [-1.2]])
    expected = [_student_log_pdf(t, df, m, s) for t, m, s in zip([1.5, -1.2], [0.5, -1.0], scales, strict=True)]
    assert likelihood.log_likelihood(output, y).tolist() == pytest.approx(expected, rel=1e-5)
    assert [n for n, _ in likelihood.named_parameters()] == (["log_scale"] if noise is NoiseScale.LEARNED else [])
    fields = likelihood.prediction_fields(output.expand(3, -1, -1))
    assert fields["means"].shape == (3, 2, 1)
    assert fields["noise_df"].item() == df
    assert fields["noise_scale"].shape == ((3, 2, 1) if noise is NoiseScale.PREDICTED else ())


@pytest.mark.parametrize(
    "likelihood",
    [HeteroscedasticGaussian(40), StudentT(40, df=5.0, noise="predicted"), StudentT(40, df=5.0, scale=0.5)],
    ids=["hetero", "student-predicted", "student-fixed"],
)
def test_a_bnn_trains_and_predicts_with_it(likelihood):
    torch.manual_seed(0)
    outputs = 2 if getattr(likelihood, "predicts_scale", True) else 1
    bnn = BNN(nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, outputs)), NormalPrior(), likelihood)
    x, y = torch.randn(40, 1), torch.randn(40, 1)
    guide = AutoNormal(bnn, init_scale=0.1)
    guide(x, y)
    prediction = predict(bnn, guide, (x, y), num_samples=5, batch_size=16)
    assert prediction.means.shape == (5, 40, 1)
    assert prediction.log_likelihood.shape == (5, 40)
    split = prediction.variance_split()
    assert torch.allclose(prediction.predictive_std().double() ** 2, split.total, rtol=1e-5)
    metrics = prediction.metrics()
    assert set(metrics) == {"rmse", "nll", "coverage"}
    # the metrics' mixture NLL is the likelihood's own: -mean_n log mean_s p(y_n | sample s)
    direct = -(torch.logsumexp(prediction.log_likelihood.double(), 0) - math.log(5)).mean()
    assert metrics["nll"] == pytest.approx(float(direct), rel=1e-5)
