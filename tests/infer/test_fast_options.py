"""The fast objective's options against TraceELBO in expectation: antithetic pairs and flipout (loss and gradients),
with a hand computation of the antithetic data term and the variance reduction antithetic pairs are for.

Single-draw options need many evaluations for a tight mean: each objective is evaluated ``DRAWS`` times, split into
``BATCHES`` batches whose means give the standard errors (the method of ``test_fast_objective.py``, whose reference
and tolerance this reuses).
"""

import math

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.guides import FlatMeanField
from pyro_bnn.infer import AutoELBO, FastMeanFieldELBO, TraceELBO
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import LaplacePrior, NormalPrior, Prior
from tests.infer.test_fast_objective import PARTICLES, Z_MAX, X, _hand_nll, _setup, _trained, _z_scores

BATCHES, PER_BATCH = 30, 50


def _single_draw_means(objective, bnn, guide, x, y, kl_weight, seed):
    """Like ``_batch_means`` for a one-draw objective: BATCHES batch means of PER_BATCH evaluations each."""
    pyro.set_rng_seed(seed)
    params = _trained(bnn, guide)
    rows = []
    for _ in range(BATCHES):
        acc = 0
        for _ in range(PER_BATCH):
            terms = objective(bnn, guide, x, y, kl_weight)
            grads = torch.cat([g.flatten() for g in torch.autograd.grad(terms.loss, params)])
            acc = acc + torch.cat([terms.loss.detach().reshape(1), terms.data_term.reshape(1), grads]).double()
        rows.append(acc / PER_BATCH)
    rows = torch.stack(rows)
    return rows.mean(0), rows.std(0) / math.sqrt(BATCHES)


def _reference(bnn, guide, x, y, kl_weight):
    pyro.set_rng_seed(1)
    params = _trained(bnn, guide)
    objective = TraceELBO(PARTICLES, vectorize_particles=True)
    rows = []
    for _ in range(BATCHES):
        terms = objective(bnn, guide, x, y, kl_weight)
        grads = torch.cat([g.flatten() for g in torch.autograd.grad(terms.loss, params)])
        rows.append(torch.cat([terms.loss.detach().reshape(1), terms.data_term.reshape(1), grads]).double())
    rows = torch.stack(rows)
    return rows.mean(0), rows.std(0) / math.sqrt(BATCHES)


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
@pytest.mark.parametrize("rows", [6, 5], ids=["even-batch", "odd-batch"])
@pytest.mark.parametrize(
    "options", [{"antithetic": True}, {"flipout": True, "antithetic": False}], ids=["antithetic", "flipout"]
)
def test_single_draw_options_equal_trace_elbo_in_expectation(likelihood, rows, options):
    bnn, guide, y = _setup(likelihood)
    x, y = X[:rows], y[:rows]
    objective = FastMeanFieldELBO(**options)
    objective.validate(bnn, guide, x, y)
    z = _z_scores(_single_draw_means(objective, bnn, guide, x, y, 0.3, seed=2), _reference(bnn, guide, x, y, 0.3))
    assert z.max() < Z_MAX, f"largest difference {z.max():.2f} standard errors at component {int(z.argmax())}"


def test_antithetic_pair_with_a_monte_carlo_kl_equals_trace_elbo_in_expectation():
    """A Laplace prior has no closed-form KL here: the pair averages its two Monte Carlo estimates."""
    bnn, guide, y = _setup(prior=LaplacePrior(0.0, 1.0))
    objective = FastMeanFieldELBO(antithetic=True)
    assert set(objective.kl_methods(bnn, guide).values()) == {"monte-carlo"}
    z = _z_scores(_single_draw_means(objective, bnn, guide, X, y, 0.3, seed=2), _reference(bnn, guide, X, y, 0.3))
    assert z.max() < Z_MAX, f"largest difference {z.max():.2f} standard errors at component {int(z.argmax())}"


