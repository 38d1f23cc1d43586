"""A BNN inside a user's own Pyro model: prefixed sites, the composed guide against closed-form posteriors, a latent
noise scale and a hierarchical model with one network shared across groups."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.optim import ClippedAdam
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.compose import NetworkGuide, RandomFunction, model_guide, predict_model
from pyro_bnn.diagnostics.arviz_export import draws_to_inference_data, posterior_dataset
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior, name_matches

N, PRIOR_SCALE = 20, 0.5
PARTICLES = 8


def _linear(prefix: str = "f", prior_scale: float = PRIOR_SCALE) -> RandomFunction:
    torch.manual_seed(0)
    return RandomFunction(BNN(nn.Linear(2, 1), NormalPrior(0.0, prior_scale), Gaussian(1)), prefix=prefix)


def _regression_data(sigma: float, n: int = N, seed: int = 0):
    """Inputs with orthogonal columns of squared norm n, orthogonal to the intercept's column of ones, so the
    posterior of (w_1, w_2, b) under a N(0, s0^2 I) prior is isotropic: N(X^T y / p, I / p), p = 1/s0^2 + n/sigma^2
    (a mean-field guide is exact)."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.cat([torch.ones(n, 1), torch.randn(n, 2, generator=g)], 1))
    x = q[:, 1:] * n**0.5
    y = x @ torch.tensor([1.0, -2.0]) + 0.3 + sigma * torch.randn(n, generator=g)
    return x, y


def _fit(model, guide, *args, steps: int, particles: int = PARTICLES, lr: float = 0.1, decay: float = 0.99):
    """Plain Pyro SVI; the learning rate decays 100-fold over 460 steps, so the last values are close to the
    optimum rather than an Adam step away from it."""
    svi = SVI(
        model,
        guide,
        ClippedAdam({"lr": lr, "lrd": decay}),
        Trace_ELBO(num_particles=particles, vectorize_particles=True, max_plate_nesting=1),
    )
    for _ in range(steps):
        svi.step(*args)


# ------------------------------------------------------------------------------------- sites and values
def test_sites_carry_the_prefix_and_the_outputs_are_the_network_under_those_values():
    f = _linear(prefix="net")
    x, _ = _regression_data(1.0)

    def model(x):
        return f(x)

    trace = poutine.trace(model).get_trace(x)
    latents = [name for name, node in trace.nodes.items() if node["type"] == "sample" and not node["is_observed"]]
    assert latents == ["net.weight", "net.bias"] == f.site_names
    values = {name: trace.nodes[f"net.{name}"]["value"] for name in f.bnn.site_names}
    expected = f.bnn.run_network(x, values)
    torch.testing.assert_close(trace.nodes["_RETURN"]["value"], expected)
    torch.testing.assert_close(trace.nodes["net"]["value"], expected)  # the recorded outputs
    # the prior is the BNN's: its log density of the sampled weights
    prior = dist.Normal(0.0, PRIOR_SCALE)
    log_prior = sum(prior.log_prob(v).sum() for v in values.values())
    trace.compute_log_prob()
    assert torch.isclose(trace.nodes["net.weight"]["log_prob_sum"] + trace.nodes["net.bias"]["log_prob_sum"], log_prior)


def test_under_vectorised_particles_the_outputs_line_up_with_the_data_plate():
    f = _linear()
    x, y = _regression_data(1.0)

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, 1.0), obs=y)
        return mean

    with pyro.plate("num_particles_vectorized", 5, dim=-2):
        trace = poutine.trace(model).get_trace(x, y)
    weights = trace.nodes["f.weight"]["value"]
    assert weights.shape == (5, 1, 1, 2)
    assert trace.nodes["_RETURN"]["value"].shape == (5, N)
    for p in range(5):
        values = {name: trace.nodes[f"f.{name}"]["value"][p, 0] for name in f.bnn.site_names}
        torch.testing.assert_close(trace.nodes["_RETURN"]["value"][p], f.bnn.run_network(x, values).squeeze(-1))


def test_a_call_inside_a_plate_is_refused():
    f = _linear()
    x, _ = _regression_data(1.0)

    def model(x):
        with pyro.plate("data", x.shape[0]):
            return f(x)

    with pytest.raises(ValueError, match="global site"):
        poutine.trace(model).get_trace(x)


