"""Guides of a composed model with per-example latents: a user's amortised guide beside the networks' guides."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.compose import RandomFunction, model_guide
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.priors import NormalPrior

N, NOISE = 40, 0.5


def _data(n: int = N):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, generator=g)
    return x, 2 * x.squeeze(1) + torch.randn(n, generator=g)


def _latent_offset_model():
    """``y_i ~ N(w x_i + b + z_i, 0.5^2)`` with a per-example offset ``z_i ~ N(0, 1)`` in the data plate."""
    torch.manual_seed(0)
    f = RandomFunction(BNN(nn.Linear(1, 1), NormalPrior(0.0, 1.0), Gaussian(1)), prefix="f")

    def model(x, y=None):
        mean = f(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("y", dist.Normal(mean + z, NOISE), obs=y)

    return f, model


def encoder(x, y=None):
    """A fixed amortised guide of z, opening the model's data plate itself."""
    with pyro.plate("data", x.shape[0]):
        pyro.sample("z", dist.Normal(0.3 * y, 0.4))


class Encoder(nn.Module):
    """A trainable amortised guide ``q(z_i | x_i, y_i) = N(a (y_i - 2 x_i), exp(log_s)^2)``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.5))
        self.log_s = nn.Parameter(torch.tensor(0.0))

    def forward(self, x, y=None):
        with pyro.plate("data", x.shape[0]):
            return {"z": pyro.sample("z", dist.Normal(self.a * (y - 2 * x.squeeze(-1)), self.log_s.exp()))}


def test_a_users_guide_that_opens_the_data_plate_composes_with_the_network_guides():
    """The reviewer's repro raised 'Multiple sample sites named data'; the composed guide now draws what the
    network's guide and the user's guide draw when run by hand, one after the other, and so has their loss."""
    x, y = _data()
    f, model = _latent_offset_model()
    guide = model_guide(model, f, guide="flat:0.1", rest=lambda blocked: encoder)
    by_hand = f.guide("flat:0.1")

    def hand_guide(x, y=None):
        by_hand(x, y)
        encoder(x, y)

    elbo = Trace_ELBO(num_particles=8, vectorize_particles=True, max_plate_nesting=1)
    losses = []
    for g in (guide, hand_guide):
        g(x, y)  # sets the guides up (their first run draws the network guide's set-up batch)
        pyro.set_rng_seed(3)
        losses.append(elbo.loss(model, g, x, y))
    assert losses[0] == losses[1]
    trace = poutine.trace(guide).get_trace(x, y)
    assert [name for name in trace.stochastic_nodes if name != "data"] == [*f.site_names, "z"]
    assert torch.equal(trace.nodes["z"]["fn"].loc, 0.3 * y)


def test_a_users_guide_module_is_a_part_whose_parameters_train():
    x, y = _data()
    f, model = _latent_offset_model()
    encoder_module = Encoder()
    guide = model_guide(model, f, rest=lambda blocked: encoder_module)
    guide(x, y)
    names = {name for name, _ in guide.named_parameters()}
    assert any(name.endswith(".a") for name in names) and any(name.endswith(".log_s") for name in names)
    assert guide.median(x, y).keys() == set(f.site_names)  # Pyro's AutoCallable has no median of its own
