"""FlatMeanField: AutoNormal's family with flat storage. It starts where the AutoNormal options start (bitwise), is an
ordinary Pyro guide for every objective and for prediction, and refuses what it cannot hold."""

import re

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import init_to_median
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import FlatMeanField, init_to_network, mean_posterior_scale, parse_guide, posterior_loc_scale
from pyro_bnn.infer import MeanFieldELBO, TraceELBO
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.local_latents import LocalLatent
from pyro_bnn.predict import predict, predict_posterior_mean
from pyro_bnn.priors import HierarchicalPrior, NormalPrior
from pyro_bnn.sites import sample_plate

X, Y = torch.randn(8, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


def _bnn(prior=None, seed=0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 30), nn.Tanh(), nn.Linear(30, 3))
    return BNN(net, prior or NormalPrior(), Categorical(100))


@pytest.mark.parametrize(
    "spec,flat_kwargs",
    [
        ("autonormal:0.1,loc=median", lambda bnn: {"init_loc_fn": init_to_median(num_samples=15), "init_scale": 0.1}),
        ("autonormal:rel=0.1", lambda bnn: {"init_loc_fn": init_to_network(bnn), "relative_scale": 0.1}),
        (
            "autonormal:rel=0.1,loc=median",
            lambda bnn: {"init_loc_fn": init_to_median(num_samples=15), "relative_scale": 0.1},
        ),
        ("autonormal:0.001", lambda bnn: {"init_loc_fn": init_to_network(bnn), "init_scale": 1e-3}),
    ],
)
def test_starts_exactly_where_the_autonormal_option_starts(spec, flat_kwargs):
    """Same seed, same options: the same locations bit for bit, the same scales to float rounding."""
    pyro.set_rng_seed(5)
    bnn = _bnn()
    reference = parse_guide(spec).build(bnn)
    reference(X, Y)
    pyro.set_rng_seed(5)
    bnn = _bnn()
    flat = FlatMeanField(bnn, **flat_kwargs(bnn))
    flat(X, Y)
    expected, got = posterior_loc_scale(reference), posterior_loc_scale(flat)
    assert list(got) == list(expected)
    log_scales = flat.split(flat.log_scale.detach())
    for name, (loc, scale) in expected.items():
        assert torch.equal(got[name][0], loc), name
        assert torch.allclose(got[name][1], scale, rtol=1e-6, atol=0), name
        assert torch.allclose(log_scales[name], scale.log(), rtol=1e-6, atol=1e-7), name


def test_default_locations_are_the_network_and_relative_scales_follow_each_tensor():
    bnn = _bnn()
    guide = FlatMeanField(bnn, relative_scale=0.5)
    guide(X, Y)
    for name, (loc, scale) in posterior_loc_scale(guide).items():
        assert torch.equal(loc, bnn.initial_values()[name])
        assert torch.allclose(scale, torch.full_like(scale, 0.5 * loc.std().item()), rtol=1e-5)


def test_storage_is_two_flat_vectors_with_per_site_views():
    bnn = _bnn()
    guide = FlatMeanField(bnn, init_scale=0.2)
    guide(X, Y)
    assert dict(guide.named_parameters()).keys() == {"loc", "log_scale"}
    assert guide.loc.shape == guide.log_scale.shape == (bnn.num_random_parameters(),) == (guide.num_latents,)
    assert guide.site_names == bnn.site_names
    loc, scale = guide.flat_loc_scale()
    views = guide.loc_scale()
    assert views["2.weight"][0].data_ptr() == loc[guide.sites[2].start :].data_ptr()  # a view, no copy
    assert torch.allclose(scale, torch.full_like(scale, 0.2))
    lead = guide.split(torch.zeros(5, 1, guide.num_latents))
    assert lead["0.weight"].shape == (5, 1, 30, 4) and lead["2.bias"].shape == (5, 1, 3)


def test_samples_every_weight_site_from_its_normal():
    guide = FlatMeanField(_bnn(), init_scale=0.5)
    guide(X, Y)
    with poutine.trace() as tracer, sample_plate(400):
        guide(X, Y)
    site = tracer.trace.nodes["0.weight"]
    assert isinstance(site["fn"].base_dist, dist.Normal) and site["value"].shape == (400, 1, 30, 4)
    loc, scale = guide.loc_scale()["0.weight"]
    z = (site["value"] - loc) / scale
    assert z.mean().item() == pytest.approx(0.0, abs=0.02) and z.std().item() == pytest.approx(1.0, rel=0.02)


def test_constrained_sites_carry_the_jacobian():
    """A layer scale s > 0 is exp(z) with z ~ Normal(mu, sigma): log q(s) = log N(log s; mu, sigma) - log s."""
    guide = FlatMeanField(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0])))
    trace = poutine.trace(guide).get_trace(X, Y)
    value = trace.nodes["0.prior_scale"]["value"]
    loc, scale = guide.loc_scale()["0.prior_scale"]
    expected = torch.distributions.Normal(loc, scale).log_prob(value.log()) - value.log()
    assert trace.nodes["0.prior_scale"]["fn"].log_prob(value).item() == pytest.approx(expected.item(), rel=1e-5)
    assert guide.median()["0.prior_scale"].item() == pytest.approx(loc.exp().item(), rel=1e-6)


