import math

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoDelta, AutoNormal
from torch import nn
from torch.func import functional_call

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import MCDropout, init_to_network
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.predict import Prediction, predict, predict_posterior_mean
from pyro_bnn.priors import NormalPrior, nothing

X = torch.randn(25, 4)
Y = torch.arange(25) % 3


def _bnn(dropout=0.0, prior=None, likelihood=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 3))
    return BNN(net, prior or NormalPrior(), likelihood or Categorical(100))


def _guide(bnn, cls=AutoNormal, **kwargs):
    guide = cls(bnn, init_loc_fn=init_to_network(bnn), **kwargs)
    guide(X, Y)
    return guide


def test_shapes_and_normalisation():
    bnn = _bnn()
    prediction = predict(bnn, _guide(bnn, init_scale=0.3), (X, Y), num_samples=7, batch_size=10)
    assert prediction.probs.shape == (7, 25, 3)
    assert torch.allclose(prediction.probs.sum(-1), torch.ones(7, 25))
    assert torch.equal(prediction.targets, Y)
    assert prediction.probs.std(0).mean() > 0.01  # the samples differ
    assert set(prediction.metrics()) == {"accuracy", "nll", "brier", "ece", "mce"}


def test_every_input_sees_the_same_weight_samples(monkeypatch):
    """Sample s of every input, in every batch and chunk, comes from one weight set: record the drawn weights and
    recompute each sample's probabilities for all 25 inputs at once."""
    from pyro_bnn.predict import GuideSource

    bnn = _bnn()
    guide = _guide(bnn, init_scale=0.3)
    drawn = []
    real_draw = GuideSource.draw_globals
    monkeypatch.setattr(GuideSource, "draw_globals", lambda *a: drawn.append(real_draw(*a)) or drawn[-1])
    prediction = predict(bnn, guide, X, num_samples=7, chunk_size=3, batch_size=4)
    assert [next(iter(d.values())).shape[0] for d in drawn] == [3, 3, 1]
    weights = [{name: d[name][i, 0] for name in d} for d in drawn for i in range(len(next(iter(d.values()))))]
    for s, w in enumerate(weights):
        expected = torch.softmax(functional_call(bnn.net, w, (X,)), -1)
        assert torch.allclose(prediction.probs[s], expected, atol=1e-6)


def test_a_shuffling_loader_keeps_examples_and_targets_aligned():
    bnn = _bnn()
    guide = _guide(bnn, init_scale=0.3)
    pyro.set_rng_seed(1)
    from_pair = predict(bnn, guide, (X, Y), num_samples=6, chunk_size=2)
    pyro.set_rng_seed(1)
    shuffled = predict(bnn, guide, BatchLoader(X, Y, 5, shuffle=True, seed=3), num_samples=6, chunk_size=2)
    assert sorted(shuffled.targets.tolist()) == sorted(Y.tolist()) and not torch.equal(shuffled.targets, Y)
    assert shuffled.metrics()["nll"] == pytest.approx(from_pair.metrics()["nll"], rel=1e-5)


def test_automatic_chunks_shrink_with_the_batch_activations():
    from pyro_bnn.predict.batches import data_batches
    from pyro_bnn.predict.predictive import _auto_chunk

    bnn = _bnn()
    small = _auto_chunk(bnn, 10**9, data_batches(X, 2, "predict"), max_bytes=2**20)
    large = _auto_chunk(bnn, 10**9, data_batches(torch.randn(2000, 4), 2000, "predict"), max_bytes=2**20)
    # per sample: 3 weight-sized tensors of 131 weights * 4 B plus, per example, the outputs of Linear(16),
    # Tanh(16), Dropout(16), Linear(3)
    assert small == 2**20 // (3 * 131 * 4 + 2 * 51 * 4)
    assert large == 2**20 // (3 * 131 * 4 + 2000 * 51 * 4)


def test_loader_input_and_targets():
    bnn = _bnn()
    prediction = predict(bnn, _guide(bnn), BatchLoader(X, Y, 8), num_samples=3)
    assert prediction.probs.shape == (3, 25, 3)
    assert torch.equal(prediction.targets, Y)


