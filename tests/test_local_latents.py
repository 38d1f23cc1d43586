"""A per-example latent site (one value per row, inside the data plate) trained by the unchanged Trainer and
predicted by the unchanged predict, against the closed-form optimum of its ELBO."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import WholeDataPlates, parse_guide
from pyro_bnn.infer import RuntimeOptions, Trainer
from pyro_bnn.likelihoods import Gaussian
from pyro_bnn.local_latents import LocalLatent
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior, nothing

PRIOR_SCALE, NOISE = 0.5, 0.4


class InputScale(LocalLatent):
    """z_i ~ N(1, s^2) per example, multiplying the target's input: node noise in the small."""

    def __init__(self, target: str, features: int, scale: float) -> None:
        super().__init__("z", target, (features,))
        self.register_buffer("scale", torch.tensor(scale))

    def prior(self, batch_size):
        loc = torch.ones(batch_size, *self.event_shape, device=self.scale.device)
        return dist.Normal(loc, self.scale).to_event(1)

    def apply(self, inputs, value):
        return inputs * value


class SharedNormalGuide(nn.Module):
    """q(z_i) = N(m, sigma^2) for every row: global parameters, one draw per row inside the data plate."""

    def __init__(self, bnn: BNN) -> None:
        super().__init__()
        self.likelihood = (bnn.likelihood,)  # a tuple: not a submodule
        self.loc = nn.Parameter(torch.ones(1))
        self.rho = nn.Parameter(torch.full((1,), -2.0))

    def forward(self, x, y=None):
        with self.likelihood[0].plate(x.shape[0], x.device):
            q = dist.Normal(self.loc, F.softplus(self.rho)).expand([x.shape[0], 1]).to_event(1)
            return pyro.sample("z", q)


def _toy(n=40):
    torch.manual_seed(0)
    x = torch.rand(n, 1) * 1.5 + 0.5
    y = 1.6 * x + NOISE * torch.randn(n, 1)
    net = nn.Sequential(nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        net[0].weight.fill_(1.0)
    net[0].weight.requires_grad_(False)  # y_i = z_i x_i exactly: the oracle below needs the weight fixed at 1
    bnn = BNN(net, NormalPrior(select=nothing), Gaussian(n, scale=NOISE), [InputScale("0", 1, PRIOR_SCALE)])
    return bnn, x, y


def _optimum(x, y):
    """The shared Normal q maximising sum_i E_q[log N(y_i; z x_i, tau^2)] - N KL(q || N(1, s^2))."""
    n, precision = len(x), 1 / NOISE**2
    a = precision * (x**2).sum() + n / PRIOR_SCALE**2
    return float((precision * (x * y).sum() + n / PRIOR_SCALE**2) / a), math.sqrt(n / float(a))


def test_model_trace_puts_the_latent_inside_the_data_plate():
    bnn, x, y = _toy()
    trace = poutine.trace(bnn).get_trace(x[:5], y[:5])
    site = trace.nodes["z"]
    assert site["value"].shape == (5, 1)
    assert [f.name for f in site["cond_indep_stack"]] == ["data"]
    assert site["scale"] == pytest.approx(40 / 5)
    with pyro.plate("_samples", 3, dim=-2):
        vectorised = poutine.trace(bnn).get_trace(x[:5], y[:5])
    assert vectorised.nodes["z"]["value"].shape == (3, 5, 1)
    assert vectorised.nodes["obs"]["fn"].batch_shape == (3, 5)


def test_per_example_latent_trains_and_predicts_through_the_unchanged_trainer():
    bnn, x, y = _toy()
    guide = SharedNormalGuide(bnn)
    trainer = Trainer(
        bnn,
        guide,
        optim=pyro.optim.Adam({"lr": 0.03}),
        num_particles=16,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.995),
        lr_scheduler_interval="step",  # 800 steps: lr 0.03 -> 5e-4, so the noise of the last steps is small
        seed=0,
        progress=False,
    )
    history = trainer.fit(BatchLoader(x, y, 20), epochs=400)
    assert history[-1]["loss"] < history[0]["loss"]
    loc, scale = _optimum(x, y)
    assert history[-1]["lr"] == pytest.approx(0.03 * 0.995**799)  # the rate of the last of the 800 steps
    assert guide.loc.item() == pytest.approx(loc, abs=0.01)
    assert F.softplus(guide.rho).item() == pytest.approx(scale, rel=0.1)

    x_test = torch.ones(3, 1)
    pyro.set_rng_seed(1)
    prediction = predict(bnn, guide, (x_test, 1.6 * x_test), num_samples=4000)
    assert prediction.means.shape == (4000, 3, 1)
    assert prediction.log_likelihood.shape == (4000, 3)
    # With x = 1 every sampled mean is one draw of z: mean m, sd sigma, drawn afresh for every row.
    assert prediction.means.mean(0).squeeze() == pytest.approx([loc] * 3, abs=0.02)
    assert prediction.means.std(0).squeeze() == pytest.approx([F.softplus(guide.rho).item()] * 3, rel=0.06)
    assert not torch.equal(prediction.means[:, 0], prediction.means[:, 1])


