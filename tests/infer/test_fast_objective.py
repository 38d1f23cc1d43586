"""FastMeanFieldELBO against the objectives it replaces: TraceELBO in expectation (loss and gradients), the closed-form
KL exactly, a hand computation of the data term under the same draw, and the trainer's Bayesian linear regression
oracle.

Expectation tests compare batch means: each objective is evaluated on ``BATCHES`` independent batches of
``PARTICLES`` draws, giving per batch the loss, the data term and the gradient with respect to every trained
parameter (a vector of ~55 numbers). The difference of the two grand means, divided by its standard error (from the
spread of the batch means of both objectives), must stay below ``Z_MAX`` = 5 for every component. With 30 batches
a single component exceeds 5 standard errors with probability < 1e-5 (t distribution, 58 degrees of freedom), so the
whole vector fails by chance with probability < 1e-3, while fixed seeds make each run deterministic;
``test_the_tolerance_detects_a_ten_percent_kl_error`` shows the same tolerance rejects a 10 % error in the KL.
"""

import functools
import math
import pickle

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_median
from torch import nn
from torch.distributions import Normal, kl_divergence

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import FlatMeanField, init_to_network, parse_guide, posterior_loc_scale
from pyro_bnn.infer import Checkpoint, FastMeanFieldELBO, MeanFieldELBO, Objective, TraceELBO, Trainer
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.predict import predict
from pyro_bnn.priors import HierarchicalPrior, LaplacePrior, NormalPrior, Prior, ScaleMixturePrior
from pyro_bnn.priors.base import elementwise

N = 20
X = torch.tensor(
    [[0.5, -1.0, 2.0], [1.5, 0.0, -0.3], [-0.7, 0.2, 0.9], [0.1, 1.1, -1.4], [-1.2, -0.4, 0.3], [0.8, 0.6, -0.9]]
)
Y_CLASS = torch.tensor([0, 1, 1, 0, 1, 0])
Y_REG = torch.tensor([[0.3, -1.0], [1.2, 0.4], [-0.5, 0.8], [0.0, -0.2], [0.9, 1.5], [-1.1, 0.1]])
PARTICLES, BATCHES, Z_MAX = 50, 30, 5.0


def _setup(likelihood="categorical", prior=None, kl_scale="dataset"):
    """A 3-4-2 tanh network with a flat guide whose locations and scales are spread out (every gradient matters)."""
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    if likelihood == "categorical":
        lik, y = Categorical(N, kl_scale=kl_scale), Y_CLASS
    else:
        lik, y = Gaussian(N, 0.7, learn_scale=True, kl_scale=kl_scale), Y_REG
    bnn = BNN(net, prior if prior is not None else NormalPrior(0.0, 1.5), lik)
    guide = FlatMeanField(bnn, init_scale=0.3)
    guide(X, y)
    with torch.no_grad():
        guide.loc.add_(0.3 * torch.randn_like(guide.loc))
        guide.log_scale.uniform_(-2.0, 0.0)
    return bnn, guide, y


def _trained(bnn, guide):
    """What a trainer optimises: the guide's flat loc and log-scale and the model's own parameters (a learned
    noise)."""
    return [guide.loc, guide.log_scale, *bnn.parameters()]


def _batch_means(objective, bnn, guide, y, kl_weight, seed, params=None, grad_factor=None):
    """Grand mean and standard error over BATCHES of (loss, data term, gradients w.r.t. ``params``, default
    :func:`_trained`, times ``grad_factor`` if given); float64 ``(K,)`` each."""
    pyro.set_rng_seed(seed)
    params = _trained(bnn, guide) if params is None else params
    rows = []
    for _ in range(BATCHES):
        terms = objective(bnn, guide, X, y, kl_weight)
        grads = torch.cat([g.flatten() for g in torch.autograd.grad(terms.loss, params)])
        if grad_factor is not None:
            grads = grads * grad_factor
        rows.append(torch.cat([terms.loss.detach().reshape(1), terms.data_term.reshape(1), grads]))
    rows = torch.stack(rows).double()
    return rows.mean(0), rows.std(0) / math.sqrt(BATCHES)


