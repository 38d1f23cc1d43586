"""Single-sample, posterior-mean and ensemble accuracy from one prediction (``predict(..., point=True)``,
``Prediction.accuracies``), and their reliability diagrams side by side."""

import numpy as np
import pyro
import pytest
import torch
from matplotlib.figure import Figure
from pyro.infer.autoguide import AutoNormal
from torch import nn
from torch.func import functional_call

from pyro_bnn import BNN
from pyro_bnn.evaluation import accuracy, calibration
from pyro_bnn.guides import BayesByBackprop, FlatMeanField, MCDropout, init_to_network
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.plots.reliability import plot_reliability_comparison
from pyro_bnn.predict import AccuracyBreakdown, PointEstimate, Prediction, Samples, predict, predict_posterior_mean
from pyro_bnn.priors import NormalPrior

X = torch.randn(40, 4)


def _bnn(dropout=0.0):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 3))
    return BNN(net, NormalPrior(), Categorical(100))


def _labels(bnn):
    """The initial network's classes with every fourth one moved on: accuracy 0.75 at the initial weights."""
    with torch.no_grad():
        labels = functional_call(bnn.net.eval(), bnn.initial_values(), (X,)).argmax(-1)
    labels[::4] = (labels[::4] + 1) % 3
    return labels


GUIDES = {
    "autonormal": lambda bnn: AutoNormal(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.3),
    "bbb": lambda bnn: BayesByBackprop(bnn, loc_init=None, init_loc_fn=init_to_network(bnn), rho_init=(-1.5, -1.0)),
    "flat": lambda bnn: FlatMeanField(bnn, init_loc_fn=init_to_network(bnn), init_scale=0.3),
}


def _trained_guide(name, bnn, y):
    guide = GUIDES[name](bnn)
    guide(X, y)
    return guide


# ------------------------------------------------------------------------------------------ identical samples
def test_the_ensemble_of_identical_samples_is_as_accurate_as_one_sample():
    bnn = _bnn()
    y = _labels(bnn)
    values = {name: value.clone() for name, value in bnn.initial_values().items()}
    single = predict(bnn, PointEstimate(values), (X, y), num_samples=1).accuracies()
    expanded = predict(bnn, PointEstimate(values), (X, y), num_samples=6).accuracies()
    assert single.ensemble == pytest.approx(0.75)
    assert expanded.per_sample == (single.ensemble,) * 6
    assert expanded.ensemble == single.ensemble
    # The same weights drawn six times as a dict of samples: six networks run side by side, one result.
    repeated = {name: value.expand(6, *value.shape) for name, value in values.items()}
    replayed = predict(bnn, Samples(repeated), (X, y), chunk_size=4).accuracies()
    assert replayed.per_sample == (single.ensemble,) * 6
    assert replayed.ensemble == single.ensemble