def test_a_test_batch_larger_than_the_training_set_predicts_as_training_sized_batches_do():
    """predict's default batch (1000) refused any test set larger than the N=40 training rows: the guide's data
    plate is the likelihood's training plate. Drawn N rows at a time, 100 rows in one batch give the very draws of
    batches of 40, 40 and 20."""
    bnn, _, _ = _toy()
    guide = SharedNormalGuide(bnn)  # untrained: q(z_i) = N(1, softplus(-2)^2) for every row
    x_test = torch.linspace(0.5, 2.0, 100).unsqueeze(-1)
    predictions = []
    for batch_size in (1000, 40):
        pyro.set_rng_seed(0)
        predictions.append(predict(bnn, guide, (x_test, 1.6 * x_test), num_samples=50, batch_size=batch_size))
    whole, batched = predictions
    assert whole.means.shape == (50, 100, 1)
    torch.testing.assert_close(whole.means, batched.means, rtol=0, atol=0)
    torch.testing.assert_close(whole.log_likelihood, batched.log_likelihood, rtol=0, atol=0)
    z = (whole.means / x_test).flatten()  # the network is y = z x: each mean is one draw of q(z_i)
    assert z.mean().item() == pytest.approx(1.0, abs=0.02)
    assert z.std().item() == pytest.approx(F.softplus(torch.tensor(-2.0)).item(), rel=0.05)
    assert not torch.equal(whole.means[:, :40], whole.means[:, 40:80])  # each block of 40 rows is drawn afresh


