"""Training objectives against closed forms (analytic KL plus the scaled NLL) and against Pyro's own ELBOs."""

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import BayesByBackprop
from pyro_bnn.infer import MeanFieldELBO, Objective, TraceELBO, make_objective, scale_latents
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

X = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.3], [-0.7, 0.2, 0.9], [0.1, 1.1, -1.4]])
Y = torch.tensor([0, 1, 1, 0])

PYRO_ELBOS = {TraceELBO: Trace_ELBO, MeanFieldELBO: TraceMeanField_ELBO}


def _tiny(dataset_size):
    torch.manual_seed(3)
    bnn = BNN(nn.Linear(3, 2), NormalPrior(0.0, 1.5), Categorical(dataset_size))
    guide = BayesByBackprop(bnn, rho_init=(-1.0, 0.5))
    guide(X, Y)
    return bnn, guide


def _closed_form_terms(bnn, guide, seed):
    """KL(q || p) in closed form and the NLL of the weights the guide draws with this seed."""
    kl = 0.0
    for loc, scale in guide.loc_scale().values():
        q, p = torch.distributions.Normal(loc, scale), torch.distributions.Normal(0.0, 1.5)
        kl = kl + torch.distributions.kl_divergence(q, p).sum()
    pyro.set_rng_seed(seed)
    weights = poutine.trace(guide).get_trace(X, Y)
    logits = X @ weights.nodes["weight"]["value"].T + weights.nodes["bias"]["value"]
    nll = -torch.distributions.Categorical(logits=logits).log_prob(Y).sum()
    return kl.item(), nll.item()


def _evaluate(objective, model, guide, seed, kl_weight=1.0):
    pyro.set_rng_seed(seed)
    return objective(model, guide, X, Y, kl_weight)


def test_builtin_objectives_follow_the_protocol():
    assert isinstance(TraceELBO(), Objective) and isinstance(MeanFieldELBO(), Objective)
    assert isinstance(make_objective("meanfield"), MeanFieldELBO)


@pytest.mark.parametrize("dataset_size", [4, 8])
def test_meanfield_elbo_equals_closed_form_kl_plus_scaled_nll(dataset_size):
    bnn, guide = _tiny(dataset_size)
    terms = _evaluate(MeanFieldELBO(), bnn, guide, seed=11)
    kl, nll = _closed_form_terms(bnn, guide, seed=11)
    # The data plate scales the minibatch log-likelihood by N / B = dataset_size / 4.
    assert terms.loss.item() == pytest.approx(kl + nll * dataset_size / 4, rel=1e-5)
    assert terms.data_term.item() == pytest.approx(nll * dataset_size / 4, rel=1e-5)
    assert terms.kl_term.item() == pytest.approx(kl, rel=1e-5)


def test_doubling_the_dataset_doubles_only_the_data_term():
    losses = {}
    for n in (4, 8):
        bnn, guide = _tiny(n)
        losses[n] = _evaluate(MeanFieldELBO(), bnn, guide, seed=5).loss.item()
    kl, nll = _closed_form_terms(*_tiny(4), seed=5)
    assert losses[8] - losses[4] == pytest.approx(nll, rel=1e-5)
    assert 2 * losses[4] - losses[8] == pytest.approx(kl, rel=1e-5)


@pytest.mark.parametrize("cls", [TraceELBO, MeanFieldELBO])
@pytest.mark.parametrize("num_particles,vectorize", [(1, False), (3, False), (5, True)])
@pytest.mark.parametrize("kl_weight", [1.0, 0.3])
def test_loss_and_gradients_equal_pyro_differentiable_loss(cls, num_particles, vectorize, kl_weight):
    bnn, guide = _tiny(8)
    params = list(guide.parameters())
    terms = _evaluate(cls(num_particles, vectorize), bnn, guide, seed=4, kl_weight=kl_weight)
    ours = torch.autograd.grad(terms.loss, params)
    elbo = PYRO_ELBOS[cls](num_particles=num_particles, vectorize_particles=vectorize, max_plate_nesting=1)
    pyro.set_rng_seed(4)
    with scale_latents(kl_weight):
        reference = elbo.differentiable_loss(bnn, guide, X, Y)
    theirs = torch.autograd.grad(reference, params)
    assert terms.loss.item() == pytest.approx(reference.item(), rel=1e-6, abs=1e-6)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)
    assert terms.loss.item() == pytest.approx((terms.data_term + terms.kl_term).item(), rel=1e-6)