def _z_scores(first, second):
    (mean_a, se_a), (mean_b, se_b) = first, second
    return (mean_a - mean_b).abs() / (se_a.square() + se_b.square()).sqrt().clamp_min(1e-12)


def _trace_reference(bnn, guide, y, kl_weight, seed=1):
    return _batch_means(TraceELBO(PARTICLES, vectorize_particles=True), bnn, guide, y, kl_weight, seed)


def test_fast_objective_follows_the_protocol():
    assert isinstance(FastMeanFieldELBO(), Objective)
    bnn, guide, y = _setup()
    objective = FastMeanFieldELBO(2, local_reparameterization=True)
    objective(bnn, guide, X, y)
    copied = pickle.loads(pickle.dumps(objective))  # the cached per-model plan is not part of the copy
    assert copied.num_particles == 2 and copied.local_reparameterization and copied._plan is None
    with pytest.raises(ValueError, match="num_particles"):
        FastMeanFieldELBO(0)


@pytest.mark.parametrize(
    "likelihood,kl_scale,kl_weight",
    [
        ("categorical", "dataset", 1.0),
        ("categorical", "dataset", 0.3),
        ("categorical", "paper", 1.0),
        ("gaussian", "dataset", 1.0),
        ("gaussian", "paper", 0.3),
    ],
)
def test_loss_and_gradients_equal_trace_elbo_in_expectation(likelihood, kl_scale, kl_weight):
    bnn, guide, y = _setup(likelihood, kl_scale=kl_scale)
    fast = _batch_means(FastMeanFieldELBO(PARTICLES), bnn, guide, y, kl_weight, seed=2)
    assert FastMeanFieldELBO().kl_methods(bnn, guide) == dict.fromkeys(guide.site_names, "closed-form")
    z = _z_scores(fast, _trace_reference(bnn, guide, y, kl_weight))
    assert z.max() < Z_MAX, f"largest difference {z.max():.2f} standard errors at component {int(z.argmax())}"


@pytest.mark.parametrize(
    "prior,likelihood",
    [
        (LaplacePrior(0.0, 1.0), "categorical"),
        (LaplacePrior(0.2, 0.5), "gaussian"),
        (ScaleMixturePrior(), "categorical"),
    ],
    ids=["laplace", "laplace-gaussian", "scale-mixture"],
)
def test_other_priors_fall_back_to_monte_carlo_and_still_match_trace_elbo(prior, likelihood):
    bnn, guide, y = _setup(likelihood, prior=prior)
    objective = FastMeanFieldELBO(PARTICLES)
    assert objective.kl_methods(bnn, guide) == dict.fromkeys(guide.site_names, "monte-carlo")
    with pytest.raises(ValueError, match="no closed-form KL"):
        objective.kl_divergence(bnn, guide)
    z = _z_scores(_batch_means(objective, bnn, guide, y, 0.3, seed=2), _trace_reference(bnn, guide, y, 0.3))
    assert z.max() < Z_MAX, f"largest difference {z.max():.2f} standard errors at component {int(z.argmax())}"


def test_monte_carlo_kl_everywhere_also_matches_trace_elbo():
    bnn, guide, y = _setup()
    objective = FastMeanFieldELBO(PARTICLES, closed_form_kl=False)
    assert set(objective.kl_methods(bnn, guide).values()) == {"monte-carlo"}
    z = _z_scores(_batch_means(objective, bnn, guide, y, 1.0, seed=2), _trace_reference(bnn, guide, y, 1.0))
    assert z.max() < Z_MAX


