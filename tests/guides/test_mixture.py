"""The K-component mixture guide: initialisation, its mixture distribution, stratified draws, prediction."""

from __future__ import annotations

import math
import re

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import EqualMixtureNormal, NodeNoiseMixture
from pyro_bnn.infer import TraceELBO
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise, is_node_noise
from pyro_bnn.predict import predict
from pyro_bnn.priors import FlatPrior


def _bnn(width: int = 200) -> BNN:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(width, 8), nn.ReLU(), nn.Linear(8, 3))
    return BNN(add_node_noise(net, bias_noise=True), NodeNoisePrior(0.1), Categorical(50))


def _ready(bnn: BNN, num_components: int, **kwargs) -> NodeNoiseMixture:
    guide = NodeNoiseMixture(bnn, num_components, **kwargs)
    x = torch.randn(2, bnn.net[0].in_features)
    guide(x, torch.zeros(2, dtype=torch.long))
    return guide


def test_initialisation_follows_the_authors():
    pyro.set_rng_seed(0)
    guide = _ready(_bnn(width=4000), 4)
    locs, scales = guide.component_loc_scale()
    assert locs.shape == scales.shape == (4, 4000 + 8 + 2)
    assert locs.mean().item() == pytest.approx(1.0, abs=0.02)
    assert locs.std().item() == pytest.approx(0.5, rel=0.03)
    assert scales.mean().item() == pytest.approx(0.05, abs=0.002)
    assert scales.std().item() == pytest.approx(0.02, rel=0.05)
    assert scales.min().item() >= 1e-3 * (1 - 1e-6)
    vgg_like = _ready(_bnn(), 2, init_loc_std=0.75)
    assert vgg_like.locs.std().item() == pytest.approx(0.75, rel=0.15)
    same_start = _ready(_bnn(), 3, init_loc_std=0)  # every component at the means 1, their scales still drawn
    assert bool((same_start.locs == 1).all()) and same_start.scale_raw.std().item() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_components must be an int >= 1"):
        NodeNoiseMixture(_bnn(), 0)
    with pytest.raises(ValueError, match="init_loc_std"):
        NodeNoiseMixture(_bnn(), 2, init_loc_std=-1.0)
    for bad in (True, False, float("nan"), "0.5", 1e39):  # 1e39: component means of +-inf in float32
        with pytest.raises(
            ValueError,
            match=f"^{re.escape(f'init_loc_std must be a finite number >= 0 that float32 holds, got {bad!r}')}$",
        ):
            NodeNoiseMixture(_bnn(), 2, init_loc_std=bad)
    with pytest.raises(ValueError, match="has no parameters yet"):
        NodeNoiseMixture(_bnn(), 2).component_loc_scale()


def test_mixture_log_prob_and_moments():
    torch.manual_seed(1)
    locs, scales = torch.randn(3, 2), torch.rand(3, 2) + 0.2
    mixture = EqualMixtureNormal(locs, scales)
    value = torch.randn(5, 2)
    by_hand = (
        torch.stack([torch.distributions.Normal(locs[k], scales[k]).log_prob(value).sum(-1) for k in range(3)], -1)
        .exp()
        .mean(-1)
        .log()
    )
    torch.testing.assert_close(mixture.log_prob(value), by_hand)
    draws = mixture.rsample((200_000,))
    torch.testing.assert_close(draws.mean(0), locs.mean(0), atol=0.01, rtol=0)
    variance = scales.square().mean(0) + locs.var(0, unbiased=False)
    torch.testing.assert_close(draws.var(0), variance, atol=0.02, rtol=0)
    assert mixture.expand((4, 1)).rsample().shape == (4, 1, 2)


