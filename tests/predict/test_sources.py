"""Parameter sources for prediction (guide, dict of samples, point estimate), the per-sample log-likelihood and
MC dropout's fresh masks."""

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn
from torch.func import functional_call

from pyro_bnn import BNN
from pyro_bnn.guides import init_to_network
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.predict import PointEstimate, Samples, as_source, draw_parameters, predict
from pyro_bnn.priors import NormalPrior, nothing

X = torch.randn(25, 4)
Y = torch.arange(25) % 3


def _bnn(likelihood=None, prior=None, dropout=0.0):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 3))
    return BNN(net, prior or NormalPrior(), likelihood or Categorical(100))


def _guide(bnn, y=Y):
    guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.3)
    guide(X, y)
    return guide


def test_a_dict_of_samples_predicts_like_the_guide_that_drew_them():
    bnn = _bnn()
    guide = _guide(bnn)
    pyro.set_rng_seed(5)
    draws = draw_parameters(bnn, guide, 9, X)  # {site: (9, 1, *shape)}
    pyro.set_rng_seed(5)
    from_guide = predict(bnn, guide, (X, Y), num_samples=9, chunk_size=9, batch_size=7)
    samples = {name: value[:, 0] for name, value in draws.items()}  # the (S, *shape) layout MCMC returns
    from_dict = predict(bnn, samples, (X, Y), chunk_size=4, batch_size=10)
    assert isinstance(as_source(bnn, samples), Samples)
    assert from_dict.probs.shape == (9, 25, 3)
    assert torch.allclose(from_dict.probs, from_guide.probs, atol=1e-6)
    assert torch.allclose(from_dict.log_likelihood, from_guide.log_likelihood, atol=1e-5)


def test_a_point_estimate_is_one_network():
    bnn = _bnn()
    values = {name: torch.randn(site.shape) for name, site in zip(bnn.site_names, bnn.sites, strict=True)}
    assert isinstance(as_source(bnn, values), PointEstimate)
    prediction = predict(bnn, values, X)
    expected = torch.softmax(functional_call(bnn.net, values, (X,)), -1)
    assert prediction.probs.shape == (1, 25, 3)
    assert torch.allclose(prediction.probs[0], expected, atol=1e-6)


def test_categorical_log_likelihood_per_sample():
    bnn = _bnn()
    prediction = predict(bnn, _guide(bnn), (X, Y), num_samples=6)
    direct = torch.log(prediction.probs[:, torch.arange(25), Y])  # (S, N)
    assert prediction.log_likelihood.shape == (6, 25)
    assert torch.allclose(prediction.log_likelihood, direct, atol=1e-5)


def test_gaussian_log_likelihood_per_sample():
    torch.manual_seed(1)
    y = torch.randn(25, 2)
    bnn = BNN(nn.Linear(4, 2), NormalPrior(), Gaussian(100, scale=0.7))
    prediction = predict(bnn, _guide(bnn, y), (X, y), num_samples=5)
    normal = torch.distributions.Normal(prediction.means, 0.7)
    direct = normal.log_prob(y).sum(-1)  # independent output dimensions: (S, N)
    assert prediction.log_likelihood.shape == (5, 25)
    assert torch.allclose(prediction.log_likelihood, direct, atol=1e-5)


def test_no_log_likelihood_without_targets():
    bnn = _bnn()
    assert predict(bnn, _guide(bnn), X, num_samples=2).log_likelihood is None


def test_mc_dropout_draws_a_fresh_mask_for_every_sample():
    """A network with no random site: S samples with dropout on must be S different networks."""
    from pyro_bnn.guides import MCDropout

    bnn = _bnn(prior=NormalPrior(select=nothing), dropout=0.5).eval()
    guide = MCDropout(bnn)
    guide(X, Y)
    for source in (PointEstimate({}, mc_dropout=True), guide):
        prediction = predict(bnn, source, X, num_samples=8, chunk_size=3)
        distinct = {tuple(row.tolist()) for row in prediction.probs.reshape(8, -1)}
        assert len(distinct) == 8
        assert not bnn.training  # the mode is restored


def test_sources_refuse_values_of_the_wrong_shape():
    bnn = _bnn()
    values = {name: torch.zeros(site.shape) for name, site in zip(bnn.site_names, bnn.sites, strict=True)}
    values["0.weight"] = torch.zeros(16, 5)
    # a dict may be a point or samples: both forms named (it said "expected ('S', 16, 4)" of a point)
    expected = r"expected \(16, 4\) \(a point\) or \(S, 16, 4\) \(S samples\)$"
    with pytest.raises(ValueError, match=r"site '0.weight' have shape \(16, 5\); " + expected):
        predict(bnn, values, X)
    with pytest.raises(ValueError, match=r"site '0.weight' have shape \(3, 16, 5\); expected \(S, 16, 4\)$"):
        predict(bnn, Samples({name: torch.zeros(3, *v.shape) for name, v in values.items()}), X)
    del values["0.weight"]
    with pytest.raises(ValueError, match=r"no values for the weight sites \['0.weight'\]"):
        predict(bnn, PointEstimate(values), X)
    samples = {name: torch.zeros(4, *site.shape) for name, site in zip(bnn.site_names, bnn.sites, strict=True)}
    with pytest.raises(ValueError, match="asked for 5 samples but the source holds 4"):
        predict(bnn, samples, X, num_samples=5)
    with pytest.raises(ValueError, match="predict takes a guide, a dict of weight samples or a point estimate"):
        predict(bnn, 3, X)


def test_inputs_of_the_wrong_shape_are_one_clear_error():
    bnn = _bnn()
    with pytest.raises(ValueError, match=r"the network cannot run on inputs of shape \(10, 5\)"):
        predict(bnn, _guide(bnn), torch.randn(10, 5), num_samples=2)


def test_float64_weights_are_cast_to_the_networks_dtype_and_integers_refused():
    """float64 draws (MCMC, a file) for a float32 network failed in torch ("expected scalar type Double but found
    Float"); cast, they predict exactly what their float32 copies predict. Integer values are refused in one line."""
    bnn = _bnn()
    samples = {name: value[:, 0] for name, value in draw_parameters(bnn, _guide(bnn), 5, X).items()}
    expected = predict(bnn, samples, (X, Y))
    as_doubles = predict(bnn, {name: value.double() for name, value in samples.items()}, (X, Y), chunk_size=2)
    assert as_doubles.probs.dtype == torch.float32
    assert torch.equal(as_doubles.probs, expected.probs)
    assert torch.equal(as_doubles.log_likelihood, expected.log_likelihood)
    point = {name: value[0] for name, value in samples.items()}
    as_double_point = predict(bnn, {name: value.double() for name, value in point.items()}, X, point=True)
    assert torch.equal(as_double_point.probs, predict(bnn, point, X).probs)
    assert torch.equal(as_double_point.point.probs, as_double_point.probs)
    message = "values of site '0.weight' are {}; expected floating-point weights (the network's are torch.float32)"
    for values, dtype in [(samples, torch.int64), (point, torch.int32), (samples, torch.bool)]:
        with pytest.raises(ValueError) as error:
            predict(bnn, {name: value.to(dtype) for name, value in values.items()}, X)
        assert str(error.value) == message.format(dtype)