def test_direct_draws_follow_the_guide_in_every_site_space():
    """FlatMeanField.draw (what predict uses) has the guide's distribution: standardised draws of the real sites are
    N(0, 1), and a positive site is exp of a Normal draw."""
    guide = FlatMeanField(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0])), init_scale=0.3)
    guide(X, Y)
    torch.manual_seed(0)
    draws = guide.draw(4000)
    params = guide.loc_scale()
    for name, value in draws.items():
        loc, scale = params[name]
        assert value.shape == (4000, 1, *loc.shape)
        if name.endswith("prior_scale"):
            assert bool((value > 0).all())
            value = value.log()
        z = ((value - loc) / scale).flatten()
        assert z.mean().item() == pytest.approx(0.0, abs=0.05) and z.std().item() == pytest.approx(1.0, rel=0.05)
    assert not torch.equal(draws["0.weight"][0], draws["0.weight"][1])


def test_builtin_objectives_train_it_and_meanfield_accepts_it():
    bnn = _bnn()
    guide = FlatMeanField(bnn)
    guide(X, Y)
    MeanFieldELBO().validate(bnn, guide, X, Y)  # Normal sites, no Delta: the analytic KL applies
    for objective in (TraceELBO(), MeanFieldELBO(3, vectorize_particles=True)):
        terms = objective(bnn, guide, X, Y)
        loc_grad, scale_grad = torch.autograd.grad(terms.loss, [guide.loc, guide.log_scale])
        assert loc_grad.shape == scale_grad.shape == guide.loc.shape and bool(scale_grad.abs().sum() > 0)


def test_prediction_median_quantiles_and_inspection_work_unchanged():
    bnn = _bnn()
    guide = FlatMeanField(bnn, init_scale=0.05)
    guide(X, Y)
    assert predict(bnn, guide, (X, Y), num_samples=6).probs.shape == (6, 8, 3)
    medians = guide.median()
    assert all(torch.equal(medians[name], bnn.initial_values()[name]) for name in bnn.site_names)
    mean_network = predict_posterior_mean(bnn, guide, (X, Y))
    assert torch.allclose(mean_network.probs[0], predict(bnn, bnn.initial_values(), (X, Y)).probs[0])
    quantiles = guide.quantiles([0.5, 0.975])["2.bias"]
    assert torch.allclose(quantiles[0], medians["2.bias"])
    assert torch.allclose(quantiles[1] - quantiles[0], torch.full((3,), 0.05 * 1.959964), rtol=1e-4)
    overall, _ = mean_posterior_scale(guide, bnn)
    assert overall == pytest.approx(0.05, rel=1e-5)


def test_state_dict_round_trip():
    bnn = _bnn()
    guide = FlatMeanField(bnn)
    guide(X, Y)
    with torch.no_grad():
        guide.log_scale.uniform_(-3, -1)
    other = FlatMeanField(_bnn(seed=1))
    other(X, Y)
    other.load_state_dict(guide.state_dict())
    assert torch.equal(other.loc, guide.loc) and torch.equal(other.log_scale, guide.log_scale)


def test_reading_parameters_before_a_run_is_refused_and_median_sets_up():
    guide = FlatMeanField(_bnn())
    with pytest.raises(ValueError, match="no parameters yet"):
        guide.loc_scale()
    assert guide.median(X, Y)["0.weight"].shape == (30, 4)
    assert isinstance(guide, AutoGuide)


def test_per_example_latent_sites_are_refused():
    class Scale(LocalLatent):
        def prior(self, batch_size):
            return dist.Normal(torch.ones(batch_size, 4), 0.1).to_event(1)

        def apply(self, inputs, value):
            return inputs * value

    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(4, 3)), NormalPrior(), Categorical(100), local_latents=[Scale("z", "0", (4,))])
    with pytest.raises(ValueError, match="global latent sites only.*'z'"):
        FlatMeanField(bnn)(X, Y)


@pytest.mark.parametrize("kwargs", [{"init_scale": 0.0}, {"init_scale": float("nan")}, {"relative_scale": -1.0}])
def test_bad_initial_scales(kwargs):
    with pytest.raises(ValueError, match="finite number > 0"):
        FlatMeanField(_bnn(), **kwargs)


@pytest.mark.parametrize(
    "kwargs, shown",
    [
        ({"init_scale": 1e39}, "init_scale must be {}, got 1e+39"),  # every sigma started at inf
        ({"init_scale": 1e-50}, "init_scale must be {}, got 1e-50"),  # every sigma 0: a torch error at the first step
        ({"relative_scale": 1e-46}, "relative_scale must be {}, got 1e-46"),
    ],
)
def test_initial_scales_float32_cannot_hold_are_refused_in_the_option_strings_words(kwargs, shown):
    holds = "a positive number that float32 holds (1.2e-38 to 3.4e+38)"
    with pytest.raises(ValueError, match="^" + re.escape(shown.format(holds)) + "$"):
        FlatMeanField(_bnn(), **kwargs)
    with pytest.raises(ValueError, match=re.escape(f"init scale must be {holds}, got '1e39'")):
        parse_guide("flat:1e39")


def test_scale_is_exp_of_log_scale():
    guide = FlatMeanField(_bnn())
    guide(X, Y)
    with torch.no_grad():
        guide.log_scale.normal_()
    assert torch.equal(guide.flat_loc_scale()[1], guide.log_scale.exp())