@pytest.mark.parametrize("cls", [TraceELBO, MeanFieldELBO])
def test_zero_kl_weight_leaves_the_data_term_alone(cls):
    bnn, guide = _tiny(8)
    terms = _evaluate(cls(), bnn, guide, seed=2, kl_weight=0.0)
    _, nll = _closed_form_terms(bnn, guide, seed=2)
    assert terms.loss.item() == pytest.approx(2 * nll, rel=1e-5)
    assert terms.data_term.item() == pytest.approx(2 * nll, rel=1e-5)
    assert terms.kl_term.item() == pytest.approx(0.0, abs=1e-6)


def test_kl_weight_scales_only_the_kl_term():
    bnn, guide = _tiny(4)
    terms = _evaluate(MeanFieldELBO(), bnn, guide, seed=7, kl_weight=0.3)
    kl, nll = _closed_form_terms(bnn, guide, seed=7)
    assert terms.loss.item() == pytest.approx(0.3 * kl + nll, rel=1e-5)
    assert terms.kl_term.item() == pytest.approx(0.3 * kl, rel=1e-5)


@pytest.mark.parametrize("cls", [TraceELBO, MeanFieldELBO])
def test_a_factor_is_a_prior_side_term_annealed_with_the_kl(cls):
    """pyro.factor is observed, yet belongs to the prior: annealing scales it and it counts in the KL part."""
    bnn, guide = _tiny(8)

    def model(x, y):
        pyro.factor("penalty", torch.tensor(-2.5))
        return bnn(x, y)

    plain = _evaluate(cls(), bnn, guide, seed=9, kl_weight=0.5)
    with_factor = _evaluate(cls(), model, guide, seed=9, kl_weight=0.5)
    assert with_factor.data_term.item() == pytest.approx(plain.data_term.item(), rel=1e-6)
    assert with_factor.kl_term.item() == pytest.approx(plain.kl_term.item() + 0.5 * 2.5, rel=1e-6)
    silenced = _evaluate(cls(), model, guide, seed=9, kl_weight=0.0)
    assert silenced.loss.item() == pytest.approx(plain.data_term.item(), rel=1e-6)


def test_trace_elbo_kl_estimate_is_unbiased():
    """Trace_ELBO's Monte Carlo KL averages to the closed form (many vectorised particles)."""
    bnn, guide = _tiny(4)
    terms = TraceELBO(num_particles=20_000, vectorize_particles=True)(bnn, guide, X, Y, 1.0)
    kl, _ = _closed_form_terms(bnn, guide, seed=0)
    assert terms.kl_term.item() == pytest.approx(kl, rel=0.02)


def test_vectorised_and_sequential_particles_agree_in_expectation():
    bnn, guide = _tiny(4)
    vectorised = MeanFieldELBO(num_particles=4000, vectorize_particles=True)(bnn, guide, X, Y, 1.0).loss.item()
    sequential = sum(MeanFieldELBO()(bnn, guide, X, Y, 1.0).loss.item() for _ in range(400)) / 400
    assert vectorised == pytest.approx(sequential, rel=0.02)


def test_negative_kl_weight_is_refused():
    with pytest.raises(ValueError, match="KL weight must be a finite number >= 0, got -1.0"):
        scale_latents(-1.0)


def test_bad_particle_count_is_refused():
    with pytest.raises(ValueError, match="num_particles must be an int >= 1, got 0"):
        TraceELBO(num_particles=0)


def test_a_model_without_a_likelihood_site_is_refused():
    bnn, guide = _tiny(4)

    def model(x, y):
        bnn.sample_parameters()
        pyro.sample("obs", pyro.distributions.Categorical(logits=torch.zeros(4, 2)).to_event(1), obs=y)

    with pytest.raises(ValueError, match="the model has no likelihood site"):
        TraceELBO()(model, guide, X, Y, 1.0)


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
    trace = TraceELBO(num_particles=50_000, vectorize_particles=True)(bnn, guide, X, Y, 1.0).loss.item()
    meanfield = MeanFieldELBO(num_particles=50_000, vectorize_particles=True)(bnn, guide, X, Y, 1.0).loss.item()
    assert meanfield == pytest.approx(trace, abs=0.05)