# -------------------------------------------------------------------------------------------- hand-made probs
def test_hand_made_probabilities():
    probs = torch.tensor(
        [
            # sample 0 predicts 0, 1, 2, 0 (the last row a tie of classes 0 and 1: the lower index wins)
            [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.4, 0.4, 0.2]],
            # sample 1 predicts 1, 1, 0, 1
            [[0.3, 0.6, 0.1], [0.2, 0.7, 0.1], [0.5, 0.1, 0.4], [0.1, 0.6, 0.3]],
            # sample 2 predicts 0, 2, 2, 1
            [[0.8, 0.1, 0.1], [0.1, 0.3, 0.6], [0.1, 0.1, 0.8], [0.2, 0.5, 0.3]],
        ]
    )
    targets = torch.tensor([0, 1, 2, 1])
    # mean probs: [0.6, 0.3, 0.1], [0.133, 0.6, 0.267], [0.267, 0.133, 0.6], [0.233, 0.5, 0.267] -> 0, 1, 2, 1
    point = Prediction(probs=torch.tensor([[[0.1, 0.9, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]]))
    result = Prediction(probs=probs, targets=targets, point=point).accuracies()
    assert isinstance(result, AccuracyBreakdown)
    assert result.per_sample == (0.75, 0.5, 0.75)  # 1.0 for sample 0 if its tie went to class 1
    assert result.ensemble == 1.0 == accuracy(probs, targets)
    assert result.posterior_mean == 0.5  # predicts 1, 1, 2, 0
    assert (result.sample_min, result.sample_mean, result.sample_max) == (0.5, pytest.approx(2 / 3), 0.75)
    assert Prediction(probs=probs, targets=targets).accuracies().posterior_mean is None


def test_accuracies_refuse_regression_and_missing_targets():
    regression = Prediction(means=torch.zeros(2, 3, 1), noise_scale=torch.tensor(1.0), targets=torch.zeros(3, 1))
    with pytest.raises(ValueError, match="regression"):
        regression.accuracies()
    with pytest.raises(ValueError, match="no targets"):
        Prediction(probs=torch.full((2, 3, 2), 0.5)).accuracies()


# ------------------------------------------------------------------------------------- the point network
@pytest.mark.parametrize("guide_name", sorted(GUIDES))
def test_the_point_network_is_the_posterior_mean_network(guide_name):
    bnn = _bnn()
    y = _labels(bnn)
    guide = _trained_guide(guide_name, bnn, y)
    if guide_name != "autonormal":  # the Normal's loc is its median for every weight site (all real-valued)
        median = guide.median()
        for name, (loc, _) in guide.loc_scale().items():
            assert torch.equal(median[name], loc.detach())
    pyro.set_rng_seed(3)
    prediction = predict(bnn, guide, (X, y), num_samples=8, chunk_size=3, batch_size=16, point=True)
    mean_net = predict_posterior_mean(bnn, guide, (X, y), batch_size=16)
    assert prediction.point.probs.shape == (1, 40, 3)
    assert torch.equal(prediction.point.probs, mean_net.probs)
    assert torch.equal(prediction.point.targets, y)
    locs = {name: guide.median()[name] for name in bnn.site_names}
    expected = torch.softmax(functional_call(bnn.net, locs, (X,)), -1)
    assert torch.allclose(prediction.point.probs[0], expected, atol=1e-6)

    result = prediction.accuracies()
    assert result.posterior_mean == mean_net.metrics()["accuracy"] == pytest.approx(0.75)
    assert result.ensemble == prediction.metrics()["accuracy"]
    assert len(result.per_sample) == 8
    assert len(set(result.per_sample)) > 1  # the samples are different networks
    for s, value in enumerate(result.per_sample):
        assert value == accuracy(prediction.probs[s], y)

    # Running the point network draws nothing: the samples are those of a call without it.
    pyro.set_rng_seed(3)
    plain = predict(bnn, guide, (X, y), num_samples=8, chunk_size=3, batch_size=16)
    assert plain.point is None
    assert torch.equal(plain.probs, prediction.probs)


def test_a_dict_of_samples_has_no_point_network():
    bnn = _bnn()
    y = _labels(bnn)
    draws = {name: value + 0.1 * torch.randn(5, *value.shape) for name, value in bnn.initial_values().items()}
    prediction = predict(bnn, draws, (X, y), point=True)
    assert prediction.point is None
    assert prediction.accuracies().posterior_mean is None
    with pytest.raises(ValueError, match="Samples source has no point network"):
        predict_posterior_mean(bnn, draws, (X, y))


def test_a_point_estimate_is_its_own_point_network():
    bnn = _bnn()
    y = _labels(bnn)
    values = {name: value.clone() for name, value in bnn.initial_values().items()}
    prediction = predict(bnn, values, (X, y), num_samples=3, point=True)
    assert torch.equal(prediction.point.probs, prediction.probs[:1])
    assert prediction.accuracies().posterior_mean == prediction.accuracies().ensemble == pytest.approx(0.75)
    assert torch.equal(predict_posterior_mean(bnn, values, (X, y)).probs, prediction.point.probs)


def test_the_point_network_of_mc_dropout_runs_without_dropout():
    bnn = _bnn(dropout=0.5)
    y = _labels(bnn)
    guide = MCDropout(bnn, init_loc_fn=init_to_network(bnn))
    guide(X, y)
    prediction = predict(bnn, guide, (X, y), num_samples=6, point=True)
    assert prediction.probs.std(0).mean() > 1e-3  # dropout on for the samples
    with torch.no_grad():
        expected = torch.softmax(functional_call(bnn.net.eval(), guide.median(), (X,)), -1)
    assert torch.allclose(prediction.point.probs[0], expected, atol=1e-6)
    assert prediction.accuracies().posterior_mean == pytest.approx(0.75)


def test_regression_point_network():
    torch.manual_seed(0)
    bnn = BNN(nn.Linear(4, 2), NormalPrior(), Gaussian(100, scale=0.3))
    y = torch.randn(40, 2)
    guide = FlatMeanField(bnn, init_scale=0.3)
    guide(X, y)
    prediction = predict(bnn, guide, (X, y), num_samples=4, point=True)
    assert prediction.point.means.shape == (1, 40, 2)
    assert torch.equal(prediction.point.means, predict_posterior_mean(bnn, guide, (X, y)).means)
    assert prediction.point.noise_scale.item() == pytest.approx(0.3)
    with pytest.raises(ValueError, match="regression"):
        prediction.accuracies()


# --------------------------------------------------------------------------------------- reliability diagrams
def test_reliability_comparison_draws_a_sample_the_posterior_mean_and_the_ensemble():
    bnn = _bnn()
    y = _labels(bnn)
    prediction = predict(bnn, _trained_guide("flat", bnn, y), (X, y), num_samples=5, point=True)
    figure = plot_reliability_comparison(prediction, n_bins=5, sample=2, title="tiny")
    assert isinstance(figure, Figure)
    diagrams = [ax for ax in figure.axes if ax.get_title()]
    assert len(diagrams) == 3 and len(figure.axes) == 6  # each diagram has its confidence histogram below
    result = prediction.accuracies()
    titles = [ax.get_title() for ax in diagrams]
    assert titles == [
        f"sample 2 (accuracy {result.per_sample[2]:.2%})",
        f"posterior mean (accuracy {result.posterior_mean:.2%})",
        f"ensemble of 5 (accuracy {result.ensemble:.2%})",
    ]
    sources = [prediction.probs[2], prediction.point.probs, prediction.probs]
    for ax, probs in zip(diagrams, sources, strict=True):
        expected = calibration(probs, y, n_bins=5)
        bars = next(c for c in ax.containers if "ECE" in c.get_label())
        filled = (expected.bin_counts > 0).numpy()
        np.testing.assert_allclose([bar.get_height() for bar in bars], expected.bin_accuracy.numpy()[filled])
    assert figure.get_suptitle() == "tiny"


def test_reliability_comparison_without_a_point_network_and_bad_arguments():
    bnn = _bnn()
    y = _labels(bnn)
    prediction = predict(bnn, _trained_guide("flat", bnn, y), (X, y), num_samples=5)
    figure = plot_reliability_comparison(prediction)
    assert [ax.get_title().split(" (")[0] for ax in figure.axes if ax.get_title()] == ["sample 0", "ensemble of 5"]
    with pytest.raises(ValueError, match=r"sample must be an int in \[0, 5\)"):
        plot_reliability_comparison(prediction, sample=5)
    with pytest.raises(ValueError, match="no targets"):
        plot_reliability_comparison(predict(bnn, _trained_guide("flat", bnn, y), X, num_samples=2))


def test_accuracies_and_point_network_on_device(device):
    """Model and guide on ``device``, data on the CPU: the point network and every accuracy come out as on the CPU."""
    bnn = _bnn()
    y = _labels(bnn)
    guide = _trained_guide("flat", bnn, y)
    pyro.set_rng_seed(4)
    on_cpu = predict(bnn, guide, (X, y), num_samples=4, point=True).accuracies()
    bnn.to(device)
    guide.to(device)
    pyro.set_rng_seed(4)
    prediction = predict(bnn, guide, (X, y), num_samples=4, point=True)
    assert prediction.point.probs.device.type == device.type
    result = prediction.accuracies()
    assert result.posterior_mean == on_cpu.posterior_mean == pytest.approx(0.75)
    if device.type == "cpu":
        assert result == on_cpu