@pytest.mark.parametrize(
    "spec,flat_kwargs",
    [
        ("autonormal:0.1,loc=median", lambda bnn: {"init_loc_fn": init_to_median(num_samples=15), "init_scale": 0.1}),
        ("autonormal:rel=0.1", lambda bnn: {"init_loc_fn": init_to_network(bnn), "relative_scale": 0.1}),
    ],
)
def test_the_flat_guide_with_the_fast_objective_reproduces_an_autonormal_option(spec, flat_kwargs):
    """Built under the same seed, FlatMeanField starts where the AutoNormal option starts, and the fast objective's
    loss and gradients w.r.t. the locations and scales equal TraceELBO's on AutoNormal in expectation: the same
    training problem. (Each guide's gradient w.r.t. its unconstrained scale parameter, log-scale or softplus^-1, is
    mapped to the gradient w.r.t. the scale by the chain rule.)"""
    bnn = _setup()[0]
    pyro.set_rng_seed(5)
    autonormal = parse_guide(spec).build(bnn)
    autonormal(X, Y_CLASS)
    pyro.set_rng_seed(5)
    flat = FlatMeanField(bnn, **flat_kwargs(bnn))
    flat(X, Y_CLASS)
    names = bnn.site_names
    auto_locs = [autonormal.locs.get_parameter(f"{n}_unconstrained") for n in names]
    auto_rhos = [autonormal.scales.get_parameter(f"{n}_unconstrained") for n in names]
    auto_loc, auto_rho = (torch.cat([p.detach().flatten() for p in ps]) for ps in (auto_locs, auto_rhos))
    flat_loc, flat_scale = (t.detach() for t in flat.flat_loc_scale())
    assert torch.equal(auto_loc, flat_loc)
    assert torch.allclose(F.softplus(auto_rho), flat_scale, rtol=1e-6, atol=0)
    # d/d sigma = (d/d rho) / softplus'(rho) = (d/d rho) / sigmoid(rho); for the flat guide (d/d log sigma) / sigma.
    ones = torch.ones_like(auto_loc)
    auto_factor, flat_factor = torch.cat([ones, 1 / torch.sigmoid(auto_rho)]), torch.cat([ones, 1 / flat_scale])
    reference = _batch_means(
        TraceELBO(PARTICLES, True), bnn, autonormal, Y_CLASS, 0.5, 1, auto_locs + auto_rhos, auto_factor
    )
    fast = _batch_means(
        FastMeanFieldELBO(PARTICLES), bnn, flat, Y_CLASS, 0.5, 2, [flat.loc, flat.log_scale], flat_factor
    )
    z = _z_scores(fast, reference)
    assert z.max() < Z_MAX, f"largest difference {z.max():.2f} standard errors at component {int(z.argmax())}"


def test_the_tolerance_detects_a_ten_percent_kl_error():
    """The same comparison with the KL weighted 10 % too high fails: the test has the power to see such errors."""
    bnn, guide, y = _setup()
    fast = _batch_means(FastMeanFieldELBO(PARTICLES), bnn, guide, y, 1.1, seed=2)
    assert _z_scores(fast, _trace_reference(bnn, guide, y, 1.0)).max() > 3 * Z_MAX


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
def test_local_reparameterisation_equals_trace_elbo_in_expectation(likelihood):
    bnn, guide, y = _setup(likelihood)
    objective = FastMeanFieldELBO(PARTICLES, local_reparameterization=True)
    objective.validate(bnn, guide, X, y)
    z = _z_scores(_batch_means(objective, bnn, guide, y, 0.3, seed=2), _trace_reference(bnn, guide, y, 0.3))
    assert z.max() < Z_MAX, f"largest difference {z.max():.2f} standard errors at component {int(z.argmax())}"


def test_local_reparameterisation_refuses_a_layer_applied_twice():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 3)

        def forward(self, x):
            return self.layer(torch.tanh(self.layer(x)))

    bnn = BNN(Twice(), NormalPrior(), Categorical(N))
    guide = FlatMeanField(bnn)
    with pytest.raises(ValueError, match="more than once"):
        FastMeanFieldELBO(local_reparameterization=True).validate(bnn, guide, X, torch.tensor([0, 1, 2, 0, 1, 2]))


