"""The SG-MCMC log joint against a hand computation and against Pyro's trace of the model; what it refuses."""

from __future__ import annotations

import math

import pyro.distributions as dist
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.local_latents import LocalLatent
from pyro_bnn.models import build_model
from pyro_bnn.priors import FlatPrior, HierarchicalPrior, LaplacePrior, NormalPrior, ScaleMixturePrior
from pyro_bnn.sgmcmc import LogJoint, check_supported, model_log_joint


def _normal_logpdf(value: float, loc: float, scale: float) -> float:
    return -0.5 * ((value - loc) / scale) ** 2 - math.log(scale) - 0.5 * math.log(2 * math.pi)


def test_log_joint_is_prior_plus_n_over_b_minibatch_likelihood_by_hand():
    # y = w1 x1 + w2 x2 + b + N(0, 0.5^2) with w ~ N(0.1, 0.7^2), N = 6 training examples, a minibatch of B = 2.
    bnn = BNN(nn.Linear(2, 1), NormalPrior(0.1, 0.7), Gaussian(6, scale=0.5))
    weights = {"weight": torch.tensor([[0.3, -1.2]]), "bias": torch.tensor([0.4])}
    x = torch.tensor([[1.0, 2.0], [-0.5, 0.25]])
    y = torch.tensor([[-1.0], [0.9]])
    prior = sum(_normal_logpdf(w, 0.1, 0.7) for w in (0.3, -1.2, 0.4))
    means = [0.3 * 1.0 - 1.2 * 2.0 + 0.4, 0.3 * -0.5 - 1.2 * 0.25 + 0.4]
    likelihood = sum(_normal_logpdf(t, m, 0.5) for t, m in zip((-1.0, 0.9), means, strict=True))
    expected = prior + 6 / 2 * likelihood

    log_joint = LogJoint(bnn)
    flat = log_joint.flatten(weights)
    assert flat.tolist() == pytest.approx([0.3, -1.2, 0.4])
    assert log_joint.scale(2) == 3.0
    assert float(log_joint(flat, x, y)) == pytest.approx(expected, rel=1e-6)
    # Pyro's own trace applies the same N/B through the likelihood's data plate.
    assert float(model_log_joint(bnn, weights, x, y)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "prior", [LaplacePrior(0.0, 0.5), ScaleMixturePrior(0.5, 1.0, 0.01), FlatPrior()], ids=["laplace", "mix", "flat"]
)
def test_log_joint_and_its_gradient_equal_the_traced_model(prior):
    torch.manual_seed(3)
    bnn = BNN(build_model("mlp:5", input_shape=(3,), num_classes=4), prior, Categorical(50))
    log_joint = LogJoint(bnn)
    x, y = torch.randn(7, 3), torch.randint(0, 4, (7,))
    flat = torch.randn(log_joint.dim, requires_grad=True)
    fast = log_joint(flat, x, y)
    (fast_grad,) = torch.autograd.grad(fast, flat)
    reference = model_log_joint(bnn, log_joint.unflatten(flat), x, y)
    (reference_grad,) = torch.autograd.grad(reference, flat)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(fast_grad, reference_grad, rtol=1e-5, atol=1e-5)


def test_rows_of_flat_weights_are_scored_as_separate_chains():
    torch.manual_seed(4)
    bnn = BNN(build_model("mlp:4", input_shape=(2,), num_classes=3), NormalPrior(0.0, 1.0), Categorical(20))
    log_joint = LogJoint(bnn)
    x, y = torch.randn(5, 2), torch.randint(0, 3, (5,))
    flat = torch.randn(3, log_joint.dim)
    rows = torch.stack([log_joint(row, x, y) for row in flat])
    torch.testing.assert_close(log_joint(flat, x, y), rows, rtol=1e-5, atol=1e-4)


class _InputScale(LocalLatent):
    def __init__(self) -> None:
        super().__init__("z", "", (2,))

    def prior(self, batch_size):
        return dist.Normal(torch.ones(batch_size, 2), 0.1).to_event(1)

    def apply(self, inputs, value):
        return inputs * value


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: BNN(nn.Linear(2, 1), HierarchicalPrior(), Gaussian(5)), "hyperparameter sites"),
        (lambda: BNN(nn.Linear(2, 1), NormalPrior(0, 1), Gaussian(5), [_InputScale()]), "per-example latents"),
        (lambda: BNN(nn.Linear(2, 1), NormalPrior(0, 1), Gaussian(5, kl_scale="paper")), "kl_scale='dataset'"),
        (lambda: nn.Linear(2, 1), "samples a pyro_bnn BNN"),
    ],
    ids=["hierarchical", "local-latents", "paper-scale", "not-a-bnn"],
)
def test_models_it_cannot_sample_are_refused_in_one_line(build, match):
    with pytest.raises(ValueError, match=match) as error:
        check_supported(build())
    assert "\n" not in str(error.value)


def test_a_minibatch_larger_than_the_training_set_is_refused():
    bnn = BNN(nn.Linear(2, 1), NormalPrior(0, 1), Gaussian(3))
    with pytest.raises(ValueError, match="larger than dataset_size=3"):
        LogJoint(bnn)(torch.zeros(3), torch.zeros(4, 2), torch.zeros(4, 1))
