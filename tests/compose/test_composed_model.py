"""ComposedModel: a user's Pyro model around random functions, trained by the library's Trainer and predicted into a
Prediction."""

from __future__ import annotations

import math
from functools import partial

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn import BNN
from pyro_bnn.compose import ComposedModel, RandomFunction, model_guide
from pyro_bnn.infer import ObjectiveOptions, RuntimeOptions, Trainer
from pyro_bnn.infer.trainable import TrainableModel
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior
from pyro_bnn.sites import LIKELIHOOD_TAG

N, PRIOR_SCALE, SIGMA = 20, 0.5, 1.0


def _regression_data(n: int = N, seed: int = 0):
    """Orthogonal input columns of squared norm n, orthogonal to the intercept: the posterior of (w_1, w_2, b) under
    N(0, s0^2 I) is N(X^T y / p, I / p), p = 1/s0^2 + n/sigma^2, which a mean-field guide matches exactly."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.cat([torch.ones(n, 1), torch.randn(n, 2, generator=g)], 1))
    x = q[:, 1:] * n**0.5
    return x, x @ torch.tensor([1.0, -2.0]) + 0.3 + SIGMA * torch.randn(n, generator=g)


def _linear_model():
    torch.manual_seed(0)
    f = RandomFunction(BNN(nn.Linear(2, 1), NormalPrior(0.0, PRIOR_SCALE), Gaussian(1)), prefix="f")

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, SIGMA), obs=y)

    return f, model


@pytest.fixture(scope="module")
def trained_regression():
    """The Bayesian linear regression trained by the Trainer on minibatches of 5 of the 20 points."""
    f, model = _linear_model()
    composed = ComposedModel(model, f, dataset_size=N)
    guide = model_guide(model, f, guide="flat:0.1", rest=None)
    x, y = _regression_data()
    trainer = Trainer(
        composed,
        guide,
        optim=pyro.optim.ClippedAdam({"lr": 0.05, "lrd": 0.999}),
        objective=ObjectiveOptions(objective="trace", num_particles=8, vectorize_particles=True),
        runtime=RuntimeOptions(seed=0, progress=False),
    )
    loader = DataLoader(TensorDataset(x, y), batch_size=5, shuffle=True)
    history = trainer.fit(loader, 150, val_loader=DataLoader(TensorDataset(x, y), batch_size=10))
    return composed, guide, trainer, history, (x, y)


# ------------------------------------------------------------------------------------------ the oracles
def test_the_trainer_reaches_the_conjugate_posterior_from_minibatches(trained_regression):
    """The exact posterior is N(X^T y / 24, I / 24) (sd 0.204). Measured: largest mean error 0.017, sds
    0.211-0.225 (the last minibatch steps' noise). Without the N/B scaling of the data plate each minibatch of 5
    would be read as the whole data set: precision 4 + 5, sds 0.333 (63 % off)."""
    _, guide, _, _, (x, y) = trained_regression
    precision = 1 / PRIOR_SCALE**2 + N / SIGMA**2
    exact_mean = torch.cat([x, torch.ones(N, 1)], 1).T @ y / precision
    loc_scale = guide[0].loc_scale()
    mean = torch.cat([loc_scale["f.weight"][0].reshape(-1), loc_scale["f.bias"][0]])
    sd = torch.cat([loc_scale["f.weight"][1].reshape(-1), loc_scale["f.bias"][1]])
    assert (mean - exact_mean).abs().max() < 0.04
    assert ((sd / precision**-0.5) - 1).abs().max() < 0.15


def test_the_prediction_is_each_draws_observation_distribution(trained_regression):
    """Every draw's mean is the network under that draw's weights, its noise the model's sigma, and the log
    likelihood the Normal density of the targets computed by hand; the Trainer's validation reads the same
    predictive."""
    composed, guide, _, history, (x, y) = trained_regression
    pyro.set_rng_seed(1)
    prediction = composed.predict(guide, [(x, y)], num_samples=300)
    assert prediction.means.shape == (300, N, 1) and prediction.noise_scale.shape == (300, N, 1)
    assert prediction.log_likelihood.shape == (300, N) and prediction.targets.shape == (N, 1)
    torch.testing.assert_close(prediction.noise_scale, torch.full((300, N, 1), SIGMA))
    by_hand = dist.Normal(prediction.means[..., 0], SIGMA).log_prob(y)
    torch.testing.assert_close(prediction.log_likelihood, by_hand)
    # the predictive mean is the network at the posterior mean: features @ loc, within Monte Carlo error
    loc = {k: v[0] for k, v in guide[0].loc_scale().items()}
    at_mean = x @ loc["f.weight"].reshape(-1) + loc["f.bias"]
    sd_of_mean = (x.pow(2).sum(1) + 1).sqrt() * 0.23 / 300**0.5  # largest posterior sd 0.225, 300 draws
    assert ((prediction.means.mean(0)[:, 0] - at_mean).abs() < 4 * sd_of_mean).all()
    metrics = prediction.metrics()
    assert set(metrics) >= {"rmse", "nll", "coverage"}
    assert abs(history[-1]["val_nll"] - metrics["nll"]) < 0.05  # 16 draws in the Trainer's validation


def test_the_data_plate_is_scaled_by_n_over_b_and_the_observation_is_the_data_term():
    f, _ = _linear_model()

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("y", dist.Normal(mean + z, 1.0), obs=y)

    x, y = _regression_data()
    trace = poutine.trace(ComposedModel(model, f, dataset_size=N)).get_trace(x[:5], y[:5])
    assert trace.nodes["y"]["scale"] == 4.0 and trace.nodes["z"]["scale"] == 4.0  # N / B = 20 / 5
    assert trace.nodes["f.weight"]["scale"] == 1.0
    assert trace.nodes["y"]["infer"][LIKELIHOOD_TAG] and LIKELIHOOD_TAG not in trace.nodes["z"]["infer"]

    def subsampled(x, y=None):  # a plate declared at its full size: Pyro scales it, once
        mean = f(x).squeeze(-1)
        with pyro.plate("data", N, subsample=torch.arange(x.shape[0])):
            pyro.sample("y", dist.Normal(mean, 1.0), obs=y)

    trace = poutine.trace(ComposedModel(subsampled, f, dataset_size=N)).get_trace(x[:5], y[:5])
    trace.compute_log_prob()
    by_hand = dist.Normal(trace.nodes["y"]["fn"].loc, 1.0).log_prob(y[:5]).sum() * 4
    torch.testing.assert_close(trace.nodes["y"]["log_prob_sum"], by_hand)


def test_predict_reads_a_pair_or_a_loader_and_refuses_other_data_in_one_line(trained_regression):
    composed, guide, _, _, (x, y) = trained_regression
    pyro.set_rng_seed(2)
    from_pair = composed.predict(guide, (x, y), num_samples=5)
    pyro.set_rng_seed(2)
    from_loader = composed.predict(guide, [(x, y)], num_samples=5)
    torch.testing.assert_close(from_pair.means, from_loader.means)
    pyro.set_rng_seed(2)
    from_iterator = composed.predict(guide, iter([(x, y)]), num_samples=5)  # read once, as before
    torch.testing.assert_close(from_iterator.means, from_loader.means)
    for data, match in [
        ([x, y], r"two tensors of shapes \(20, 2\) and \(20,\), read as two input batches"),
        (x, r"predict needs \(x, y\) batches"),
        ((x, y.tolist()), "the targets y are a list"),
    ]:
        with pytest.raises(ValueError, match=match) as error:
            composed.predict(guide, data, num_samples=5)
        assert "\n" not in str(error.value)


def test_a_function_guide_predicts_as_the_module_it_calls(trained_regression):
    """A function guide has no parameters(): predict raised AttributeError looking for its device. It now runs where
    the model's tensors are and draws exactly what the guide module it wraps draws under the same seed."""
    composed, guide, _, _, (x, y) = trained_regression
    pyro.set_rng_seed(3)
    from_module = composed.predict(guide, (x, y), num_samples=5)
    pyro.set_rng_seed(3)
    from_function = composed.predict(lambda x, y=None: guide(x, y), (x, y), num_samples=5)
    assert from_function.means.shape == (5, N, 1)
    torch.testing.assert_close(from_function.means, from_module.means, rtol=0, atol=0)
    torch.testing.assert_close(from_function.log_likelihood, from_module.log_likelihood, rtol=0, atol=0)


def test_a_classifier_is_predicted_as_class_probabilities():
    """Two separable blobs, a composed logistic model with a latent temperature: probabilities (S, N, C) that sum to
    one, the log likelihood the log probability of each label, and the Trainer's validation accuracy."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(40) % 2
    x = torch.randn(40, 2, generator=g) + 3.0 * (y.unsqueeze(-1) * 2 - 1)
    torch.manual_seed(0)
    f = RandomFunction(BNN(nn.Linear(2, 2), NormalPrior(0.0, 1.0), Gaussian(1)), prefix="f")

    def model(x, y=None):
        temperature = pyro.sample("temperature", dist.LogNormal(0.0, 0.5))
        logits = f(x) / temperature.unsqueeze(-1)  # (S, 1, 1) against (S, B, C) when drawn S times
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Categorical(logits=logits), obs=y)

    composed = ComposedModel(model, f, dataset_size=40)
    guide = model_guide(model, f, guide="flat:0.01")
    optim = pyro.optim.ClippedAdam({"lr": 0.05})
    trainer = Trainer(composed, guide, optim=optim, objective="trace", runtime=RuntimeOptions(seed=0, progress=False))
    loader = DataLoader(TensorDataset(x, y), batch_size=20)
    history = trainer.fit(loader, 40, val_loader=loader)  # its initial network calls every point wrong
    prediction = composed.predict(guide, loader, num_samples=50)
    assert prediction.probs.shape == (50, 40, 2)
    torch.testing.assert_close(prediction.probs.sum(-1), torch.ones(50, 40))
    by_hand = prediction.probs.gather(-1, y.expand(50, 40).unsqueeze(-1)).squeeze(-1).log()
    torch.testing.assert_close(prediction.log_likelihood, by_hand)
    assert history[0]["val_accuracy"] < 0.5 and history[-1]["val_accuracy"] == 1.0
    assert prediction.metrics()["accuracy"] == 1.0


def _bimodal(n: int, seed: int):
    """y = +x or -x, with equal odds, plus N(0, 0.1^2) noise; x ~ U(-2, 2)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 4 - 2
    sign = torch.randint(0, 2, (n, 1), generator=g) * 2 - 1
    return x, (sign * x + 0.1 * torch.randn(n, 1, generator=g)).squeeze(-1)


def test_a_latent_input_bnn_learns_a_bimodal_predictive():
    """BNN+LV (Depeweg et al., 2017): y = f(x, z) + N(0, 0.1^2) with a per-example latent input z ~ N(0, 1), on data
    whose y given x is +x or -x. Oracle: no Gaussian predictive can score this data better than the moment-matched
    N(0, x^2 + 0.01) at each x, whose expected NLL is 1.19 (computed below); the composed model's mixture
    predictive must go well below it. Measured over seeds 0-2: test NLL 0.56 / 0.49 / 0.48, with 26 / 24 %, 24 / 29 %,
    21 / 31 % of the draws at x > 1.2 within 0.3 of +x / -x. A 1-32-1 network without z, with a latent noise scale
    instead, ended at 1.62 (measured once, on 160 points)."""
    n = 100
    x, y = _bimodal(n, 0)
    x_test, y_test = _bimodal(400, 1)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
    f = RandomFunction(BNN(net, NormalPrior(0.0, 1.0), Gaussian(1)), prefix="f")

    def model(x, y=None):
        data = pyro.plate("data", x.shape[0])
        with data:
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
        mean = f(torch.cat([x, z.unsqueeze(-1)], -1)).squeeze(-1)
        with data:
            pyro.sample("y", dist.Normal(mean, 0.1), obs=y)

    composed = ComposedModel(model, f, dataset_size=n, parallel_draws=False)  # z varies the inputs per draw
    guide = model_guide(model, f, guide="flat:0.01", rest=partial(AutoNormal, init_scale=1.0))
    trainer = Trainer(
        composed,
        guide,
        optim=pyro.optim.ClippedAdam({"lr": 0.03, "lrd": 0.999}),
        objective="trace",
        runtime=RuntimeOptions(seed=0, progress=False),
    )
    trainer.fit(DataLoader(TensorDataset(x, y), batch_size=n), 1500)
    prediction = composed.predict(guide, [(x_test, y_test)], num_samples=200)
    grid = torch.linspace(-2, 2, 40_001)
    gaussian_bound = (0.5 * torch.log(2 * math.pi * (grid**2 + 0.01)) + 0.5).mean().item()
    assert gaussian_bound == pytest.approx(1.189, abs=0.002)
    assert prediction.metrics()["nll"] < 0.8
    right = x_test[:, 0] > 1.2
    means = prediction.means[:, right, 0]
    for mode in (x_test[right, 0], -x_test[right, 0]):
        assert ((means - mode).abs() < 0.3).float().mean() > 0.12


# --------------------------------------------------------------------------------------------- contract
def test_it_is_a_trainable_model_and_checkpoints_round_trip(tmp_path, trained_regression):
    composed, guide, trainer, _, _ = trained_regression
    assert isinstance(composed, TrainableModel)
    path = tmp_path / "checkpoint.pt"
    trainer.save_checkpoint(path)
    before = {k: v.clone() for k, v in guide.state_dict().items()}
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(1.0)
    trainer.load_checkpoint(path)
    for key, value in guide.state_dict().items():
        torch.testing.assert_close(value, before[key])


def test_bad_models_and_inputs_get_one_line_errors():
    f, model = _linear_model()
    x, y = _regression_data()
    with pytest.raises(ValueError, match="RandomFunction"):
        ComposedModel(model, [object()], dataset_size=N)
    with pytest.raises(ValueError, match="dataset_size"):
        ComposedModel(model, f, dataset_size=0)
    composed = ComposedModel(model, f, dataset_size=N)
    with pytest.raises(ValueError, match="one row per input"):
        composed.validate_batch(x, y[:3])
    with pytest.raises(ValueError, match="no site 'obs'"):
        ComposedModel(model, f, dataset_size=N, observation="obs")(x, y)

    def outside(x, y=None):
        mean = f(x).squeeze(-1)
        pyro.sample("y", dist.Normal(mean, 1.0).to_event(1), obs=y)

    with pytest.raises(ValueError, match="not inside the data plate"):
        ComposedModel(outside, f, dataset_size=N)(x, y)

    def bernoulli(x, y=None):
        logits = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Bernoulli(logits=logits), obs=y)

    guide = model_guide(bernoulli, f, rest=None)
    with pytest.raises(ValueError, match="Bernoulli"):
        ComposedModel(bernoulli, f, dataset_size=N).predict(guide, [(x, (y > 0).float())], num_samples=2)
    with pytest.raises(ValueError, match="TrainableModel"):
        Trainer(model, guide)
    with pytest.raises(ValueError, match="takes a built guide module"):
        Trainer(composed, "flat:rel=1,loc=map")


@pytest.mark.parametrize("parallel", [True, False])
def test_a_student_t_observation_keeps_its_degrees_of_freedom_and_refuses_a_latent_one(parallel):
    f, _ = _linear_model()
    x, y = _regression_data()

    def fixed(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.StudentT(4.0, mean, 1.0), obs=y)

    guide = model_guide(fixed, f, rest=None)
    prediction = ComposedModel(fixed, f, dataset_size=N, parallel_draws=parallel).predict(
        guide, [(x, y)], num_samples=3
    )
    assert float(prediction.noise_df) == 4.0 and prediction.means.shape == (3, N, 1)

    def latent(x, y=None):  # one df per draw: a Prediction holds one, so this is refused, not averaged away
        df = pyro.sample("df", dist.Gamma(20.0, 5.0))
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.StudentT(df, mean, 1.0), obs=y)

    guide = model_guide(latent, f)
    composed = ComposedModel(latent, f, dataset_size=N, parallel_draws=parallel)
    with pytest.raises(ValueError, match="one degrees of freedom in every draw"):
        composed.predict(guide, [(x, y)], num_samples=3)