def test_the_network_guide_starts_at_the_networks_own_weights_and_covers_every_network_site():
    f = _linear()
    x, y = _regression_data(1.0)

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, 1.0), obs=y)

    guide = model_guide(model, f, guide="flat:0.01", rest=None)
    draws = guide(x, y)
    assert sorted(draws) == ["f.bias", "f.weight"]
    assert isinstance(guide[0], NetworkGuide)
    loc_scale = guide[0].loc_scale()
    for name, initial in f.bnn.initial_values().items():
        torch.testing.assert_close(loc_scale[f"f.{name}"][0], initial)
        torch.testing.assert_close(loc_scale[f"f.{name}"][1], torch.full_like(initial, 0.01))
    assert loc_scale["f.weight"][0].abs().min() > 0  # not Pyro's default start at 0


# ------------------------------------------------------------------------------------------- oracles
def test_bayesian_linear_regression_recovers_the_conjugate_posterior():
    """y ~ N(f(x), 1) with f = Linear(2, 1) under N(0, 0.5^2): the flat mean-field guide of the network, trained by
    plain SVI, must reach the exact posterior N(X^T y / 24, I / 24) (sd 0.204). Measured (seed 0): largest mean
    error 0.011, sds 0.2019-0.2030 (within 1.1 %). Ignoring the prior would put the means 20 % off (0.14 and 0.36
    here) and the sds 10 % (0.224); a guide that does not cover the network's sites fails at once."""
    sigma = 1.0
    f = _linear()
    x, y = _regression_data(sigma)

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, sigma), obs=y)

    guide = model_guide(model, f, guide="flat:0.1", rest=None)
    _fit(model, guide, x, y, steps=400)
    precision = 1 / PRIOR_SCALE**2 + N / sigma**2
    features = torch.cat([x, torch.ones(N, 1)], 1)
    exact_mean = features.T @ y / precision
    loc_scale = guide[0].loc_scale()
    mean = torch.cat([loc_scale["f.weight"][0].reshape(-1), loc_scale["f.bias"][0]])
    sd = torch.cat([loc_scale["f.weight"][1].reshape(-1), loc_scale["f.bias"][1]])
    assert (mean - exact_mean).abs().max() < 0.03
    assert ((sd / precision**-0.5) - 1).abs().max() < 0.05


def test_a_latent_noise_scale_is_learned_beside_the_network():
    """sigma ~ LogNormal(0, 1) guided by AutoNormal, the network by the flat guide, 60 points simulated with noise
    0.5. Oracles: the residual standard error of least squares, sqrt(RSS / (n - 3)) = 0.517 (what the posterior of
    sigma concentrates at, its posterior sd being about 0.05), and the true 0.5. Measured: median 0.522, weights
    (0.996, -2.088) against the simulated (1, -2). A sigma left at its prior (median 1) or a network left unfitted
    fails both."""
    f = _linear()
    x, y = _regression_data(0.5, n=60)

    def model(x, y=None):
        sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, sigma), obs=y)

    guide = model_guide(model, f, guide="flat:0.1", rest=AutoNormal)
    _fit(model, guide, x, y, steps=300, particles=4, decay=0.985)
    sigma = guide.median(x, y)["sigma"]
    features = torch.cat([x, torch.ones(x.shape[0], 1)], 1)
    residual = y - features @ torch.linalg.lstsq(features, y.unsqueeze(-1)).solution.squeeze(-1)
    residual_se = (residual.pow(2).sum() / (x.shape[0] - 3)).sqrt()
    loc_scale = guide[0].loc_scale()
    assert abs(sigma.item() - residual_se.item()) < 0.03
    assert abs(sigma.item() - 0.5) < 0.06
    torch.testing.assert_close(loc_scale["f.weight"][0], torch.tensor([[1.0, -2.0]]), atol=0.15, rtol=0)

    draws = predict_model(model, guide, x, num_samples=50)
    assert draws["sigma"].shape == (50,)
    assert draws["f"].shape == (50, 60, 1)
    assert draws["y"].shape == (50, 60)
    assert "data" not in draws  # the plate's subsample site is no draw
    assert draws["f.weight"].shape == (50, 1, 2)
    first = {name: draws[f"f.{name}"][0] for name in f.bnn.site_names}
    torch.testing.assert_close(draws["f"][0], f.bnn.run_network(x, first))
    sequential = predict_model(model, guide, x, num_samples=3, parallel=False)
    with pytest.raises(ValueError, match="num_samples must be an int >= 1, got 2.5"):
        predict_model(model, guide, x, num_samples=2.5)
    assert {name: value.shape[1:] for name, value in sequential.items()} == {
        name: value.shape[1:] for name, value in draws.items()
    }

    # Every site of the composed model goes to ArviZ, the network's weights under their prefixed names.
    idata = draws_to_inference_data({name: value.unsqueeze(0) for name, value in draws.items()}, observed={"y": y})
    posterior = posterior_dataset(idata)
    assert {"sigma", "f", "y", "f.weight", "f.bias"} <= set(posterior.data_vars)
    assert posterior["f.weight"].shape == (1, 50, 1, 2)
    assert float(posterior["sigma"].mean()) == pytest.approx(float(draws["sigma"].mean()), rel=1e-6)


