import re

import pytest
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal
from torch import nn
from torch.distributions import biject_to

from pyro_bnn import BNN
from pyro_bnn.guides import (
    BayesByBackprop,
    FlatMeanField,
    FullCovarianceNormal,
    GuideKind,
    IAFNormal,
    LowRankNormal,
    MCDropout,
    PointEstimateGuide,
    init_to_network,
    parse_guide,
    posterior_loc_scale,
)
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import FlatPrior, HierarchicalPrior, NormalPrior, nothing

X, Y = torch.randn(8, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
HIERARCHICAL_SITES = ["0.prior_scale", "0.weight", "0.bias", "2.prior_scale", "2.weight", "2.bias"]


def _bnn(prior=None, dropout=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 300), nn.Tanh(), nn.Linear(300, 3))
    if dropout is not None:
        net.insert(2, nn.Dropout(dropout))
    return BNN(net, prior or NormalPrior(), Categorical(100))


def test_bbb_initialisation_follows_blundell():
    guide = BayesByBackprop(_bnn())
    guide(X, Y)
    loc, scale = posterior_loc_scale(guide)["0.weight"]
    rho = guide.rhos.get_submodule("0").weight
    assert loc.min() >= -0.2 and loc.max() <= 0.2 and loc.std() > 0.1  # U(-0.2, 0.2): std 0.115
    assert rho.min() >= -5 and rho.max() <= -4
    assert torch.allclose(scale, torch.nn.functional.softplus(rho))


def test_bbb_built_by_hand_takes_a_flat_prior_and_keeps_blundells_start():
    """BayesByBackprop(bnn) ran its prototype at the prior median by default, and a flat prior cannot be sampled
    (NotImplementedError: ImproperUniform does not support sampling); its default is now the network's weights,
    which the uniform mu of the weights replace (loc_init=None keeps them)."""
    bnn = _bnn(FlatPrior())
    guide = BayesByBackprop(bnn)
    guide(X, Y)
    loc, _ = guide.loc_scale()["0.weight"]
    assert loc.min() >= -0.2 and loc.max() <= 0.2 and loc.std().item() == pytest.approx(0.4 / 12**0.5, rel=0.05)
    assert not torch.equal(loc, bnn.initial_values()["0.weight"])
    at_network = BayesByBackprop(bnn, loc_init=None)
    at_network(X, Y)
    assert all(torch.equal(at_network.median()[name], value) for name, value in bnn.initial_values().items())


def test_bbb_samples_weights_from_normal_sites():
    """Real-valued weights are sampled directly from Normal(mu, softplus(rho)), so TraceMeanField_ELBO can use
    the analytic KL; the sample spread matches sigma."""
    guide = BayesByBackprop(_bnn(), rho_init=(0.0, 0.0))
    trace = poutine.trace(guide).get_trace(X, Y)
    site = trace.nodes["0.weight"]
    assert type(site["fn"].base_dist).__name__ == "Normal"
    loc, scale = guide.loc_scale()["0.weight"]
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
    loc, scale = guide.loc_scale()["0.prior_scale"]
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
        ("map", GuideKind.MAP, PointEstimateGuide),
        ("mc-dropout:0.2", GuideKind.MC_DROPOUT, MCDropout),
    ],
)
def test_parse_and_build(spec, kind, cls):
    parsed = parse_guide(spec)
    assert parsed.kind is kind
    assert type(parsed.build(_bnn(dropout=parsed.dropout or None))) is cls
    assert parse_guide(str(parsed)) == parsed


@pytest.mark.parametrize("spec", ["autonormal:0.01", "bbb", "lowrank", "flat:0.01"])
def test_a_random_guide_on_a_model_without_random_parameters_is_refused(spec):
    with pytest.raises(ValueError, match=r"draws random weights, but the model has no random parameter"):
        parse_guide(spec).build(_bnn(NormalPrior(select=nothing)))