class _PerSiteNormal(Prior):
    """N(0.1, 2^2) on weights, N(-0.2, s_i^2) on biases with a different s_i for every element."""

    def distribution(self, site, hyper):
        if site.attr == "weight":
            return elementwise(dist.Normal, site.shape, torch.tensor(0.1), torch.tensor(2.0))
        scales = torch.linspace(0.5, 1.5, site.shape.numel()).reshape(site.shape)
        return dist.Normal(torch.full(site.shape, -0.2), scales).to_event(len(site.shape))


@pytest.mark.parametrize("prior", [NormalPrior(0.0, 1.5), _PerSiteNormal()], ids=["normal", "per-site"])
def test_kl_term_is_the_closed_form_summed_over_every_weight(prior):
    bnn, guide, y = _setup(prior=prior)
    expected = 0.0
    for model_site, (loc, scale) in zip(bnn.sites, guide.loc_scale().values(), strict=True):
        p = bnn.prior.distribution(model_site, {}).base_dist
        q = Normal(loc.double(), scale.double())
        expected += kl_divergence(q, Normal(p.loc.double(), p.scale.double())).sum().item()
    objective = FastMeanFieldELBO()
    assert objective.kl_divergence(bnn, guide).item() == pytest.approx(expected, rel=1e-6)
    terms = objective(bnn, guide, X, y, 0.3)
    assert terms.kl_term.item() == pytest.approx(0.3 * expected, rel=1e-5)  # loss - data term: float32 rounding
    assert terms.loss.item() == pytest.approx((terms.data_term + terms.kl_term).item(), rel=1e-6)
    # Pyro's TraceMeanField_ELBO computes the same KL part for the same guide.
    assert MeanFieldELBO()(bnn, guide, X, y, 0.3).kl_term.item() == pytest.approx(0.3 * expected, rel=1e-5)


def test_kl_follows_a_change_of_the_prior():
    bnn, guide, _ = _setup()
    objective = FastMeanFieldELBO()
    before = objective.kl_divergence(bnn, guide).item()
    bnn.prior.scale.fill_(3.0)
    after = objective.kl_divergence(bnn, guide).item()
    loc, scale = guide.flat_loc_scale()
    assert after == pytest.approx(kl_divergence(Normal(loc, scale), Normal(0.0, 3.0)).sum().item(), rel=1e-6)
    assert after != pytest.approx(before)


def _hand_nll(bnn, guide, y, eps, rows=slice(None)):
    """-sum log p(y | w) over ``X[rows]`` with w = loc + exp(log_scale) * eps for the 3-4-2 tanh network; eps
    ``(D,)``; ``y`` has a target for every row of X used, or for ``X[rows]`` only."""
    w = guide.loc + guide.log_scale.exp() * eps
    w1, b1, w2, b2 = w[:12].view(4, 3), w[12:16], w[16:24].view(2, 4), w[24:26]
    x = X[: len(y)][rows]
    y = y[rows]
    out = torch.tanh(x @ w1.T + b1) @ w2.T + b2
    if isinstance(bnn.likelihood, Categorical):
        return -torch.log_softmax(out, -1).gather(-1, y.unsqueeze(-1)).sum()
    return -Normal(out, bnn.likelihood.scale).log_prob(y).sum()


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
@pytest.mark.parametrize("kl_scale,data_scale", [("dataset", N / 6), ("paper", 1.0)])
@pytest.mark.parametrize("num_particles", [1, 3])
def test_data_term_equals_a_hand_computation_with_the_same_draw(likelihood, kl_scale, data_scale, num_particles):
    bnn, guide, y = _setup(likelihood, kl_scale=kl_scale)
    D = guide.num_latents
    pyro.set_rng_seed(8)
    terms = FastMeanFieldELBO(num_particles, antithetic=False)(bnn, guide, X, y, 0.5)
    pyro.set_rng_seed(8)
    # The documented draw: torch.randn(D) for one particle, torch.randn(P, 1, D) for P (test_fast_options.py: the
    # antithetic pair).
    eps = torch.randn((num_particles, 1, D) if num_particles > 1 else (D,)).reshape(num_particles, D)
    nll = sum(_hand_nll(bnn, guide, y, e) for e in eps) / num_particles
    assert terms.data_term.item() == pytest.approx(data_scale * nll.item(), rel=1e-6)
    kl = FastMeanFieldELBO().kl_divergence(bnn, guide)
    assert terms.loss.item() == pytest.approx(data_scale * nll.item() + 0.5 * kl.item(), rel=1e-6)


