import pytest
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoDelta, AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import (
    BayesByBackprop,
    GuideKind,
    MCDropout,
    init_to_network,
    parse_guide,
    posterior_loc_scale,
)
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import HierarchicalPrior, NormalPrior, nothing

X, Y = torch.randn(8, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


def _bnn(prior=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 300), nn.Tanh(), nn.Linear(300, 3))
    return BNN(net, prior or NormalPrior(), Categorical(100))


def test_bbb_initialisation_follows_blundell():
    guide = BayesByBackprop(_bnn())
    guide(X, Y)
    loc, scale = posterior_loc_scale(guide)["0.weight"]
    rho = guide.rhos.get_submodule("0").weight
    assert loc.min() >= -0.2 and loc.max() <= 0.2 and loc.std() > 0.1  # U(-0.2, 0.2): std 0.115
    assert rho.min() >= -5 and rho.max() <= -4
    assert torch.allclose(scale, torch.nn.functional.softplus(rho))


def test_bbb_samples_weights_from_normal_sites():
    """Real-valued weights are sampled directly from Normal(mu, softplus(rho)), so TraceMeanField_ELBO can use
    the analytic KL; the sample spread matches sigma."""
    guide = BayesByBackprop(_bnn(), rho_init=(0.0, 0.0))
    trace = poutine.trace(guide).get_trace(X, Y)
    site = trace.nodes["0.weight"]
    assert type(site["fn"].base_dist).__name__ == "Normal"
    loc, scale = guide._get_loc_and_scale("0.weight")
    z = (site["value"] - loc) / scale
    assert z.std().item() == pytest.approx(1.0, rel=0.05)
    assert scale.mean().item() == pytest.approx(0.6931, rel=1e-3)  # softplus(0) = log 2


def test_bbb_constrained_sites_carry_the_jacobian():
    """A layer scale s > 0 is exp(z) with z ~ Normal(mu, sigma): log q(s) = log N(log s; mu, sigma) - log s."""
    guide = BayesByBackprop(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0])))
    trace = poutine.trace(guide).get_trace(X, Y)
    site = trace.nodes["0.prior_scale"]
    value = site["value"]
    assert value.item() > 0
    loc, scale = guide._get_loc_and_scale("0.prior_scale")
    expected = torch.distributions.Normal(loc, scale).log_prob(value.log()) - value.log()
    assert site["fn"].log_prob(value).item() == pytest.approx(expected.item(), rel=1e-5)


def test_init_to_network_starts_at_the_network_weights():
    bnn = _bnn()
    guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=1e-3)
    guide(X, Y)
    loc, _ = posterior_loc_scale(guide)["2.weight"]
    assert torch.equal(loc, bnn.initial_values()["2.weight"])


def test_posterior_loc_scale_of_a_point_estimate_has_zero_scale():
    bnn = _bnn()
    guide = AutoDelta(bnn, init_loc_fn=init_to_network(bnn))
    guide(X, Y)
    loc, scale = posterior_loc_scale(guide)["0.bias"]
    assert torch.equal(loc, bnn.initial_values()["0.bias"]) and scale.abs().sum() == 0


def test_posterior_loc_scale_needs_a_set_up_guide():
    with pytest.raises(ValueError, match="run it \\(or train\\) once"):
        posterior_loc_scale(AutoNormal(_bnn()))


@pytest.mark.parametrize(
    "spec, kind, cls",
    [
        ("autonormal:1e-3", GuideKind.AUTONORMAL, AutoNormal),
        ("bbb", GuideKind.BBB, BayesByBackprop),
        ("map", GuideKind.MAP, AutoDelta),
        ("mc-dropout:0.2", GuideKind.MC_DROPOUT, MCDropout),
    ],
)
def test_parse_and_build(spec, kind, cls):
    parsed = parse_guide(spec)
    assert parsed.kind is kind
    assert type(parsed.build(_bnn())) is cls
    assert parse_guide(str(parsed)) == parsed


def test_autonormal_init_scale_and_mc_dropout_rate():
    assert parse_guide("autonormal:1e-3").init_scale == 1e-3
    assert parse_guide("mc-dropout:0.25").dropout == 0.25
    assert parse_guide("bbb:-6,-5").rho_init == (-6.0, -5.0)


def test_mle_needs_a_deterministic_network():
    spec = parse_guide("mle")
    assert not spec.random_weights
    with pytest.raises(ValueError, match="needs a deterministic network"):
        spec.build(_bnn())
    prior = NormalPrior(select=nothing)
    assert spec.build(_bnn(prior)) is not None


@pytest.mark.parametrize(
    "spec, message",
    [
        ("laplace-approx", "unknown guide 'laplace-approx'"),
        ("autonormal:0", "init scale must be > 0"),
        ("autonormal:1,2", "takes 0 or 1 numeric"),
        ("bbb:-4,-5", "low <= high"),
        ("mc-dropout:1.5", r"must lie in \(0, 1\)"),
        ("map:3", "takes 0 numeric"),
    ],
)
def test_bad_guide_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_guide(spec)


def test_posterior_loc_scale_is_in_unconstrained_space_for_every_guide():
    bnn = _bnn(HierarchicalPrior("normal", "halfcauchy", [1.0]))
    delta = AutoDelta(bnn, init_loc_fn=init_to_network(bnn))
    delta(X, Y)
    loc, _ = posterior_loc_scale(delta)["0.prior_scale"]
    assert torch.allclose(loc, delta.median()["0.prior_scale"].log())