def test_point_estimate_samples_are_identical_and_equal_the_network():
    bnn = _bnn()
    guide = _guide(bnn, cls=AutoDelta)
    prediction = predict(bnn, guide, X, num_samples=4)
    expected = torch.softmax(functional_call(bnn.net, bnn.initial_values(), (X,)), -1)
    assert torch.allclose(prediction.probs, expected.expand(4, -1, -1), atol=1e-6)


def test_mc_dropout_keeps_dropout_on_and_restores_the_mode():
    bnn = _bnn(dropout=0.5).eval()
    prediction = predict(bnn, _guide(bnn, cls=MCDropout), X, num_samples=5)
    assert prediction.probs.std(0).mean() > 1e-3
    assert not bnn.training
    no_dropout = predict(bnn, _guide(bnn, cls=AutoDelta), X, num_samples=5)
    assert no_dropout.probs.std(0).max() == 0


def _batch_norm_bnn(dropout):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))
    with torch.no_grad():  # running statistics far from a batch's own, so that using the batch's shows
        net[1].running_mean.fill_(0.3)
        net[1].running_var.fill_(0.5)
    return BNN(net, NormalPrior(select=nothing), Categorical(100))


@pytest.mark.parametrize("chunk_size", [None, 1, 4])
def test_mc_dropout_leaves_batch_norm_on_its_running_statistics(chunk_size):
    bnn = _batch_norm_bnn(0.5)
    guide = _guide(bnn, cls=MCDropout)
    before = {k: v.clone() for k, v in bnn.net[1].state_dict().items()}
    prediction = predict(bnn, guide, X, num_samples=6, chunk_size=chunk_size)
    for key, value in bnn.net[1].state_dict().items():
        assert torch.equal(value, before[key]), key  # no pass of a prediction trains batch norm
    assert prediction.probs.std(0).mean() > 1e-3  # dropout is on
    # Oracle: dropout with p = 0 is the identity, so every sample is the eval-mode network (running statistics).
    bnn = _batch_norm_bnn(0.0)
    guide = _guide(bnn, cls=MCDropout)
    with torch.no_grad():  # the guide set-up pass ran in training mode
        bnn.net[1].running_mean.fill_(0.3)
        bnn.net[1].running_var.fill_(0.5)
    prediction = predict(bnn, guide, X, num_samples=3, chunk_size=chunk_size)
    expected = torch.softmax(bnn.net.eval()(X), -1)
    assert torch.allclose(prediction.probs, expected.expand(3, -1, -1), atol=1e-6)


class _OwnDropout(nn.Module):
    def forward(self, x):
        return nn.functional.dropout(x, 0.5, self.training)


def test_mc_dropout_keeps_a_dropout_module_of_ones_own_on():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), _OwnDropout(), nn.Linear(16, 3))
    bnn = BNN(net, NormalPrior(select=nothing), Categorical(100)).eval()
    prediction = predict(bnn, _guide(bnn, cls=MCDropout), X, num_samples=5)
    assert prediction.probs.std(0).mean() > 1e-3 and not bnn.training


def test_mc_dropout_leaves_spectral_norm_state_as_it_was():
    torch.manual_seed(0)
    layer = nn.utils.parametrizations.spectral_norm(nn.Linear(16, 16))
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), layer, nn.Dropout(0.5), nn.Linear(16, 3))
    bnn = BNN(net, NormalPrior(select=nothing), Categorical(100))
    guide = _guide(bnn, cls=MCDropout)
    before = {k: v.clone() for k, v in bnn.net.state_dict().items()}
    prediction = predict(bnn, guide, X, num_samples=4)
    assert prediction.probs.std(0).mean() > 1e-3  # dropout is on
    for key, value in bnn.net.state_dict().items():
        assert torch.equal(value, before[key]), key  # no power iteration ran


def test_posterior_mean_network_uses_the_guide_locations():
    bnn = _bnn()
    guide = _guide(bnn, init_scale=0.5)
    prediction = predict_posterior_mean(bnn, guide, (X, Y))
    locs = {name: guide.median()[name] for name in bnn.site_names}
    expected = torch.softmax(functional_call(bnn.net, locs, (X,)), -1)
    assert prediction.probs.shape == (1, 25, 3)
    assert torch.allclose(prediction.probs[0], expected, atol=1e-6)


