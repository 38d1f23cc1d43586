"""Predictive maps against a logistic regression with fixed weights (known probabilities and decision boundary),
and against two weight samples (known spread and mutual information)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.evaluation import entropy_decomposition
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.plots import plot_predictive_map
from pyro_bnn.predict import map_bounds, predictive_map
from pyro_bnn.priors import NormalPrior

W = torch.tensor([[0.0, 0.0], [2.0, -1.0]])
B = torch.tensor([0.0, 0.5])
"""Logits (0, 2x - y + 0.5): p(class 1) = sigmoid(2x - y + 0.5), boundary y = 2x + 0.5."""


def _bnn() -> BNN:
    return BNN(nn.Linear(2, 2), NormalPrior(), Categorical(10))


def test_a_fixed_logistic_regression_maps_its_own_probabilities_and_boundary():
    pmap = predictive_map(_bnn(), {"weight": W, "bias": B}, ((-1.0, 1.0), (-2.0, 3.0)), resolution=41)
    x, y = pmap.x, pmap.y
    assert x.shape == (41,) and y.shape == (41,) and pmap.probability.shape == (41, 41)
    expected = torch.sigmoid(2 * x[None, :] - y[:, None] + 0.5)  # row i is y[i]
    torch.testing.assert_close(pmap.probability, expected)
    # above the line y = 2x + 0.5 the network says class 0, below it class 1
    above = y[:, None] > 2 * x[None, :] + 0.5 + 1e-6
    below = y[:, None] < 2 * x[None, :] + 0.5 - 1e-6
    assert (pmap.probability[above] < 0.5).all() and (pmap.probability[below] > 0.5).all()
    assert pmap.sd.abs().max() == 0 and pmap.mutual_information.abs().max() < 1e-6  # one point network
    assert pmap.num_samples == 1


def test_two_weight_samples_give_their_spread_and_disagreement():
    flipped = torch.stack([W, -W])  # the second sample swaps the classes
    samples = {"weight": flipped, "bias": torch.stack([B, -B])}
    pmap = predictive_map(_bnn(), samples, ((-1.0, 1.0), (-1.0, 1.0)), resolution=7, positive_class=1)
    x, y = pmap.x, pmap.y
    p = torch.sigmoid(2 * x[None, :] - y[:, None] + 0.5)
    q = torch.sigmoid(-(2 * x[None, :] - y[:, None] + 0.5))
    torch.testing.assert_close(pmap.probability, (p + q) / 2)  # = 0.5 everywhere
    torch.testing.assert_close(pmap.sd, (p - q).abs() / 2)
    probs = torch.stack([torch.stack([1 - p, p], -1), torch.stack([1 - q, q], -1)]).reshape(2, -1, 2)
    torch.testing.assert_close(pmap.mutual_information, entropy_decomposition(probs).epistemic.reshape(7, 7))
    assert float(pmap.mutual_information.max()) <= math.log(2) + 1e-6


def test_bounds_cover_the_points_with_a_margin_and_bad_arguments_fail_in_one_line():
    points = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    assert map_bounds(points, margin=0.5) == ((-0.5, 2.5), (-1.5, 1.5))
    source = {"weight": W, "bias": B}
    for bounds, message in [(((1, 0), (0, 1)), "low < high"), ((1, 2), "bounds must be")]:
        with pytest.raises(ValueError, match=message):
            predictive_map(_bnn(), source, bounds)
    with pytest.raises(ValueError, match="resolution must be an int >= 2, got 1"):
        predictive_map(_bnn(), source, ((0, 1), (0, 1)), resolution=1)
    with pytest.raises(ValueError, match=r"positive_class must be an int in \[0, 2\), got 2"):
        predictive_map(_bnn(), source, ((0, 1), (0, 1)), positive_class=2)
    with pytest.raises(ValueError, match="points must be"):
        map_bounds(torch.zeros(3, 3))


def test_the_plot_draws_one_panel_per_quantity():
    pmap = predictive_map(_bnn(), {"weight": W, "bias": B}, ((-1.0, 1.0), (-1.0, 1.0)), resolution=11)
    points, labels = torch.tensor([[0.0, 0.0], [0.5, -0.5]]), torch.tensor([1, 0])
    figure = plot_predictive_map(pmap, points, labels, quantities=("probability", "sd", "mutual_information"))
    assert len([ax for ax in figure.axes if ax.get_label() != "<colorbar>"]) == 3
    with pytest.raises(ValueError, match="unknown map quantity"):
        plot_predictive_map(pmap, quantities=("entropy",))
    with pytest.raises(ValueError, match="labels must be"):
        plot_predictive_map(pmap, points, torch.tensor([1]))
