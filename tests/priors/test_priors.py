import math
import re

import numpy as np
import pyro
import pytest
import scipy.stats as st
import torch
from pyro import poutine
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import (
    CauchyPrior,
    FlatPrior,
    HierarchicalPrior,
    LaplacePrior,
    NormalPrior,
    ScaleMixturePrior,
    module_types,
    name_matches,
    nothing,
    parse_prior,
    weights_only,
)

VALUES = torch.tensor([[-3.0, -0.5, 0.0], [0.25, 1.0, 7.5]])


def _site(prior, shape=(2, 3)):
    net = nn.Linear(shape[1], shape[0])
    return prior.parameter_sites(net)[0]


@pytest.mark.parametrize(
    "prior, scipy_logpdf",
    [
        (NormalPrior(0.5, 2.0), lambda v: st.norm(0.5, 2.0).logpdf(v)),
        (LaplacePrior(-1.0, 0.7), lambda v: st.laplace(-1.0, 0.7).logpdf(v)),
        (CauchyPrior(0.0, 3.0), lambda v: st.cauchy(0.0, 3.0).logpdf(v)),
        (
            ScaleMixturePrior(0.25, 1.0, math.exp(-6)),
            lambda v: np.log(0.25 * st.norm(0, 1).pdf(v) + 0.75 * st.norm(0, math.exp(-6)).pdf(v)),
        ),
    ],
    ids=["normal", "laplace", "cauchy", "mixture"],
)
def test_log_density_matches_scipy(prior, scipy_logpdf):
    site = _site(prior)
    expected = scipy_logpdf(VALUES.double().numpy()).sum()
    assert prior.log_prob(site, VALUES).item() == pytest.approx(expected, rel=1e-5)


def test_flat_prior_contributes_zero():
    prior = FlatPrior()
    site = _site(prior)
    assert prior.log_prob(site, VALUES * 1e6).item() == 0.0


def test_scale_mixture_log_density_is_finite_far_in_the_tails():
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-6))
    site = _site(prior, (1, 1))
    # The spike component alone underflows at 0.5 (exp(-0.5 * (0.5/e^-6)^2)); logaddexp must keep the broad one.
    expected = math.log(0.5) + st.norm(0, 1).logpdf(0.5)
    assert prior.log_prob(site, torch.tensor([[0.5]])).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("pi, sigma1, sigma2", [(0.5, 1.0, math.exp(-6)), (0.25, 1.0, math.exp(-8)), (0.3, 2.0, 0.5)])
def test_scale_mixture_log_density_and_gradient_match_the_mixture_formula(pi, sigma1, sigma2):
    # The hand-written density and derivative against scipy's mixture and its derivative by central differences,
    # in float64, from the spike's scale out to the far tails, with sample dimensions in front.
    from pyro_bnn.priors import ScaleMixtureNormal

    values = torch.tensor([0.0, 1e-5, -3e-4, 2e-3, -0.01, 0.05, 0.3, -1.0, 4.0, -25.0], dtype=torch.float64)
    values = values.reshape(2, 1, 5).requires_grad_()
    one = torch.tensor(1.0, dtype=torch.float64)
    d = ScaleMixtureNormal(pi * one, sigma1 * one, sigma2 * one).expand((1, 5))

    def reference(v):
        return np.logaddexp(math.log(pi) + st.norm(0, sigma1).logpdf(v), math.log1p(-pi) + st.norm(0, sigma2).logpdf(v))

    log_p = d.log_prob(values)
    assert log_p.shape == (2, 1, 5)
    v = values.detach().numpy()
    np.testing.assert_allclose(log_p.detach().numpy(), reference(v), rtol=1e-12, atol=1e-9)
    (grad,) = torch.autograd.grad(log_p.sum(), values)
    h = 1e-7 * np.maximum(np.abs(v), sigma2)
    numeric = (reference(v + h) - reference(v - h)) / (2 * h)
    np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-5, atol=1e-6 / sigma2)
    assert torch.autograd.gradcheck(lambda w: d.log_prob(w), (values,))