def test_a_hierarchical_model_shares_one_network_across_groups_and_recovers_the_offsets():
    """y = f(x) + b_g + noise for 3 groups, one BNN f (1-8-1 tanh) shared by all, b_g ~ N(0, 1) per group. The
    network's output bias and the offsets share a common shift, so the offsets are compared centred: simulated
    (-1.2, 0.3, 0.9), which sum to 0. Measured (seed 0): fitted centred offsets
    (-1.181, 0.287, 0.894), largest error 0.020; offsets left at their prior (0) would be 1.2 off."""
    groups, per_group = 3, 30
    offsets = torch.tensor([-1.2, 0.3, 0.9])
    g = torch.Generator().manual_seed(1)
    x = torch.rand(groups * per_group, 1, generator=g) * 4 - 2
    group = torch.arange(groups).repeat_interleave(per_group)
    y = torch.tanh(x.squeeze(-1)) + offsets[group] + 0.1 * torch.randn(groups * per_group, generator=g)
    torch.manual_seed(0)
    f = RandomFunction(
        BNN(nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1)), NormalPrior(0.0, 1.0), Gaussian(1)),
        prefix="f",
    )

    def model(x, group, y=None):
        with pyro.plate("groups", groups):
            b = pyro.sample("b", dist.Normal(0.0, 1.0))
        mean = f(x).squeeze(-1) + b[..., group]
        sigma = pyro.sample("sigma", dist.LogNormal(-1.0, 1.0))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, sigma), obs=y)

    guide = model_guide(model, f, guide="flat:0.01", rest=AutoNormal)
    _fit(model, guide, x, group, y, steps=200, particles=4, decay=0.98)
    fitted = guide.median(x, group, y)["b"]
    torch.testing.assert_close(fitted - fitted.mean(), offsets - offsets.mean(), atol=0.1, rtol=0)


def test_two_networks_in_one_model_keep_their_own_sites_and_guides():
    f, g = _linear("f"), _linear("g", prior_scale=1.0)
    x, y = _regression_data(1.0)

    def model(x, y=None):
        mean = f(x).squeeze(-1) * g(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, 1.0), obs=y)

    guide = model_guide(model, [f, g], rest=None)
    assert sorted(guide(x, y)) == ["f.bias", "f.weight", "g.bias", "g.weight"]
    assert guide[0].guide is not guide[1].guide
    with pytest.raises(ValueError, match="share a prefix"):
        model_guide(model, [f, _linear("f")])


def test_parameters_the_prior_leaves_deterministic_are_trained_by_svi():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    f = RandomFunction(BNN(net, NormalPrior(0.0, 1.0, select=name_matches("2.*")), Gaussian(1)), prefix="f")
    x, y = _regression_data(1.0)

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, 1.0), obs=y)

    guide = model_guide(model, f, rest=None)
    assert sorted(guide(x, y)) == ["f.2.bias", "f.2.weight"]
    before = net[0].weight.detach().clone()
    _fit(model, guide, x, y, steps=3)
    assert not torch.equal(net[0].weight, before)


@pytest.mark.parametrize("spec", ["flat:0.01", "autonormal:0.01", "bbb", "map", "lowrank"])
def test_the_librarys_guide_families_guide_the_network_sites_under_svi(spec):
    torch.manual_seed(0)
    f = RandomFunction(
        BNN(nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1)), NormalPrior(0.0, 1.0), Gaussian(1))
    )
    x, y = _regression_data(1.0)

    def model(x, y=None):
        sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, sigma), obs=y)

    guide = model_guide(model, f, guide=spec)
    assert sorted(guide(x, y)) == sorted(guide.median(x, y)) == sorted([*f.site_names, "sigma"])
    before = [p.detach().clone() for p in guide[0].parameters()]
    _fit(model, guide, x, y, steps=2, particles=2)
    assert all(not torch.equal(b, p) for b, p in zip(before, guide[0].parameters(), strict=True))