def test_latents_of_weight_samples_come_from_their_prior_for_any_batch_size():
    """A source of weight draws gives per-example latents from their prior; 100 rows above N=40 raised too."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1, 1, bias=False))
    bnn = BNN(net, NormalPrior(), Gaussian(40, scale=NOISE), [InputScale("0", 1, PRIOR_SCALE)])
    pyro.set_rng_seed(0)
    prediction = predict(bnn, {"0.weight": torch.ones(100, 1, 1)}, torch.ones(100, 1))
    assert prediction.means.shape == (100, 100, 1)
    z = prediction.means.flatten()  # weight 1 and x = 1: each mean is one prior draw z ~ N(1, 0.5^2)
    assert z.mean().item() == pytest.approx(1.0, abs=0.02)
    assert z.std().item() == pytest.approx(PRIOR_SCALE, rel=0.03)


def test_point_prediction_puts_the_latent_at_its_prior_mean():
    bnn, x, _ = _toy()
    prediction = predict(bnn, {}, x)
    assert torch.allclose(prediction.means[0], x)


@pytest.mark.parametrize("spec", ["autonormal:0.05", "autonormal:rel=0.1", "bbb", "map"])
def test_guides_with_parameters_per_training_example_refuse_minibatches(spec):
    """autonormal and map trained silently on minibatches, their q(z_i) indexed by random examples while the model
    takes the rows in order (AutoNormal's loc_i correlated 0.08 with the per-example optimum on batches of 20, 0.86
    on all 40 rows); bbb crashed with a Pyro shape error."""
    bnn, x, y = _toy()
    guide = parse_guide(spec).build(bnn)
    runtime = RuntimeOptions(seed=0, progress=False)
    trainer = Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), runtime=runtime)
    refused = (
        rf"^the '{spec.split(':')[0]}' guide gives each of the N=40 training examples its own q\(z_i\) of the "
        r"per-example latent 'z', so it takes batches of the whole training set only.* \(it was called on 20 rows.*"
        r"on all 40 training rows at once, or, to train on minibatches or predict new inputs, guide the latents with"
    )
    with pytest.raises(ValueError, match=refused):
        trainer.fit(BatchLoader(x, y, 20), epochs=1)
    bnn, x, y = _toy()
    guide = parse_guide(spec).build(bnn)
    Trainer(bnn, guide, optim=pyro.optim.Adam({"lr": 0.01}), runtime=runtime).fit(BatchLoader(x, y, 40), epochs=2)


def test_a_map_warm_start_of_such_a_guide_refuses_minibatches_before_it_trains():
    """loc=map trained a bare AutoDelta silently on minibatches first (the network's weights moved), and only the
    guide it started refused them afterwards."""
    bnn, x, y = _toy()
    before = {name: value.clone() for name, value in bnn.initial_values().items()}
    trainer = Trainer(
        bnn,
        parse_guide("autonormal:0.05,loc=map"),
        optim=pyro.optim.Adam({"lr": 0.01}),
        runtime=RuntimeOptions(seed=0, progress=False),
    )
    with pytest.raises(ValueError, match=r"^the MAP warm start gives each of the N=40 training examples"):
        trainer.fit(BatchLoader(x, y, 20), epochs=1)
    for name, value in bnn.initial_values().items():
        assert torch.equal(value, before[name]), name


def test_a_guide_with_whole_data_plates_gives_row_i_its_own_parameters():
    """On all N rows the guide's plate is the model's: row i is drawn from loc_i (the oracle: locs set by hand)."""
    bnn, x, y = _toy()
    guide = AutoNormal(bnn, init_scale=1e-6, create_plates=WholeDataPlates(bnn, "AutoNormal"))
    guide(x, y)
    with torch.no_grad():
        guide.locs.z.copy_(torch.arange(40.0).unsqueeze(-1))
    trace = poutine.trace(guide).get_trace(x, y)
    torch.testing.assert_close(trace.nodes["z"]["value"], torch.arange(40.0).unsqueeze(-1), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"^AutoNormal gives each of the N=40 training examples .* called on 5 rows"):
        guide(x[:5], y[:5])


@pytest.mark.parametrize("spec", ["flat:0.05", "lowrank"])
def test_guides_of_global_sites_only_point_to_a_guide_of_the_latents(spec):
    bnn, x, y = _toy()
    with pytest.raises(ValueError, match="'z' lies in plate.*shared or amortised guide that opens the data plate"):
        parse_guide(spec).build(bnn)(x, y)


def test_latents_are_checked_when_the_model_is_built():
    net = nn.Sequential(nn.Linear(1, 1))
    with pytest.raises(ValueError, match="targets 'fc9', which is not a submodule"):
        BNN(net, NormalPrior(), Gaussian(4), [InputScale("fc9", 1, 1.0)])
    with pytest.raises(ValueError, match="site name '0.weight' is already used"):
        latent = InputScale("0", 1, 1.0)
        latent.name = "0.weight"
        BNN(nn.Sequential(nn.Linear(1, 1)), NormalPrior(), Gaussian(4), [latent])