def test_deterministic_network():
    bnn = _bnn(prior=NormalPrior(select=nothing))
    prediction = predict(bnn, _guide(bnn, cls=AutoDelta), X, num_samples=3)
    assert prediction.probs.shape == (3, 25, 3)
    assert prediction.probs.std(0).max() == 0


def test_regression_prediction_and_metrics():
    means = torch.tensor([[[0.0], [1.0]], [[2.0], [3.0]]])  # S=2, N=2, D=1
    targets = torch.tensor([[1.0], [1.0]])
    prediction = Prediction(means=means, noise_scale=torch.tensor(0.5), targets=targets)
    assert torch.allclose(prediction.predictive_mean(), torch.tensor([[1.0], [2.0]]))
    assert torch.allclose(prediction.predictive_std(), torch.tensor([[math.sqrt(1 + 0.25)]] * 2))
    log_n = lambda y, m: -0.5 * ((y - m) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)  # noqa: E731
    nll = -0.5 * (
        math.log(0.5 * (math.exp(log_n(1, 0)) + math.exp(log_n(1, 2))))
        + math.log(0.5 * (math.exp(log_n(1, 1)) + math.exp(log_n(1, 3))))
    )
    metrics = prediction.metrics()
    assert metrics["nll"] == pytest.approx(nll, rel=1e-5)
    assert metrics["rmse"] == pytest.approx(math.sqrt(0.5), rel=1e-6)
    assert metrics["coverage"] == pytest.approx(1.0)  # |1 - 1| and |1 - 2| both lie within 2 sd = 2.24


def test_regression_through_predict():
    torch.manual_seed(0)
    bnn = BNN(nn.Linear(4, 2), NormalPrior(), Gaussian(100, scale=0.3))
    guide = AutoNormal(bnn)
    y = torch.randn(25, 2)
    guide(X, y)
    prediction = predict(bnn, guide, (X, y), num_samples=4)
    assert prediction.means.shape == (4, 25, 2)
    assert prediction.noise_scale.item() == pytest.approx(0.3)
    with pytest.raises(ValueError, match="regression prediction"):
        prediction.mean_probs()


def test_bad_arguments():
    bnn = _bnn()
    guide = _guide(bnn)
    with pytest.raises(ValueError, match="num_samples must be an int >= 1, got 0"):
        predict(bnn, guide, X, num_samples=0)
    with pytest.raises(ValueError, match="x has 25 examples but y has 3"):
        predict(bnn, guide, (X, Y[:3]))
    with pytest.raises(ValueError, match="iterate more than once"):
        predict(bnn, guide, iter([(X, Y)]))
    with pytest.raises(ValueError, match="no targets"):
        predict(bnn, guide, X, num_samples=2).metrics()


def test_one_example_without_its_batch_axis_is_refused():
    # nn.Linear takes x of shape (4,): the 3 outputs were read as 3 examples, probs (S, 3) with no N axis
    bnn = _bnn()
    guide = _guide(bnn)
    x = torch.randn(4)
    message = (
        r"^inputs of shape \(4,\) give network outputs of shape \(3,\), not \(N, outputs\) with N = 4, the inputs' "
        r"first axis: pass a batch of inputs \(N, \*input_shape\) \(a single example x as x.unsqueeze\(0\)\)"
    )
    with pytest.raises(ValueError, match=message):
        predict(bnn, guide, x, num_samples=2)
    with pytest.raises(ValueError, match=message):
        predict_posterior_mean(bnn, guide, x)
    assert predict(bnn, guide, x.unsqueeze(0), num_samples=2).probs.shape == (2, 1, 3)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        # a list [x, y] is a loader of two input batches: refused by their shapes, with the hint
        (
            [X, Y],
            r"two tensors of shapes \(25, 4\) and \(25,\), read as two input batches; pass inputs and targets as a",
        ),
        ((X, Y.tolist()), "predict: the targets y are a list; expected a tensor of 25 targets"),
        ([(X, Y.tolist())], "predict: batch 0 has targets of type list; expected a tensor"),
        ([(X, Y[:3])], "predict: batch 0 has 25 inputs but 3 targets"),
        ([(X, Y, Y)], "predict: batch 0 is a tuple of 3; expected inputs x or an"),
        ([[1.0, 2.0]], "predict: batch 0 is a list of 2; expected inputs x or an"),
        (3, "predict: data of type int; expected a tensor, an"),
    ],
)
def test_data_of_the_wrong_form_is_refused_in_one_line(data, match):
    bnn = _bnn()
    with pytest.raises(ValueError, match=match) as error:
        predict(bnn, _guide(bnn), data, num_samples=2)
    assert "\n" not in str(error.value)