def test_mc_dropout_refuses_a_network_without_its_dropout_probability():
    spec = parse_guide("mc-dropout:0.2")
    with pytest.raises(ValueError, match=r"^mc-dropout:0.2 needs a network with dropout layers .* has none"):
        spec.build(_bnn())
    with pytest.raises(
        ValueError, match=r"^mc-dropout:0.2 asks for .* 1 of the network's 1 .* '2': 0.5\); write mc-dropout:0.5"
    ):
        spec.build(_bnn(dropout=0.5))
    assert isinstance(spec.build(_bnn(dropout=0.2)), MCDropout)
    with pytest.raises(ValueError, match="has none"):  # Dropout(0) drops nothing: a placeholder, not dropout
        spec.build(_bnn(dropout=0.0))


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
        ("autonormal:0", "init scale must be a finite number > 0"),
        ("autonormal:inf", "init scale must be a finite number > 0"),
        ("autonormal:rel=0", "rel must be a finite number > 0"),
        ("autonormal:0.1,rel=1", "not both"),
        ("autonormal:loc=prior", "unknown location init .prior."),
        ("autonormal:spread=1", "unknown option .spread."),
        ("autonormal:loc=median,0.1", "positional argument .0.1. after a key=value option"),
        ("autonormal:map_epochs=2", "map_epochs needs loc=map"),
        ("autonormal:loc=map,map_epochs=0", "map_epochs must be an int >= 1"),
        ("autonormal:1,2", "takes 0 or 1 numeric"),
        ("bbb:-4,-5", "low <= high"),
        ("mc-dropout:1.5", r"dropout probability must be a number in \(0, 1\), got '1.5'"),
        ("map:3", "guide 'map' takes no arguments after ':', got 'map:3'"),
        ("autonormal:1e-60", "init scale must be a positive number that float32 holds"),
        ("autonormal:rel=nan", "rel must be a finite number > 0, got 'nan'"),
        ("autonormal:loc=map,map_epochs=1.5", "map_epochs must be an int >= 1, got '1.5'"),
        ("autonormal:loc=median,loc=map", "option 'loc' given twice"),
        ("bbb:-inf,-4", "rho low must be finite, got '-inf'"),
        (
            "mixture:2,loc_std=-0.1",
            r"^guide 'mixture:2,loc_std=-0.1': loc_std must be a finite number >= 0, got '-0.1'",
        ),
        ("mixture:2,loc_std=nan", "loc_std must be finite, got 'nan'"),
        # accepted when 0 became valid: every component mean +-inf, a traceback after data loading
        (
            "mixture:2,loc_std=1e39",
            r"loc_std must be a finite number that float32 holds \(-3.4e\+38 to 3.4e\+38\), got",
        ),
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


def _perturbed(guide):
    """Runs the guide once and moves every parameter off its (often constant) initial value."""
    guide(X, Y)
    with torch.no_grad():
        for param in guide.parameters():
            param.add_(0.3 * torch.randn_like(param))
    return guide


def test_bbb_is_its_own_autoguide():
    guide = BayesByBackprop(_bnn())
    assert isinstance(guide, AutoGuide) and not isinstance(guide, AutoNormal)


def test_bbb_state_dict_keeps_the_old_layout():
    """Checkpoints written when BayesByBackprop subclassed AutoNormal hold exactly these keys: one PyroParam per
    site in ``locs`` and ``rhos``, nested at the dots of the site name, stored unconstrained."""
    guide = BayesByBackprop(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0])))
    guide(X, Y)
    old_keys = {f"{group}.{site}_unconstrained" for group in ("locs", "rhos") for site in HIERARCHICAL_SITES}
    assert set(guide.state_dict()) == old_keys