def test_zero_kl_weight_leaves_the_data_term_alone():
    bnn, guide, y = _setup()
    terms = FastMeanFieldELBO()(bnn, guide, X, y, 0.0)
    assert terms.kl_term.item() == 0.0 and terms.loss.item() == terms.data_term.item()
    with pytest.raises(ValueError, match="KL weight"):
        FastMeanFieldELBO()(bnn, guide, X, y, -1.0)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: BNN(nn.Linear(3, 2), HierarchicalPrior(), Categorical(N)), "hierarchical prior"),
        (lambda: BNN(nn.Linear(3, 2), NormalPrior(), Categorical(N)), "needs a flat Normal guide"),
    ],
)
def test_models_and_guides_it_cannot_score_are_refused_in_one_line(make, message):
    bnn = make()
    guide = AutoNormal(bnn, init_loc_fn=init_to_network(bnn)) if "guide" in message else FlatMeanField(bnn)
    guide(X, Y_CLASS)
    with pytest.raises(ValueError, match=message) as err:
        FastMeanFieldELBO().validate(bnn, guide, X, Y_CLASS)
    assert "\n" not in str(err.value)


def test_a_model_with_extra_sites_is_refused():
    class WithFactor(BNN):
        def forward(self, x, y=None):
            pyro.factor("penalty", torch.tensor(-1.0))
            return super().forward(x, y)

    bnn = WithFactor(nn.Linear(3, 2), NormalPrior(), Categorical(N))
    guide = FlatMeanField(bnn)
    guide(X, Y_CLASS)
    with pytest.raises(ValueError, match="overrides forward"):
        FastMeanFieldELBO().validate(bnn, guide, X, Y_CLASS)


def test_a_guide_built_for_another_model_is_refused():
    bnn, guide, y = _setup()
    other = BNN(nn.Sequential(nn.Linear(3, 2)), NormalPrior(), Categorical(N))
    with pytest.raises(ValueError, match="build the guide for this model"):
        FastMeanFieldELBO()(other, guide, X, y)


def _blobs(n=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    return centres[y] + 0.8 * torch.randn(n, 2, generator=g), y


def _fast_trainer(local=False, **kwargs):
    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 3)), NormalPrior(0.0, 1.0), Categorical(90))
    return Trainer(
        bnn,
        functools.partial(FlatMeanField, init_scale=0.05),
        objective=FastMeanFieldELBO(local_reparameterization=local),
        optim=pyro.optim.Adam({"lr": 0.05}),
        seed=kwargs.pop("seed", 0),
        progress=False,
        num_val_samples=8,
        **kwargs,
    )


def _blob_loaders():
    x, y = _blobs()
    return BatchLoader(x[:90], y[:90], 30, shuffle=True, seed=4), BatchLoader(x[90:], y[90:], 30)


@pytest.mark.parametrize("local", [False, True], ids=["weights", "local-reparameterisation"])
def test_trainer_trains_a_classifier_with_the_flat_guide_and_fast_objective(local):
    trainer = _fast_trainer(local)
    train, val = _blob_loaders()
    history = trainer.fit(train, 15, val_loader=val)
    assert history[-1]["loss"] < history[0]["loss"]
    assert history[-1]["val_accuracy"] > 0.85
    for record in history:
        assert record["loss"] == pytest.approx(record["data_term"] + record["kl_term"], rel=1e-6)
        assert record["kl_term"] > 0
    x, y = _blobs()
    assert predict(trainer.bnn, trainer.guide, (x[90:], y[90:]), num_samples=8).metrics()["accuracy"] > 0.85