def test_meanfield_refuses_autonormal_with_a_constrained_site():
    from pyro.infer.autoguide import AutoNormal

    from pyro_bnn.data import BatchLoader
    from pyro_bnn.infer import Trainer

    bnn = _hierarchical()
    trainer = Trainer(bnn, AutoNormal, objective="meanfield", progress=False)
    with pytest.raises(ValueError, match="cannot score the guide's constrained site 'prior_scale'"):
        trainer.fit(BatchLoader(X, Y, 4), 1)


@pytest.mark.parametrize(
    "guide, prior, refused",
    [
        ("autonormal:0.1", "hierarchical:normal,inversegamma,2,2", True),
        ("lowrank", "hierarchical:normal,halfcauchy,1", True),
        ("iaf", "hierarchical:laplace,halfnormal,1", True),
        ("autonormal:0.1", "hierarchical:normal,fixed,1", False),  # a fixed scale adds no constrained site
        ("autonormal:0.1", "normal:0,1", False),
        ("flat:0.1", "hierarchical:normal,halfcauchy,1", False),  # a transformed Normal: its Jacobian is counted
        ("bbb", "hierarchical:normal,halfcauchy,1", False),
    ],
)
def test_meanfield_choice_refusal_names_the_guides_whose_constrained_sites_it_cannot_score(guide, prior, refused):
    from pyro_bnn.guides import parse_guide

    reason = MeanFieldELBO().choice_refusal(parse_guide(guide), prior)
    if not refused:
        assert reason is None
        return
    assert reason == (
        f"cannot score guide {str(parse_guide(guide))!r} under prior {prior!r}: the guide samples the prior's "
        "per-layer scale sites through a Delta whose Jacobian the mean-field KL ignores; use --elbo trace, or a guide "
        "that samples them as transformed Normals (flat, bbb)"
    )


@pytest.mark.parametrize("rows", [slice(0, 3), slice(3, 4)])  # a full batch of 3 and the short last batch of 1
def test_paper_kl_scale_is_the_unscaled_minibatch_likelihood_plus_kl(rows):
    """One Simple Trick: each step's loss is sum_batch -log p(y | w) + KL, whatever N and B are."""
    torch.manual_seed(3)
    bnn = BNN(nn.Linear(3, 2), NormalPrior(0.0, 1.5), Categorical(4, kl_scale="paper"))
    guide = BayesByBackprop(bnn, rho_init=(-1.0, 0.5))
    x, y = X[rows], Y[rows]
    guide(x, y)
    pyro.set_rng_seed(8)
    terms = MeanFieldELBO()(bnn, guide, x, y, 1.0)
    kl = sum(
        torch.distributions.kl_divergence(torch.distributions.Normal(loc, scale), torch.distributions.Normal(0.0, 1.5))
        .sum()
        .item()
        for loc, scale in guide.loc_scale().values()
    )
    pyro.set_rng_seed(8)
    weights = poutine.trace(guide).get_trace(x, y)
    logits = x @ weights.nodes["weight"]["value"].T + weights.nodes["bias"]["value"]
    nll = -torch.distributions.Categorical(logits=logits).log_prob(y).sum().item()
    assert terms.loss.item() == pytest.approx(nll + kl, rel=1e-5)
    assert terms.data_term.item() == pytest.approx(nll, rel=1e-5)


def test_paper_kl_scale_refuses_blundell_weighting():
    from pyro_bnn.infer import Trainer

    bnn = BNN(nn.Linear(3, 2), NormalPrior(), Categorical(4, kl_scale="paper"))
    with pytest.raises(ValueError, match="kl_weighting='blundell' assumes the data term is scaled by N/B"):
        Trainer(bnn, BayesByBackprop, kl_weighting="blundell")
    with pytest.raises(ValueError, match="unknown KL scale 'full'"):
        Categorical(4, kl_scale="full")