def test_bbb_loads_a_state_dict_in_the_old_layout():
    shapes = {"0.prior_scale": (), "0.weight": (300, 4), "0.bias": (300,), "2.prior_scale": ()}
    shapes |= {"2.weight": (3, 300), "2.bias": (3,)}
    mu = {site: torch.full(shape, 0.1 * i) for i, (site, shape) in enumerate(shapes.items())}
    rho = {site: torch.full(shape, -float(i)) for i, (site, shape) in enumerate(shapes.items())}
    old_state = {f"locs.{site}_unconstrained": mu[site] for site in shapes}
    old_state |= {f"rhos.{site}_unconstrained": rho[site] for site in shapes}
    guide = BayesByBackprop(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0])))
    guide(X, Y)
    guide.load_state_dict(old_state)  # strict: no key missing, none unexpected
    loc_scale = guide.loc_scale()
    assert set(loc_scale) == set(shapes)
    for site, (loc, scale) in loc_scale.items():
        assert torch.equal(loc, mu[site])
        assert torch.allclose(scale, torch.nn.functional.softplus(rho[site]))
    assert guide.median()["2.prior_scale"].item() == pytest.approx(torch.tensor(0.3).exp().item())


def test_bbb_loc_scale_is_live_and_needs_a_run():
    guide = BayesByBackprop(_bnn())
    with pytest.raises(ValueError, match="BayesByBackprop has no parameters yet: run it \\(or train\\) once"):
        guide.loc_scale()
    guide(X, Y)
    loc, scale = guide.loc_scale()["2.bias"]
    (loc.sum() + scale.sum()).backward()
    rho = guide.rhos.get_submodule("2").bias
    assert torch.equal(guide.locs.get_submodule("2").bias.grad, torch.ones(3))
    assert torch.allclose(rho.grad, torch.sigmoid(rho.detach()))  # d softplus(rho) / d rho
    assert set(guide.loc_scale()) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_bbb_median_and_quantiles_are_in_the_constrained_space():
    guide = _perturbed(BayesByBackprop(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0]))))
    median, loc_scale = guide.median(), guide.loc_scale()
    quantiles = guide.quantiles([0.5, 0.8413447])  # the median and one standard deviation above it
    assert set(median) == set(HIERARCHICAL_SITES)
    for site, (loc, scale) in loc_scale.items():
        support = guide.prototype_trace.nodes[site]["fn"].support
        # The real weights' median is mu itself (no softplus, no transform); a layer scale's is exp(mu).
        expected = biject_to(support)(loc) if site.endswith("prior_scale") else loc
        assert torch.allclose(median[site], expected) and not median[site].requires_grad
        assert torch.allclose(quantiles[site][0], median[site])
        assert torch.allclose(quantiles[site][1], biject_to(support)(loc + scale), rtol=1e-4)
    assert torch.allclose(median["0.prior_scale"], loc_scale["0.prior_scale"][0].exp())
    assert median["0.weight"] is not loc_scale["0.weight"][0]  # a copy: editing it cannot touch the parameter


_SUMMARIES = {
    "median": lambda guide, *args: guide.median(*args),
    "quantiles": lambda guide, *args: guide.quantiles([0.5], *args),
    "loc_scale": lambda guide: guide.loc_scale(),
}


@pytest.mark.parametrize("summary", list(_SUMMARIES))
@pytest.mark.parametrize("cls", [BayesByBackprop, FlatMeanField, LowRankNormal, FullCovarianceNormal, IAFNormal])
def test_a_guide_that_has_not_run_says_so_in_one_line(cls, summary):
    """BayesByBackprop.quantiles(), IAFNormal.median() and the multivariate guides' median() and quantiles() raised
    AttributeErrors ('NoneType' object has no attribute 'nodes', no latent_sites, no scale)."""
    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 3)), NormalPrior(), Categorical(100))
    guide = cls(bnn)
    with pytest.raises(ValueError, match=rf"^{cls.__name__} has no parameters yet: run it \(or train\) once before"):
        _SUMMARIES[summary](guide)
    if summary == "loc_scale":
        return
    values = _SUMMARIES[summary](guide, X, Y)  # the model's arguments set the guide up
    assert list(values) == bnn.site_names
    if cls in (FlatMeanField, LowRankNormal, FullCovarianceNormal):  # a Normal centred at the network's weights
        for name, start in bnn.initial_values().items():
            torch.testing.assert_close(values[name].reshape(start.shape), start)


def test_bbb_median_before_a_run_sets_the_guide_up_from_the_model_arguments():
    guide = BayesByBackprop(_bnn())
    assert set(guide.median(X, Y)) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    with pytest.raises(ValueError, match="no parameters yet"):
        BayesByBackprop(_bnn()).median()


