"""The Bayes-optimal accuracy of moons and circles: the generating posterior is calibrated against labelled draws
from scikit-learn's generators (a wrong curve would make it disagree), and the accuracy falls from 1 towards 0.5
as the noise grows."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn.data.bayes_optimal import ROW_CHUNK, _curves, bayes_optimal_accuracy, class_posterior
from pyro_bnn.data.synthetic import two_circles, two_moons


@pytest.mark.parametrize(("name", "noise"), [("moons", 0.4), ("circles", 0.35), ("moons", 0.2)])
def test_the_posterior_predicts_the_generators_labels_as_often_as_it_claims(name, noise):
    draw = two_moons if name == "moons" else two_circles
    x, y = draw(n_samples=20_000, noise=noise, seed=5)
    posterior = class_posterior(x, name, noise)
    claimed = float(posterior.max(1).values.mean())
    achieved = float((posterior.argmax(1) == y).double().mean())
    assert achieved == pytest.approx(claimed, abs=0.01)  # about 4 standard errors
    # the labels' own log-likelihood under the posterior beats a posterior with the classes swapped
    assert posterior[range(len(y)), y].log().mean() > posterior[range(len(y)), 1 - y].log().mean()


def test_accuracy_falls_from_one_towards_a_half_with_the_noise():
    values = [bayes_optimal_accuracy("moons", noise, n_points=4_000) for noise in (0.05, 0.3, 0.6, 10.0)]
    # at noise 10 only the class means, about 1.1 apart, tell the classes apart
    assert values[0] > 0.999 and values == sorted(values, reverse=True) and values[-1] < 0.53
    with pytest.raises(ValueError, match="noise must be a finite number > 0, got 0"):
        bayes_optimal_accuracy("moons", 0)
    with pytest.raises(ValueError, match="'moons' and 'circles', got 'spirals'"):
        class_posterior(two_moons(n_samples=4)[0], "spirals", 0.1)


@pytest.mark.parametrize("name", ["moons", "circles"])
def test_the_posterior_in_blocks_of_inputs_is_the_mixture_density_ratio_to_the_bit(name):
    # the oracle: the class densities' formula over all inputs at once; 600 inputs end in a partial block
    x, _ = (two_moons if name == "moons" else two_circles)(n_samples=600, noise=0.3, seed=2)
    x = x.to(torch.float64)
    log_densities = [
        torch.logsumexp(-torch.cdist(x, curve).pow(2) / (2 * 0.3**2), dim=1) for curve in _curves(name, 0.5)
    ]
    expected = torch.softmax(torch.stack(log_densities, 1), dim=1)
    assert 600 % ROW_CHUNK != 0
    assert torch.equal(class_posterior(x, name, 0.3, factor=0.5), expected)