def test_scale_mixture_with_a_parameter_that_needs_gradients_differentiates_it():
    # A sampled (hyperprior) scale takes the plain autograd route: same values, and a gradient for the scale.
    from pyro_bnn.priors import ScaleMixtureNormal

    values = torch.tensor([-0.4, 0.0, 0.02, 1.5], dtype=torch.float64)
    sigma2 = torch.tensor(0.01, dtype=torch.float64, requires_grad=True)
    fixed = ScaleMixtureNormal(torch.tensor(0.5, dtype=torch.float64), 1.0, sigma2.detach()).log_prob(values)
    learned = ScaleMixtureNormal(torch.tensor(0.5, dtype=torch.float64), 1.0, sigma2).log_prob(values)
    torch.testing.assert_close(learned.detach(), fixed)
    (grad,) = torch.autograd.grad(learned.sum(), sigma2)
    assert torch.isfinite(grad) and grad != 0


def test_scale_mixture_samples_have_the_mixture_variance():
    prior = ScaleMixturePrior(0.3, 2.0, 0.1)
    d = prior.distribution(_site(prior, (1, 1)), {})
    samples = d.sample((200_000,))
    assert samples.var().item() == pytest.approx(0.3 * 4.0 + 0.7 * 0.01, rel=0.03)


@pytest.mark.parametrize(
    "spec, key, hyper_logpdf, to_scale",
    [
        ("hierarchical:normal,halfnormal,2", "scale", lambda s: st.halfnorm(scale=2).logpdf(s), lambda s: s),
        ("hierarchical:laplace,halfcauchy,1.5", "scale", lambda s: st.halfcauchy(scale=1.5).logpdf(s), lambda s: s),
        # the inverse-gamma hyperprior is on the variance (conjugate for a Normal); the weights' scale is its root
        ("hierarchical:cauchy,inversegamma,3,2", "variance", lambda v: st.invgamma(3, scale=2).logpdf(v), math.sqrt),
    ],
)
def test_hierarchical_joint_log_density(spec, key, hyper_logpdf, to_scale):
    """The model's log joint over (layer hyperparameter, weights) equals log p(h) + sum log p(w | h), by scipy."""
    prior = parse_prior(spec)
    net = nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 2))
    bnn = BNN(net, prior, Categorical(10))
    family = {"normal": st.norm, "laplace": st.laplace, "cauchy": st.cauchy}[spec.split(":")[1].split(",")[0]]
    hyper = {"0": 0.7, "2": 1.9}
    values = {f"{layer}.prior_{key}": torch.tensor(h) for layer, h in hyper.items()}
    generator = torch.Generator().manual_seed(0)
    for site in bnn.sites:
        values[site.name] = torch.randn(site.shape, generator=generator)
    trace = poutine.trace(poutine.condition(bnn, values)).get_trace(torch.randn(4, 3))
    trace.compute_log_prob()
    latent = sum(
        node["log_prob_sum"] for name, node in trace.nodes.items() if name != "obs" and node["type"] == "sample"
    )
    expected = sum(hyper_logpdf(h) for h in hyper.values())
    for site in bnn.sites:
        expected += family(0, to_scale(hyper[site.layer])).logpdf(values[site.name].double().numpy()).sum()
    assert latent.item() == pytest.approx(expected, rel=1e-5)
    assert set(bnn.hyper_site_names) == {f"0.prior_{key}", f"2.prior_{key}"}


def test_hierarchical_log_prob_without_the_layer_value_is_a_clear_error():
    prior = parse_prior("hierarchical:normal,halfnormal,1")
    with pytest.raises(ValueError, match=r"depends on its layer's sampled \['scale'\] value; pass it as hyper"):
        prior.log_prob(_site(prior), VALUES)