def test_posterior_loc_scale_of_autonormal_matches_its_median_and_scales():
    guide = _perturbed(AutoNormal(_bnn(HierarchicalPrior("normal", "halfcauchy", [1.0])), init_scale=0.1))
    median, loc_scale = guide.median(), posterior_loc_scale(guide)
    one_sd_above = guide.quantiles([0.8413447])  # biject_to(support)(loc + scale)
    assert set(loc_scale) == set(HIERARCHICAL_SITES)
    for site, (loc, scale) in loc_scale.items():
        unconstrain = biject_to(guide.prototype_trace.nodes[site]["fn"].support).inv
        assert torch.allclose(loc, unconstrain(median[site]), atol=1e-6)
        assert torch.allclose(scale, unconstrain(one_sd_above[site][0]) - loc, atol=1e-4)
        *path, leaf = site.split(".")
        assert torch.equal(scale, getattr(guide.scales.get_submodule(".".join(path)), leaf).detach())
        assert not loc.requires_grad and not scale.requires_grad
    assert not torch.allclose(loc_scale["0.weight"][1], torch.tensor(0.1))  # the perturbation reached the scales


@pytest.mark.parametrize(
    "spec",
    ["autonormal:0.01,loc=median", "autonormal:rel=0.5", "autonormal:rel=1,loc=map", "autonormal:loc=map,map_epochs=2"],
)
def test_autonormal_option_strings_round_trip(spec):
    parsed = parse_guide(spec)
    assert parse_guide(str(parsed)) == parsed


@pytest.mark.parametrize(
    "spec",
    [
        "autonormal:0.0123456789",  # was written 'autonormal:0.0123457', another init scale
        "flat:rel=0.123456789,loc=median",
        "bbb:-5.123456789,-4",
        "lowrank:0.0123456789,rank=3",
        "mvn:0.0123456789",
        "iaf:0.0123456789,flows=3",
        "mc-dropout:0.123456789",
        "mixture:4,loc_std=0.123456789",
    ],
)
def test_str_of_a_spec_is_the_spec_as_written_down_to_the_last_digit(spec):
    parsed = parse_guide(spec)
    assert str(parsed) == spec
    assert parse_guide(str(parsed)) == parsed


@pytest.mark.parametrize(
    "spec, written",
    [
        # The forms committed run configs and plans hold: str() must keep writing them as before (:g's form).
        ("flat:0.05", "flat:0.05"),
        ("flat:rel=1", "flat:rel=1"),
        ("autonormal:0.001", "autonormal:0.001"),
        ("autonormal:1e-5", "autonormal:1e-05"),
        ("autonormal:0.1,loc=median", "autonormal:0.1,loc=median"),
        ("lowrank:0.003,rank=10", "lowrank:0.003"),
        ("bbb", "bbb:-5,-4"),
        ("mc-dropout:0.1", "mc-dropout:0.1"),
        ("mixture:4", "mixture:4,loc_std=0.5"),
    ],
)
def test_str_keeps_the_short_form_of_numbers_it_already_wrote_exactly(spec, written):
    assert str(parse_guide(spec)) == written


def test_mc_dropout_refusal_names_the_probability_the_network_has_exactly():
    net = nn.Sequential(nn.Linear(4, 30), nn.Tanh(), nn.Dropout(0.123456789), nn.Linear(30, 3))
    bnn = BNN(net, NormalPrior(), Categorical(100))
    with pytest.raises(ValueError, match=r"'2': 0\.123456789\); write mc-dropout:0\.123456789 or") as err:
        parse_guide("mc-dropout:0.1").build(bnn)
    advised = str(err.value).split("write ")[1].split(" ")[0]  # what the message tells the user to write builds
    assert isinstance(parse_guide(advised).build(bnn), MCDropout)
    assert isinstance(parse_guide(str(parse_guide("mc-dropout:0.123456789"))).build(bnn), MCDropout)