def test_a_loader_whose_batches_differ_in_input_shape_still_predicts():
    """Inputs of varying length (padded per batch) are legitimate: a network that pools over them takes each."""

    class MeanPool(nn.Module):
        def forward(self, x):
            return x.mean(1)

    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(MeanPool(), nn.Linear(3, 2)), NormalPrior(), Categorical(8))
    first, second = torch.randn(4, 5, 3), torch.randn(4, 7, 3)
    guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn))
    guide(first, torch.zeros(4, dtype=torch.long))
    prediction = predict(bnn, guide, [first, second], num_samples=3)
    assert prediction.probs.shape == (3, 8, 2)


def test_a_list_of_input_batches_is_still_a_loader():
    bnn = _bnn()
    guide = _guide(bnn)
    pyro.set_rng_seed(0)
    whole = predict(bnn, guide, X, num_samples=3)
    pyro.set_rng_seed(0)
    listed = predict(bnn, guide, [X[:10], X[10:]], num_samples=3)
    torch.testing.assert_close(listed.probs, whole.probs)


def test_flat_guide_predictions_are_filled_block_by_block_from_its_draws():
    """Chunks of 3 draws times batches of 10 inputs: each block holds the softmax of the network under exactly the
    weights FlatMeanField.draw gave for that chunk (re-drawn here under the same seed)."""
    from pyro_bnn.guides import FlatMeanField

    bnn = _bnn()
    guide = FlatMeanField(bnn, init_scale=0.2)
    guide(X[:2], torch.zeros(2, dtype=torch.long))
    torch.manual_seed(11)
    prediction = predict(bnn, guide, X, num_samples=7, chunk_size=3, batch_size=10)
    torch.manual_seed(11)
    expected = []
    for size in (3, 3, 1):
        draws = guide.draw(size)
        for s in range(size):
            weights = {name: value[s, 0] for name, value in draws.items()}
            expected.append(torch.softmax(bnn.apply_parameters(X, weights), -1))
    assert prediction.probs.shape == (7, 25, 3)
    assert torch.allclose(prediction.probs, torch.stack(expected), atol=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize(
    "data",
    [X[:0], (X[:0], Y[:0]), [(X[:0], Y[:0])], [X[:0], X[:0]]],
    ids=["tensor", "pair", "loader", "empty-batches"],
)
def test_data_of_no_rows_is_refused_in_one_line(data, chunk_size):
    """A tensor or pair of 0 rows divided by zero sizing the chunks (chunk_size=None) or returned probs (3, 0, 3)
    (chunk_size=2); now it gets the empty loader's message."""
    bnn = _bnn()
    with pytest.raises(ValueError) as error:
        predict(bnn, _guide(bnn), data, num_samples=3, chunk_size=chunk_size)
    assert str(error.value) == "predict got no data (an empty tensor or loader)"


def test_batches_of_no_rows_in_a_loader_are_left_out():
    """An empty first batch divided by zero sizing the chunks; left out, the prediction is the whole data's."""
    bnn = _bnn()
    guide = _guide(bnn)
    pyro.set_rng_seed(0)
    whole = predict(bnn, guide, (X, Y), num_samples=3)
    pyro.set_rng_seed(0)
    padded = predict(bnn, guide, [(X[:0], Y[:0]), (X, Y), (X[:0], Y[:0])], num_samples=3)
    torch.testing.assert_close(padded.probs, whole.probs)
    torch.testing.assert_close(padded.log_likelihood, whole.log_likelihood)