def test_draw_takes_sample_i_from_component_i_mod_k():
    guide = _ready(_bnn(), 3)
    with torch.no_grad():
        guide.scale_raw.fill_(-40.0)  # sigma ~ 4e-18: each draw is its component's mean
    draws = guide.draw(5, start=2)
    flat = torch.cat([draws[site.name].reshape(5, -1) for site in guide.sites], -1)
    components = [(2 + i) % 3 for i in range(5)]
    torch.testing.assert_close(flat, guide.locs.detach()[components])
    assert draws["0.input_noise"].shape == (5, 1, 200)


def test_prediction_holds_n_samples_from_each_component():
    bnn = _bnn()
    guide = _ready(bnn, 2)
    with torch.no_grad():
        guide.scale_raw.fill_(-40.0)
    x = torch.randn(7, 200)
    prediction = predict(bnn, guide, x, num_samples=6, chunk_size=4)  # chunks of 4 and 2: the count goes on
    assert prediction.probs.shape == (6, 7, 3)
    for s in range(6):
        component = guide.split(guide.locs.detach()[s % 2])
        expected = bnn.run_network(x, component).softmax(-1)
        torch.testing.assert_close(prediction.probs[s], expected)


def test_as_a_pyro_guide_its_log_density_is_the_mixtures():
    bnn = _bnn()
    guide = _ready(bnn, 3)
    x, y = torch.randn(4, 200), torch.zeros(4, dtype=torch.long)
    trace = pyro.poutine.trace(guide).get_trace(x, y)
    trace.compute_log_prob()
    auxiliary = trace.nodes["_node_noise_mixture"]
    locs, scales = guide.component_loc_scale()
    expected = EqualMixtureNormal(locs, scales).log_prob(auxiliary["value"])
    torch.testing.assert_close(auxiliary["log_prob_sum"], expected)
    others = [trace.nodes[site.name]["log_prob_sum"] for site in guide.sites]
    assert all(float(v) == 0.0 for v in others)
    assert math.isfinite(float(expected.detach()))


def test_a_flat_prior_on_node_noise_sets_up_and_trains_under_trace_elbo():
    # The guide needs the sites' shapes only, so an improper flat prior (which cannot be sampled) starts from the
    # network's own noise values, 1; Trace_ELBO's log p is then 0 and its loss is E_q[log q - log p(y | z)].
    torch.manual_seed(0)
    net = add_node_noise(nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)), bias_noise=True)
    bnn = BNN(net, FlatPrior(select=is_node_noise), Categorical(50))
    x, y = torch.randn(6, 5), torch.zeros(6, dtype=torch.long)
    guide = NodeNoiseMixture(bnn, 2)
    guide(x, y)
    assert [(s.name, tuple(s.shape)) for s in guide.sites] == [
        ("0.input_noise", (5,)),
        ("0.bias_noise", ()),
        ("2.input_noise", (4,)),
        ("2.bias_noise", ()),
    ]
    assert all(bool((guide.prototype_trace.nodes[s.name]["value"] == 1).all()) for s in guide.sites)
    assert guide.locs.shape == (2, 11)
    terms = TraceELBO()(bnn, guide, x, y)
    terms.loss.backward()
    assert math.isfinite(terms.loss.item()) and guide.locs.grad.abs().sum() > 0


def test_setting_up_draws_from_a_samplable_prior_as_the_plain_trace_did():
    # Seeded runs keep their numbers: the prototype trace takes the prior's draws (one per site, in order) before
    # the component means 1 + 0.5 eps and the scales are drawn.
    bnn = _bnn(width=5)
    x, y = torch.randn(2, 5), torch.zeros(2, dtype=torch.long)
    pyro.set_rng_seed(3)
    pyro.poutine.trace(bnn).get_trace(x, y)
    expected = 1.0 + 0.5 * torch.randn(2, 5 + 1 + 8 + 1)
    pyro.set_rng_seed(3)
    guide = NodeNoiseMixture(bnn, 2)
    guide(x, y)
    torch.testing.assert_close(guide.locs.detach(), expected, rtol=0, atol=0)
