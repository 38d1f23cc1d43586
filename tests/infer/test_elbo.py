"""The ELBO the trainer optimises, against closed forms: analytic KL plus the scaled NLL."""

import pyro
import pytest
import torch
from pyro import poutine
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import BayesByBackprop
from pyro_bnn.infer import make_elbo, scale_latents
from pyro_bnn.infer.elbo import DataTermRecorder
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

X = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.3], [-0.7, 0.2, 0.9], [0.1, 1.1, -1.4]])
Y = torch.tensor([0, 1, 1, 0])


def _tiny(dataset_size):
    torch.manual_seed(3)
    bnn = BNN(nn.Linear(3, 2), NormalPrior(0.0, 1.5), Categorical(dataset_size))
    guide = BayesByBackprop(bnn, rho_init=(-1.0, 0.5))
    guide(X, Y)
    return bnn, guide


def _closed_form_terms(bnn, guide, seed):
    """KL(q || p) in closed form and the NLL of the weights the guide draws with this seed."""
    kl = 0.0
    for name in bnn.site_names:
        loc, scale = guide._get_loc_and_scale(name)
        q, p = torch.distributions.Normal(loc, scale), torch.distributions.Normal(0.0, 1.5)
        kl = kl + torch.distributions.kl_divergence(q, p).sum()
    pyro.set_rng_seed(seed)
    weights = poutine.trace(guide).get_trace(X, Y)
    logits = X @ weights.nodes["weight"]["value"].T + weights.nodes["bias"]["value"]
    nll = -torch.distributions.Categorical(logits=logits).log_prob(Y).sum()
    return kl.item(), nll.item()


@pytest.mark.parametrize("dataset_size", [4, 8])
def test_meanfield_elbo_equals_closed_form_kl_plus_scaled_nll(dataset_size):
    bnn, guide = _tiny(dataset_size)
    pyro.set_rng_seed(11)
    loss = make_elbo("meanfield").loss(bnn, guide, X, Y)
    kl, nll = _closed_form_terms(bnn, guide, seed=11)
    # The data plate scales the minibatch log-likelihood by N / B = dataset_size / 4.
    assert loss == pytest.approx(kl + nll * dataset_size / 4, rel=1e-5)


def test_doubling_the_dataset_doubles_only_the_data_term():
    losses = {}
    for n in (4, 8):
        bnn, guide = _tiny(n)
        pyro.set_rng_seed(5)
        losses[n] = make_elbo("meanfield").loss(bnn, guide, X, Y)
    kl, nll = _closed_form_terms(*_tiny(4), seed=5)
    assert losses[8] - losses[4] == pytest.approx(nll, rel=1e-5)
    assert 2 * losses[4] - losses[8] == pytest.approx(kl, rel=1e-5)


@pytest.mark.parametrize("kind", ["trace", "meanfield"])
def test_zero_kl_weight_leaves_the_data_term_alone(kind):
    bnn, guide = _tiny(8)
    elbo = make_elbo(kind)
    recorder = DataTermRecorder(elbo)
    pyro.set_rng_seed(2)
    with scale_latents(0.0):
        loss = elbo.loss(bnn, guide, X, Y)
    _, nll = _closed_form_terms(bnn, guide, seed=2)
    assert loss == pytest.approx(2 * nll, rel=1e-5)
    assert recorder.pop() == pytest.approx(2 * nll, rel=1e-5)


def test_kl_weight_scales_only_the_kl_term():
    bnn, guide = _tiny(4)
    pyro.set_rng_seed(7)
    with scale_latents(0.3):
        loss = make_elbo("meanfield").loss(bnn, guide, X, Y)
    kl, nll = _closed_form_terms(bnn, guide, seed=7)
    assert loss == pytest.approx(0.3 * kl + nll, rel=1e-5)


def test_trace_elbo_kl_estimate_is_unbiased():
    """Trace_ELBO's Monte Carlo KL averages to the closed form (many vectorised particles)."""
    bnn, guide = _tiny(4)
    elbo = make_elbo("trace", num_particles=20_000, vectorize_particles=True)
    recorder = DataTermRecorder(elbo)
    loss = elbo.loss(bnn, guide, X, Y)
    kl_estimate = loss - recorder.pop()
    kl, _ = _closed_form_terms(bnn, guide, seed=0)
    assert kl_estimate == pytest.approx(kl, rel=0.02)


def test_vectorised_and_sequential_particles_agree_in_expectation():
    bnn, guide = _tiny(4)
    vectorised = make_elbo("meanfield", num_particles=4000, vectorize_particles=True).loss(bnn, guide, X, Y)
    sequential = sum(make_elbo("meanfield").loss(bnn, guide, X, Y) for _ in range(400)) / 400
    assert vectorised == pytest.approx(sequential, rel=0.02)


def test_negative_kl_weight_is_refused():
    with pytest.raises(ValueError, match="KL weight must be a finite number >= 0, got -1.0"):
        scale_latents(-1.0)


def _hierarchical(dataset_size=4):
    from pyro_bnn.priors import HierarchicalPrior

    torch.manual_seed(3)
    return BNN(nn.Linear(3, 2), HierarchicalPrior("normal", "halfcauchy", [1.0]), Categorical(dataset_size))


def test_meanfield_and_trace_agree_with_a_constrained_site_under_bbb():
    """Layer scales are positive: BBB samples them through exp, and both ELBOs must include its Jacobian."""
    bnn = _hierarchical()
    guide = BayesByBackprop(bnn, rho_init=(-1.0, -0.5))
    guide(X, Y)
    with torch.no_grad():
        guide.locs.prior_scale.fill_(2.0)  # a scale far from 1, where a lost Jacobian shows
    trace = make_elbo("trace", num_particles=50_000, vectorize_particles=True).loss(bnn, guide, X, Y)
    meanfield = make_elbo("meanfield", num_particles=50_000, vectorize_particles=True).loss(bnn, guide, X, Y)
    assert meanfield == pytest.approx(trace, abs=0.05)


def test_meanfield_refuses_autonormal_with_a_constrained_site():
    from pyro.infer.autoguide import AutoNormal

    from pyro_bnn.data import BatchLoader
    from pyro_bnn.infer import Trainer

    bnn = _hierarchical()
    trainer = Trainer(bnn, AutoNormal, elbo="meanfield", progress=False)
    with pytest.raises(ValueError, match="cannot score the guide's constrained site 'prior_scale'"):
        trainer.fit(BatchLoader(X, Y, 4), 1)