def test_relative_scale_is_a_multiple_of_each_tensors_initial_spread():
    from pyro_bnn.guides.autonormal import RelativeScaleNormal

    bnn = _bnn()
    guide = parse_guide("autonormal:rel=0.5").build(bnn)
    assert isinstance(guide, RelativeScaleNormal)
    guide(X, Y)
    for name, (loc, scale) in posterior_loc_scale(guide).items():
        initial = bnn.initial_values()[name]
        assert torch.equal(loc, initial)
        assert torch.allclose(scale, torch.full_like(initial, 0.5 * float(initial.std())), rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"relative_scale": float("inf")}, "relative_scale must be a finite number > 0, got inf"),
        ({"relative_scale": True}, "relative_scale must be a finite number > 0, got True"),
        ({"relative_scale": 1e39}, "relative_scale must be a positive number that float32 holds (1.2e-38 to 3.4e+38)"),
        ({"fallback_scale": 1e-50}, "fallback_scale must be a positive number that float32 holds"),
    ],
)
def test_relative_scale_normal_refuses_scales_float32_cannot_hold(kwargs, message):
    from pyro_bnn.guides.autonormal import RelativeScaleNormal

    bnn = _bnn()
    kwargs = {"relative_scale": 0.5, **kwargs}
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        RelativeScaleNormal(bnn, init_loc_fn=init_to_network(bnn), **kwargs)


@pytest.mark.parametrize("spec", ["flat:0.1,loc=median", "autonormal:rel=1,loc=median"])
def test_median_locations_under_a_flat_prior_are_refused_in_one_line_when_built(spec):
    bnn = _bnn(FlatPrior())
    message = (
        f"guide {spec!r} starts its locations at the median of draws from the prior (loc=median), but the prior "
        "FlatPrior cannot be sampled; use loc=network (the default: the network's own initial weights) or loc=map"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_guide(spec).build(bnn)  # was NotImplementedError (ImproperUniform) with a traceback at the first step
    guide = parse_guide(spec.replace("loc=median", "loc=network")).build(bnn)
    guide(X, Y)  # the network's own weights, where a flat prior's sites start


def test_median_locations_are_prior_draws_not_the_network():
    bnn = _bnn()
    guide = parse_guide("autonormal:0.01,loc=median").build(bnn)
    guide(X, Y)
    locs = {name: loc for name, (loc, _) in posterior_loc_scale(guide).items()}
    weight = locs["0.weight"]
    assert not torch.allclose(weight, bnn.initial_values()["0.weight"])
    # The median of 15 N(0, 1) draws has std ~ sqrt(pi / (2 * 15)) ~ 0.32.
    assert 0.2 < float(weight.std()) < 0.45
    assert parse_guide("autonormal:loc=map").map_warm_start_epochs == 1
    assert parse_guide("autonormal:0.1").map_warm_start_epochs == 0


def test_flat_guide_strings_build_the_flat_guide_with_autonormals_start():
    from pyro_bnn.guides import FlatMeanField

    spec = parse_guide("flat:rel=0.5")
    assert str(spec) == "flat:rel=0.5" and parse_guide(str(spec)) == spec
    bnn = _bnn()
    guide = spec.build(bnn)
    assert isinstance(guide, FlatMeanField)
    guide(X, Y)
    reference = parse_guide("autonormal:rel=0.5").build(bnn)
    reference(X, Y)
    ours, theirs = posterior_loc_scale(guide), posterior_loc_scale(reference)
    for name in theirs:
        assert torch.allclose(ours[name][0], theirs[name][0]) and torch.allclose(ours[name][1], theirs[name][1])


@pytest.mark.parametrize("text, loc_std, written", [("0", 0.0, "0"), ("-0", 0.0, "0"), ("0.75", 0.75, "0.75")])
def test_mixture_loc_std_takes_what_the_guide_takes_zero_included(text, loc_std, written):
    # NodeNoiseMixture(init_loc_std=0) starts every component at the means 1; the spec accepts it too.
    spec = parse_guide(f"mixture:2,loc_std={text}")
    assert spec.init_loc_std == loc_std and str(spec) == f"mixture:2,loc_std={written}"