def test_a_resumed_fast_run_matches_an_uninterrupted_one(tmp_path):
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]  # noqa: E731
    straight = _fast_trainer().fit(_blob_loaders()[0], 3)
    _fast_trainer(callbacks=[Checkpoint(tmp_path / "run.pt")]).fit(_blob_loaders()[0], 2)
    resumed = _fast_trainer(seed=999).fit(_blob_loaders()[0], 3, resume_from=tmp_path / "run.pt")
    assert strip(resumed) == strip(straight)


def test_trainer_refuses_a_hierarchical_prior_before_training():
    x, y = _blobs(30)
    bnn = BNN(nn.Linear(2, 3), HierarchicalPrior(), Categorical(30))
    trainer = Trainer(bnn, FlatMeanField, objective=FastMeanFieldELBO(), progress=False)
    with pytest.raises(ValueError, match="hierarchical prior"):
        trainer.fit(BatchLoader(x, y, 30), 1)


def test_flat_guide_and_fast_objective_recover_the_bayesian_linear_regression_posterior():
    """The oracle of tests/infer/test_trainer.py at the same tolerances: y = Xw + noise with known noise and a
    N(0, alpha^2) prior; the best mean-field Gaussian has the exact posterior mean and variances 1 / L_ii with
    L = X'X / sigma^2 + I / alpha^2. Tolerances: 0.15 posterior standard deviations on the means, 10 % on the
    scales."""
    g = torch.Generator().manual_seed(0)
    n, d, sigma, alpha = 200, 3, 0.5, 1.0
    x = torch.randn(n, d, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5]) + sigma * torch.randn(n, generator=g)).unsqueeze(-1)
    precision = x.T @ x / sigma**2 + torch.eye(d) / alpha**2
    post_mean = torch.linalg.solve(precision, x.T @ y.squeeze(-1) / sigma**2)
    mean_field_std = precision.diagonal().rsqrt()

    torch.manual_seed(0)
    bnn = BNN(nn.Linear(d, 1, bias=False), NormalPrior(0.0, alpha), Gaussian(n, sigma))
    trainer = Trainer(
        bnn,
        functools.partial(FlatMeanField, init_scale=0.05),
        optim=pyro.optim.Adam({"lr": 0.05}),
        objective=FastMeanFieldELBO(16),
        seed=0,
        progress=False,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, [300, 400, 500], 0.25),
    )
    trainer.fit(BatchLoader(x, y, n), 600)
    loc, scale = posterior_loc_scale(trainer.guide)["weight"]
    assert ((loc.squeeze(0) - post_mean).abs() / mean_field_std).max() < 0.15
    assert ((scale.squeeze(0) / mean_field_std) - 1).abs().max() < 0.10


@pytest.mark.parametrize(
    "options",
    [{}, {"num_particles": 3}, {"num_particles": 3, "local_reparameterization": True}, {"flipout": True}],
    ids=["antithetic-pair", "particles", "local-reparameterisation", "flipout"],
)
def test_fast_objective_runs_where_the_model_lives(device, options):
    bnn, guide, y = _setup()
    bnn.to(device)
    guide.to(device)
    objective = FastMeanFieldELBO(**options)
    objective.validate(bnn, guide, X.to(device), y.to(device))
    terms = objective(bnn, guide, X.to(device), y.to(device), 0.5)
    terms.loss.backward()
    assert terms.loss.device.type == device.type and bool(torch.isfinite(guide.log_scale.grad).all())
    expected_kl = kl_divergence(Normal(*guide.flat_loc_scale()), Normal(0.0, 1.5)).sum()
    assert objective.kl_divergence(bnn, guide).item() == pytest.approx(expected_kl.item(), rel=1e-5)