def test_batch_normalisation_gets_the_single_draw():
    """Batch norm couples the rows of a batch, so running the halves separately would change the model."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2))
    bnn = BNN(net, NormalPrior(), Categorical(20))
    guide = FlatMeanField(bnn)
    y = torch.tensor([0, 1, 1, 0, 1, 0])
    guide(X, y)
    losses = []
    for antithetic in (True, False):
        pyro.set_rng_seed(4)
        losses.append(FastMeanFieldELBO(antithetic=antithetic)(bnn, guide, X, y, 1.0).loss.item())
    assert losses[0] == losses[1]


class _LearnedScale(Prior):
    """N(0, exp(log_scale)^2) on every weight, with a trainable log_scale."""

    def __init__(self):
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(()))

    def distribution(self, site, hyper):
        return pyro.distributions.Normal(0.0, self.log_scale.exp()).expand(site.shape).to_event(len(site.shape))


def test_a_learned_prior_is_refused_and_auto_falls_back_to_trace():
    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(3, 2)), _LearnedScale(), Categorical(20))
    guide = FlatMeanField(bnn)
    y = torch.tensor([0, 1, 1, 0, 1, 0])
    guide(X, y)
    with pytest.raises(ValueError, match="cannot learn prior parameters"):
        FastMeanFieldELBO().validate(bnn, guide, X, y)
    auto = AutoELBO()
    auto.validate(bnn, guide, X, y)
    assert isinstance(auto.chosen, TraceELBO) and "prior parameters" in auto.reason


def test_kl_of_a_guide_that_has_not_run_says_so():
    bnn = BNN(nn.Sequential(nn.Linear(3, 2)), NormalPrior(), Categorical(20))
    with pytest.raises(ValueError, match="no parameters yet"):
        FastMeanFieldELBO().kl_divergence(bnn, FlatMeanField(bnn))


def test_the_single_draw_comparison_detects_a_kl_error():
    """Antithetic draws with the KL weighted 20 % too high fail the same comparison by a wide margin (a 10 % error
    gives 5.7 standard errors): the comparison has the power to see such errors with single draws too."""
    bnn, guide, y = _setup()
    fast = _single_draw_means(FastMeanFieldELBO(antithetic=True), bnn, guide, X, y, 0.36, seed=2)
    assert _z_scores(fast, _reference(bnn, guide, X, y, 0.3)).max() > 2 * Z_MAX


@pytest.mark.parametrize("rows", [6, 5])
def test_antithetic_halves_see_plus_and_minus_the_same_draw(rows):
    """Rows [0, ceil(B/2)) get loc + scale * eps, the others loc - scale * eps, with eps = torch.randn(D)."""
    bnn, guide, y = _setup()
    x, y = X[:rows], y[:rows]
    pyro.set_rng_seed(8)
    terms = FastMeanFieldELBO(antithetic=True)(bnn, guide, x, y, 0.5)
    pyro.set_rng_seed(8)
    eps = torch.randn(guide.num_latents)
    half = (rows + 1) // 2
    nll = _hand_nll(bnn, guide, y, eps, rows=slice(0, half)) + _hand_nll(bnn, guide, y, -eps, rows=slice(half, rows))
    assert terms.data_term.item() == pytest.approx(20 / rows * nll.item(), rel=1e-6)


def test_antithetic_pairs_lower_the_variance_of_the_gradient_where_the_halves_agree():
    """With small posterior scales the data term is nearly linear in eps: where the two halves of the batch pull the
    same way (here: the same three examples twice, the limit of large minibatches whose halves share their mean
    gradient) the pair cancels that part, for the locations and for the log-scales."""
    bnn, guide, y = _setup()
    x, y = torch.cat([X[:3], X[:3]]), torch.cat([y[:3], y[:3]])
    with torch.no_grad():
        guide.log_scale.fill_(-3.0)
    variances = []
    for antithetic in (False, True):
        pyro.set_rng_seed(3)
        objective = FastMeanFieldELBO(antithetic=antithetic)
        grads = [
            torch.autograd.grad(objective(bnn, guide, x, y, 1.0).loss, [guide.loc, guide.log_scale]) for _ in range(400)
        ]
        variances.append([torch.stack(g).var(0).sum().item() for g in zip(*grads, strict=True)])
    (loc_plain, scale_plain), (loc_pair, scale_pair) = variances
    assert loc_pair < 0.2 * loc_plain and scale_pair < 0.2 * scale_plain


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"flipout": True, "local_reparameterization": True}, "choose one"),
        ({"flipout": True, "closed_form_kl": False}, "closed_form_kl=True"),
        ({"num_particles": 2, "flipout": True}, "num_particles must be 1"),
        ({"num_particles": 2, "antithetic": True}, "antithetic pairs"),
        ({"local_reparameterization": True, "antithetic": True}, "antithetic pairs"),
    ],
)
def test_incompatible_options_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FastMeanFieldELBO(**kwargs)