def test_tied_weights_are_refused():
    shared = nn.Linear(3, 3)
    net = nn.Sequential(shared, nn.Tanh(), shared)
    with pytest.raises(ValueError, match="are one shared \\(tied\\) tensor"):
        BNN(net, NormalPrior(), Categorical(10))
    with pytest.raises(ValueError, match="leave both out of the prior's select"):  # one owner selected is enough
        BNN(net, NormalPrior(select=name_matches("2.*")), Categorical(10))


def test_tied_weights_left_deterministic_stay_one_tensor():
    shared = nn.Linear(3, 3)
    head = nn.Linear(3, 2)
    net = nn.Sequential(shared, nn.Tanh(), shared, nn.Tanh(), head)
    bnn = BNN(net, NormalPrior(select=name_matches("4.*")), Categorical(10))
    assert bnn.site_names == ["4.weight", "4.bias"]
    x = torch.randn(5, 3)
    torch.testing.assert_close(bnn.apply_parameters(x, bnn.initial_values()), net(x))  # both calls use the tie


def test_a_lazy_module_not_yet_materialised_is_refused_in_one_line():
    # it raised torch's "Can't access the shape of an uninitialized parameter" from inside the prior
    net = nn.Sequential(nn.LazyLinear(4), nn.Tanh(), nn.Linear(4, 2))
    with pytest.raises(
        ValueError, match=r"^parameter '0.weight' belongs to a lazy module not yet materialised .*net\(x\)"
    ):
        BNN(net, NormalPrior(), Categorical(10))
    lazy = nn.Sequential(nn.LazyLinear(4), nn.Tanh(), nn.Linear(4, 2))  # left out of the prior: no shape needed
    assert BNN(lazy, NormalPrior(select=name_matches("2.*")), Categorical(10)).site_names == ["2.weight", "2.bias"]
    net(torch.randn(2, 3))
    assert BNN(net, NormalPrior(), Categorical(10)).site_names == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_fixed_hyperprior_has_no_site_and_equals_plain_prior():
    site = _site(NormalPrior())
    fixed = HierarchicalPrior("normal", "fixed", [0.3])
    assert fixed.layer_hyperpriors("0") == {}
    assert fixed.log_prob(site, VALUES).item() == pytest.approx(NormalPrior(0, 0.3).log_prob(site, VALUES).item())


def test_prior_buffers_follow_the_module_dtype_and_device():
    prior = NormalPrior(0.0, 2.0).double()
    assert prior.scale.dtype == torch.float64
    assert "scale" in dict(prior.named_buffers())


def test_selection_helpers():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2))
    names = lambda select: [s.name for s in NormalPrior(select=select).parameter_sites(net)]  # noqa: E731
    assert names(None) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert names(weights_only) == ["0.weight", "2.weight"]
    assert names(module_types(nn.Linear)) == ["2.weight", "2.bias"]
    assert names(name_matches("2.*")) == ["2.weight", "2.bias"]
    assert names(nothing) == []


@pytest.mark.parametrize(
    "spec, cls",
    [
        ("normal", NormalPrior),
        ("normal:0,1", NormalPrior),
        ("laplace:0,0.5", LaplacePrior),
        ("cauchy", CauchyPrior),
        ("flat", FlatPrior),
        ("mixture:0.5,1,0.0025", ScaleMixturePrior),
        ("hierarchical:normal,fixed,0.1", HierarchicalPrior),
    ],
)
def test_parse_prior(spec, cls):
    assert isinstance(parse_prior(spec), cls)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gaussian:0,1", "unknown prior 'gaussian'"),
        ("normal:0", "takes 0 or 2 numeric argument"),
        ("normal:0,-1", "prior 'normal:0,-1': scale must be a finite number > 0, got '-1'; expected normal:LOC,SCALE"),
        ("normal:a,b", "loc must be a finite number, got 'a'"),
        ("normal:inf,1", "loc must be finite, got 'inf'"),
        ("cauchy:0,nan", "scale must be a finite number > 0, got 'nan'"),
        ("mixture:1.5,1,0.1", "pi must be a number in (0, 1), got '1.5'"),
        ("mixture:0.5,1,1e-300", "sigma2 must be a positive number that float32 holds (1.2e-38 to 3.4e+38), got"),
        ("mixture:0.5,1e39,0.1", "sigma1 must be a positive number that float32 holds"),
        ("mixture:1e-50,1,0.1", "pi must be a number in (0, 1) after rounding to float32, got '1e-50'"),
        ("hierarchical:normal", "takes 3 or 4 argument(s), got 1; expected hierarchical:FAMILY,HYPERPRIOR,H1[,H2]"),
        ("hierarchical:normal,halfcauchy,1,2", "hyperprior 'halfcauchy' takes 1 argument(s), got 2"),
        ("hierarchical:normal,fixed,1e-45", "hyperparameter 1 must be a positive number that float32 holds"),
        ("hierarchical:student,halfnormal,1", "unknown weight family 'student'"),
        ("hierarchical:normal,gamma,1", "unknown hyperprior 'gamma'"),
        ("hierarchical:normal,inversegamma,1", "takes 2 argument(s)"),
        ("flat:1", "prior 'flat' takes no arguments after ':', got 'flat:1'"),
        ("", "non-empty string"),
    ],
)
def test_bad_prior_specs(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_prior(spec)


def test_prior_sampling_through_pyro():
    """Prior predictive: weights sampled by the model follow the prior (a check on the site wiring)."""
    net = nn.Linear(50, 40)
    bnn = BNN(net, NormalPrior(0.0, 0.5), Categorical(10))
    trace = poutine.trace(bnn).get_trace(torch.randn(2, 50))
    w = trace.nodes["weight"]["value"]
    assert w.shape == (40, 50)
    assert w.std().item() == pytest.approx(0.5, rel=0.05)
    assert pyro.get_param_store().keys() == set()


def test_scale_mixture_log_density_under_vmap_matches_the_batched_call():
    from pyro_bnn.priors import ScaleMixtureNormal

    d = ScaleMixtureNormal(torch.tensor(0.5), torch.tensor(1.0), torch.tensor(math.exp(-6)))
    w = torch.randn(4, 7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(torch.func.vmap(d.log_prob)(w), d.log_prob(w))
    grads = torch.func.vmap(torch.func.grad(lambda v: d.log_prob(v).sum()))(w)
    (expected,) = torch.autograd.grad(d.log_prob(w.requires_grad_()).sum(), w)
    torch.testing.assert_close(grads, expected)


# ------------------------------------------------------------------ constructor values float32 cannot hold
FLOAT32_SCALE = "must be a positive number that float32 holds (1.2e-38 to 3.4e+38), got"


@pytest.mark.parametrize(
    "build, message",
    [
        # 1e39 became a float32 inf (log_prob -inf everywhere), 1e-50 a 0 (a multi-line torch error later).
        (lambda: NormalPrior(0, 1e39), f"NormalPrior: scale {FLOAT32_SCALE} 1e+39"),
        (lambda: NormalPrior(0, 1e-50), f"NormalPrior: scale {FLOAT32_SCALE} 1e-50"),
        (
            lambda: LaplacePrior(0, torch.tensor(1e-50, dtype=torch.float64)),
            f"LaplacePrior: scale {FLOAT32_SCALE} 1e-50",
        ),
        (
            lambda: NormalPrior(1e39, 1),
            "NormalPrior: loc must be a finite number that float32 holds (-3.4e+38 to 3.4e+38), got 1e+39",
        ),
        (lambda: CauchyPrior(-1e39, 1), "CauchyPrior: loc must be a finite number that float32 holds"),
        (lambda: ScaleMixturePrior(0.5, 1, 1e-46), f"ScaleMixturePrior: sigma2 {FLOAT32_SCALE} 1e-46"),
        (
            lambda: ScaleMixturePrior(1 - 1e-9),  # became exactly 1 in float32, where pi=1 itself is refused
            "ScaleMixturePrior: pi must be a number in (0, 1) after rounding to float32, got 0.999999999",
        ),
        (lambda: HierarchicalPrior("normal", "fixed", (1e-50,)), f"HierarchicalPrior: hyper_0 {FLOAT32_SCALE} 1e-50"),
        # Bad kinds of value: each a one-line message naming the value and what was expected.
        (
            lambda: NormalPrior(torch.tensor([1.0, 2.0]), 1),
            "NormalPrior: loc must be a finite number, got a tensor of shape (2,) and dtype torch.float32",
        ),
        (lambda: NormalPrior(float("nan"), 1), "NormalPrior: loc must be a finite number, got nan"),
        (lambda: ScaleMixturePrior(pi="a"), "ScaleMixturePrior: pi must be a number in (0, 1), got 'a'"),
        (lambda: ScaleMixturePrior(pi=1.0), "ScaleMixturePrior: pi must be a number in (0, 1), got 1.0"),
        (
            lambda: HierarchicalPrior(hyperparameters=1.0),
            "HierarchicalPrior: hyperparameters must be a sequence of numbers such as (1.0,) or (2.0, 2.0), got 1.0",
        ),
        (lambda: HierarchicalPrior(hyperparameters="1"), "HierarchicalPrior: hyperparameters must be a sequence"),
    ],
)
def test_constructors_refuse_values_float32_cannot_hold_in_one_line(build, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)) as err:
        build()
    assert "\n" not in str(err.value)


def test_constructors_and_option_strings_refuse_a_scale_in_the_same_words():
    with pytest.raises(ValueError) as api:
        NormalPrior(0, 1e39)
    with pytest.raises(ValueError) as spec:
        parse_prior("normal:0,1e39")
    clause = "scale must be a positive number that float32 holds (1.2e-38 to 3.4e+38), got"
    assert clause in str(api.value) and clause in str(spec.value)
    with pytest.raises(ValueError, match=re.escape("loc must be a finite number that float32 holds")):
        parse_prior("normal:1e39,1")  # the grammar refuses the location as the constructor does


def test_constructors_keep_the_values_float32_holds():
    assert NormalPrior(0, 1e-37).scale.item() == pytest.approx(1e-37, rel=1e-6)
    assert NormalPrior(-3e38, 3e38).loc.item() == pytest.approx(-3e38, rel=1e-6)
    assert ScaleMixturePrior(torch.tensor(0.25), np.float64(2.0), 0.5).pi.item() == 0.25
    assert ScaleMixturePrior(1 - 1e-7).pi.item() < 1.0  # float32 holds 1 - 1e-7 below 1 (its ulp there: 6e-8)
    assert HierarchicalPrior("normal", "inversegamma", [2, 3]).hyper_1.item() == 3.0


@pytest.mark.parametrize(
    "hyperparameters",
    [[2.0], np.array([2.0]), torch.tensor([2.0]), (h for h in [2.0])],
    ids=["list", "array", "tensor", "generator"],
)
def test_hierarchical_hyperparameters_take_any_iterable_of_numbers(hyperparameters):
    # the check added for a bare number (hyperparameters=1.0) first refused arrays, tensors and generators too
    assert HierarchicalPrior("normal", "halfnormal", hyperparameters).hyper_0.item() == 2.0


@pytest.mark.parametrize("bad", [1.0, np.array(1.0), "1"], ids=["float", "0d-array", "str"])
def test_hierarchical_hyperparameters_refuse_one_number(bad):
    message = (
        f"HierarchicalPrior: hyperparameters must be a sequence of numbers such as (1.0,) or (2.0, 2.0), got {bad!r}"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        HierarchicalPrior("normal", "halfnormal", bad)
