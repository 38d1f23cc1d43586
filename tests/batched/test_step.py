"""The batched step against R separate single-run steps given the same noise (float64, to 1e-6)."""

from __future__ import annotations

import pyro
import pytest
import torch
from torch.distributions import Normal, kl_divergence

import pyro_bnn.infer.fast as fast_module
from pyro_bnn import BNN
from pyro_bnn.batched import BatchedAdam, BatchedForm, BatchedKL, BatchedStep, Family, RunStack, StepInputs
from pyro_bnn.batched.dropout import dropout_masks
from pyro_bnn.batched.stack import linear_chain
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import FastMeanFieldELBO
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import ScaleMixtureNormal, parse_prior
from pyro_bnn.priors.selection import weights_only

N, B, STEPS = 40, 16, 4


def _run(prior: str, guide: str, seed: int) -> tuple[BNN, torch.nn.Module]:
    pyro.set_rng_seed(seed)
    net = build_model("mlp:5,5", input_shape=(2,), num_classes=2, activation="tanh").double()
    bnn = BNN(net, parse_prior(prior), Categorical(N)).double()
    guide_module = parse_guide(guide).build(bnn).double()
    x, y = torch.randn(B, 2, dtype=torch.float64), torch.zeros(B, dtype=torch.long)
    with torch.no_grad(), pyro.poutine.block():
        guide_module(x, y)
    return bnn, guide_module


def _data(runs: int, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(STEPS, B, 2, generator=gen, dtype=torch.float64) for _ in range(runs)]
    ys = [torch.randint(0, 2, (STEPS, B), generator=gen) for _ in range(runs)]
    return xs, ys


def _batched(runs, form, lrs, kl_weights, eps, xs, ys):
    models, guides = zip(*runs, strict=True)
    stack = RunStack(models, guides)
    kl = BatchedKL(
        models, stack.sites, closed_form_kl=form.closed_form_kl, device=stack.loc.device, dtype=torch.float64
    )
    adam = BatchedAdam(stack.leaves)
    step = BatchedStep(stack, kl, adam, form)
    losses = []
    lr = torch.tensor(lrs, dtype=torch.float64)
    for t in range(STEPS):
        x = torch.stack([xr[t] for xr in xs])
        y = torch.stack([yr[t] for yr in ys])
        terms, updated = step.step(StepInputs(x, y, torch.tensor(kl_weights, dtype=torch.float64), eps[t], [lr, lr]))
        assert bool(updated.all())
        losses.append(terms.loss)
    return stack, torch.stack(losses)


@pytest.mark.parametrize(
    ("priors", "form"),
    [
        (["normal:0,1", "normal:0,0.3", "normal:0.5,3"], BatchedForm(antithetic=True, closed_form_kl=True)),
        (["normal:0,1", "normal:0,0.3", "normal:0.5,3"], BatchedForm(antithetic=False, closed_form_kl=True)),
        (["laplace:0,1", "laplace:0,0.1", "laplace:0,3"], BatchedForm(antithetic=False, closed_form_kl=False)),
        (["cauchy:0,1", "cauchy:0,0.1", "cauchy:0,3"], BatchedForm(antithetic=True, closed_form_kl=False)),
        (["flat", "flat"], BatchedForm(antithetic=False, closed_form_kl=False)),
        (["normal:0,1", "laplace:0,0.3", "flat"], BatchedForm(antithetic=True, closed_form_kl=True)),
        (["cauchy:0,1", "normal:0,0.3", "laplace:0.1,2"], BatchedForm(antithetic=False, closed_form_kl=False)),
        (["mixture:0.5,1,0.05", "mixture:0.25,2,0.1", "normal:0,1"], BatchedForm(antithetic=True, closed_form_kl=True)),
        (["mixture:0.5,1,0.05", "laplace:0,1"], BatchedForm(antithetic=False, closed_form_kl=False)),
        (
            ["normal:0,1", "normal:0,0.3", "laplace:0,1"],
            BatchedForm(antithetic=False, closed_form_kl=True, particles=2),
        ),
        (["mixture:0.5,1,0.05", "cauchy:0,1"], BatchedForm(antithetic=False, closed_form_kl=False, particles=3)),
    ],
)
def test_batched_steps_equal_separate_fast_elbo_steps_with_the_same_noise(monkeypatch, priors, form):
    """Each run's loss and its parameters after 4 Adam steps equal those of FastMeanFieldELBO + torch Adam run on
    that run alone with the same noise, to 1e-6 in float64 (per-run priors, learning rates and KL weights; one draw,
    the antithetic pair or several particles)."""
    R = len(priors)
    lrs = [0.05, 0.01, 0.2][:R]
    kl_weights = [1.0, 0.3, 0.0][:R]
    xs, ys = _data(R)
    runs = [_run(prior, "flat:0.1", seed) for seed, prior in enumerate(priors)]
    D = runs[0][1].num_latents
    lead = () if form.particles == 1 else (form.particles,)
    eps = torch.randn(STEPS, R, *lead, D, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    separate = [_run(prior, "flat:0.1", seed) for seed, prior in enumerate(priors)]
    stack, batched_losses = _batched(runs, form, lrs, kl_weights, eps, xs, ys)

    objective = FastMeanFieldELBO(
        antithetic=form.antithetic, closed_form_kl=form.closed_form_kl, num_particles=form.particles
    )
    for r, (bnn, guide) in enumerate(separate):
        optimizer = torch.optim.Adam(guide.parameters(), lr=lrs[r])
        for t in range(STEPS):
            monkeypatch.setattr(  # a single run draws (D,) for one particle, (P, 1, D) for P
                fast_module, "standard_normal", lambda shape, *, dtype, device, _e=eps[t, r]: _e.reshape(shape).clone()
            )
            optimizer.zero_grad()
            terms = objective(bnn, guide, xs[r][t], ys[r][t], kl_weight=kl_weights[r])
            terms.loss.backward()
            optimizer.step()
            torch.testing.assert_close(batched_losses[t, r], terms.loss.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(stack.loc[r].detach(), guide.loc.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(stack.raw_scale[r].detach(), guide.log_scale.detach(), rtol=1e-6, atol=1e-6)


def _assert_bayes_by_backprop_gradients(stack: RunStack, run: int, guide: torch.nn.Module) -> None:
    """Run ``run``'s stacked gradients equal its own guide's, every site's mu and rho (softplus), to 1e-9."""
    params = dict(guide.named_parameters())
    for site in stack.sites:
        mu, rho = params[f"locs.{site.name}_unconstrained"], params[f"rhos.{site.name}_unconstrained"]
        sl = slice(site.start, site.stop)
        torch.testing.assert_close(stack.loc.grad[run, sl], mu.grad.reshape(-1), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(stack.raw_scale.grad[run, sl], rho.grad.reshape(-1), rtol=1e-9, atol=1e-9)


def test_batched_bayes_by_backprop_step_equals_the_hand_written_objective():
    """For BayesByBackprop guides (sigma = softplus(rho)), each run's loss equals -(N/B) log p(y | w) + KL written
    by hand with torch.distributions' KL, and its gradient that loss's gradient."""
    priors = ["normal:0,1", "normal:0,0.5"]
    runs = [_run(prior, "bbb", seed) for seed, prior in enumerate(priors)]
    models, guides = zip(*runs, strict=True)
    stack = RunStack(models, guides)
    form = BatchedForm(antithetic=False, closed_form_kl=True)
    kl = BatchedKL(models, stack.sites, closed_form_kl=True, device=stack.loc.device, dtype=torch.float64)
    step = BatchedStep(stack, kl, BatchedAdam(stack.leaves), form)
    xs, ys = _data(2)
    x, y = torch.stack([xs[0][0], xs[1][0]]), torch.stack([ys[0][0], ys[1][0]])
    eps = torch.randn(2, stack.loc.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    loss, _ = step.terms(x, y, torch.tensor([1.0, 0.5], dtype=torch.float64), eps)
    loss.sum().backward()
    for r, ((bnn, guide), prior_scale, weight) in enumerate(zip(runs, (1.0, 0.5), (1.0, 0.5), strict=True)):
        locs = {n: guide.loc_scale()[n][0] for n in bnn.site_names}
        scales = {n: guide.loc_scale()[n][1] for n in bnn.site_names}
        flat_eps = stack.split(eps[r])
        weights = {n: locs[n] + scales[n] * flat_eps[n] for n in bnn.site_names}
        data = -bnn.likelihood.log_likelihood(bnn.apply_parameters(x[r], weights), y[r]).sum() * (N / B)
        kl_value = sum(
            kl_divergence(Normal(locs[n], scales[n]), Normal(0.0, prior_scale)).sum() for n in bnn.site_names
        )
        expected = data + weight * kl_value
        torch.testing.assert_close(loss[r], expected, rtol=1e-9, atol=1e-9)
        expected.backward()
        _assert_bayes_by_backprop_gradients(stack, r, guide)


def test_batched_bayes_by_backprop_with_two_particles_and_scale_mixtures_equals_the_hand_written_objective():
    """Bayes by Backprop as Blundell et al. train it (Trace_ELBO, two particles, scale-mixture priors): each run's
    loss is the mean over its two draws of -(N/B) log p(y | w) + kl_weight (log q(w) - log p(w)), written by hand
    with ScaleMixtureNormal and torch's Normal densities, and its gradient that loss's gradient."""
    priors = ["mixture:0.5,1,0.05", "mixture:0.25,2,0.1", "normal:0,0.5"]
    runs = [_run(prior, "bbb", seed) for seed, prior in enumerate(priors)]
    models, guides = zip(*runs, strict=True)
    stack = RunStack(models, guides)
    kl = BatchedKL(models, stack.sites, closed_form_kl=False, device=stack.loc.device, dtype=torch.float64)
    step = BatchedStep(stack, kl, BatchedAdam(stack.leaves), BatchedForm(False, False, particles=2))
    xs, ys = _data(3)
    x, y = torch.stack([xr[0] for xr in xs]), torch.stack([yr[0] for yr in ys])
    eps = torch.randn(3, 2, stack.loc.shape[1], generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    kl_weights = (1.0, 0.5, 0.2)
    loss, terms = step.terms(x, y, torch.tensor(kl_weights, dtype=torch.float64), eps)
    loss.sum().backward()
    for r, ((bnn, guide), weight) in enumerate(zip(runs, kl_weights, strict=True)):
        expected, data = 0.0, 0.0
        for p in range(2):
            flat_eps, weights, particle = stack.split(eps[r, p]), {}, 0.0
            for name, site in zip(bnn.site_names, bnn.sites, strict=True):
                loc, scale = guide.loc_scale()[name]
                weights[name] = w = loc + scale * flat_eps[name]
                log_q = Normal(loc, scale).log_prob(w).sum()
                log_p = bnn.prior.distribution(site, {}).log_prob(w)
                particle = particle + weight * (log_q - log_p)
            log_likelihood = bnn.likelihood.log_likelihood(bnn.apply_parameters(x[r], weights), y[r]).sum()
            data = data - log_likelihood * (N / B) / 2
            expected = expected + (particle - log_likelihood * (N / B)) / 2
        torch.testing.assert_close(loss[r], expected, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(terms.data_term[r], data.detach(), rtol=1e-9, atol=1e-9)
        expected.backward()
        _assert_bayes_by_backprop_gradients(stack, r, guide)


def test_a_diverging_run_leaves_the_others_bit_identical():
    """Run 1 with a huge learning rate diverges and is frozen; runs 0 and 2 end bit for bit where they end in the
    same batch when run 1 trains sanely."""
    priors = ["normal:0,1", "normal:0,1", "normal:0,0.5"]
    xs, ys = _data(3)

    def train(lr1: float):
        runs = [_run(prior, "flat:0.1", seed) for seed, prior in enumerate(priors)]
        models, guides = zip(*runs, strict=True)
        stack = RunStack(models, guides)
        kl = BatchedKL(models, stack.sites, closed_form_kl=True, device=stack.loc.device, dtype=torch.float64)
        step = BatchedStep(stack, kl, BatchedAdam(stack.leaves), BatchedForm())
        lr = torch.tensor([0.05, lr1, 0.05], dtype=torch.float64)
        active = torch.ones(3, dtype=torch.bool)
        gen = torch.Generator().manual_seed(3)
        for i in range(30):
            t = i % STEPS
            x = torch.stack([xr[t] for xr in xs])
            y = torch.stack([yr[t] for yr in ys])
            eps = torch.randn(3, stack.loc.shape[1], generator=gen, dtype=torch.float64)
            _, updated = step.step(StepInputs(x, y, torch.ones(3, dtype=torch.float64), eps, [lr, lr], active=active))
            active = active & updated
        return stack, active

    sane, sane_active = train(0.05)
    broken, broken_active = train(1e300)
    assert sane_active.tolist() == [True, True, True]
    assert broken_active.tolist() == [True, False, True]
    assert torch.isfinite(broken.loc[1]).all() and torch.isfinite(broken.raw_scale[1]).all()
    for r in (0, 2):
        assert torch.equal(sane.loc[r], broken.loc[r])
        assert torch.equal(sane.raw_scale[r], broken.raw_scale[r])


def test_runs_with_different_leaky_slopes_share_one_batch():
    """A Leaky slope sweep is one batch: each run's output is its own network's output, slope included."""
    runs = []
    for seed, slope in enumerate((-0.5, 0.0, 0.3)):
        pyro.set_rng_seed(seed)
        net = build_model("mlp:6", input_shape=(2,), num_classes=3, activation=f"leaky:{slope}").double()
        bnn = BNN(net, parse_prior("normal:0,1"), Categorical(N)).double()
        guide = parse_guide("flat:0.1").build(bnn).double()
        with torch.no_grad(), pyro.poutine.block():
            guide(torch.randn(B, 2, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
        runs.append((bnn, guide))
    stack = RunStack(*zip(*runs, strict=True))
    x = torch.randn(3, B, 2, dtype=torch.float64)
    batched = stack.outputs(x, stack.split(stack.loc.detach()))
    for r, (bnn, guide) in enumerate(runs):
        expected = bnn.apply_parameters(x[r], guide.split(guide.loc.detach()))
        torch.testing.assert_close(batched[r], expected, rtol=0, atol=1e-12)


def test_networks_that_differ_are_refused():
    a = _run("normal:0,1", "flat:0.1", 0)
    pyro.set_rng_seed(1)
    net = build_model("mlp:5,5", input_shape=(2,), num_classes=2, activation="relu").double()
    bnn = BNN(net, parse_prior("normal:0,1"), Categorical(N)).double()
    guide = parse_guide("flat:0.1").build(bnn).double()
    with torch.no_grad(), pyro.poutine.block():
        guide(torch.randn(B, 2, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
    with pytest.raises(ValueError, match="run 1's network differs from run 0's"):
        RunStack([a[0], bnn], [a[1], guide])
    with pytest.raises(ValueError, match="FlatMeanField .*, BayesByBackprop .*, point-estimate .* or NodeNoiseMixture"):
        RunStack([a[0]], [pyro.infer.autoguide.AutoNormal(a[0])])
    point = parse_guide("map").build(a[0])
    with torch.no_grad(), pyro.poutine.block():
        point(torch.randn(B, 2, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
    with pytest.raises(ValueError, match=r"differ in kind \(FlatMeanField, PointEstimateGuide\)"):
        RunStack([a[0], a[0]], [a[1], point])


def _leaky_runs(slopes, select=None):
    runs = []
    for seed, slope in enumerate(slopes):
        pyro.set_rng_seed(seed)
        net = build_model("mlp:6,4", input_shape=(1, 2, 2), num_classes=3, activation=f"leaky:{slope}").double()
        bnn = BNN(net, parse_prior("normal:0,1", select=select), Categorical(N)).double()
        guide = parse_guide("flat:0.1").build(bnn).double()
        with torch.no_grad(), pyro.poutine.block():
            guide(torch.randn(B, 1, 2, 2, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
        runs.append((bnn, guide))
    return runs


@pytest.mark.parametrize("select", [None, weights_only], ids=["every parameter", "deterministic biases"])
def test_the_chain_vmap_and_loop_give_the_same_outputs_and_gradients(select):
    """The three ways of running R networks agree, forward and backward: per-run slopes (RunSlopeLeakyReLU),
    deterministic biases and a flattened image input included."""
    models, guides = zip(*_leaky_runs((-0.5, 0.0, 0.3), select), strict=True)
    x = torch.randn(3, B, 1, 2, 2, dtype=torch.float64)
    stacks = {
        "chain": RunStack(models, guides, chain=True),
        "vmap": RunStack(models, guides, chain=False, loop_runs=False),
        "loop": RunStack(models, guides, chain=False, loop_runs=True),
    }
    assert stacks["chain"].chain is not None and stacks["vmap"].chain is None
    assert bool(stacks["chain"].per_run_buffers) and (select is None) == (not stacks["chain"].deterministic)
    results = {}
    for name, stack in stacks.items():
        out = stack.outputs(x, stack.split(stack.loc))
        # a loss that weighs every output differently, so that a transposed or mixed-up gradient shows
        weights = torch.linspace(-1, 2, out.numel(), dtype=out.dtype).reshape(out.shape)
        (out * weights).sum().backward()
        results[name] = (out.detach(), stack.loc.grad, *(v.grad for v in stack.deterministic.values()))
    for name in ("vmap", "loop"):
        for got, want in zip(results["chain"], results[name], strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for r, (bnn, guide) in enumerate(zip(models, guides, strict=True)):
        expected = bnn.apply_parameters(x[r], guide.split(guide.loc.detach()))
        torch.testing.assert_close(results["chain"][0][r], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "form", [BatchedForm(antithetic=True), BatchedForm(antithetic=False, particles=3)], ids=["antithetic", "particles"]
)
def test_the_chain_vmap_and_loop_give_the_same_losses_and_gradients_over_several_draws(form):
    """The antithetic pair and P particles run 2R or PR networks (in one call where the stack allows it, with every
    per-run slope and deterministic bias repeated per draw): the three ways of running them give each run the same
    loss and gradients."""
    models, guides = zip(*_leaky_runs((-0.5, 0.0, 0.3), weights_only), strict=True)
    x = torch.randn(3, B, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 3, (3, B), generator=torch.Generator().manual_seed(4))
    results = {}
    for name, options in {
        "chain": {"chain": True},
        "vmap": {"chain": False, "loop_runs": False},
        "loop": {"chain": False, "loop_runs": True},
    }.items():
        stack = RunStack(models, guides, **options)
        kl = BatchedKL(models, stack.sites, closed_form_kl=True, device=stack.loc.device, dtype=torch.float64)
        step = BatchedStep(stack, kl, BatchedAdam(stack.leaves), form)
        lead = () if form.particles == 1 else (form.particles,)
        eps = torch.randn(3, *lead, stack.loc.shape[1], generator=torch.Generator().manual_seed(5), dtype=torch.float64)
        loss, _ = step.terms(x, y, torch.tensor([1.0, 0.5, 0.2], dtype=torch.float64), eps)
        (loss * torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)).sum().backward()
        results[name] = (loss.detach(), *(leaf.grad for leaf in stack.leaves))
    for name in ("vmap", "loop"):
        for got, want in zip(results["chain"], results[name], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_a_mixture_run_leaves_a_diverging_run_of_another_family_finite_gradients():
    """Runs of other families in a scale mixture's segment are scored at 0 by the mixture's formula (then masked
    out): at their own huge weights the unused mixture parameters would overflow to a NaN that the mask does not
    keep out of the gradient (float32, w = 1e20)."""
    runs = [_run(prior, "flat:0.1", seed) for seed, prior in enumerate(["laplace:0,1", "mixture:0.5,1,0.05"])]
    models, guides = zip(*runs, strict=True)
    stack = RunStack(models, guides)
    kl = BatchedKL(models, stack.sites, closed_form_kl=False, device=stack.loc.device, dtype=torch.float32)
    assert {family for seg in kl.segments for family in seg.families} == {Family.LAPLACE, Family.MIXTURE}
    w = torch.full((2, stack.loc.shape[1]), 0.5).index_fill_(0, torch.tensor([0]), 1e20).requires_grad_()
    value = kl.negative_log_prior(w)
    value.sum().backward()
    assert torch.isfinite(value).all() and torch.isfinite(w.grad).all()
    torch.testing.assert_close(w.grad[0], torch.ones_like(w.grad[0]))  # d(-log Laplace(w; 0, 1))/dw = sign(w)
    expected = -ScaleMixtureNormal(torch.tensor(0.5), torch.tensor(1.0), torch.tensor(0.05)).log_prob(w[1]).sum()
    torch.testing.assert_close(value[1], expected)


def test_only_chains_of_linear_layers_and_elementwise_activations_take_the_chain():
    mlp = build_model("mlp:5,5", input_shape=(2,), num_classes=2, activation="tanh")
    assert [name for name, _ in linear_chain(mlp)] == ["flatten", "fc1", "act1", "fc2", "act2", "out"]
    assert linear_chain(build_model("lenet", input_shape=(1, 28, 28), num_classes=10)) is None
    assert linear_chain(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.LayerNorm(3))) is None
    assert linear_chain(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Flatten())) is None  # not leading
    assert linear_chain(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Dropout(0.0))) is not None

    class Residual(torch.nn.Sequential):
        def forward(self, x):
            return x + super().forward(x)

    assert linear_chain(Residual(torch.nn.Linear(3, 3))) is None
    pyro.set_rng_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2)).double()
    bnn = BNN(net, parse_prior("normal:0,1"), Categorical(N)).double()
    guide = parse_guide("flat:0.1").build(bnn).double()
    with torch.no_grad(), pyro.poutine.block():
        guide(torch.randn(B, 2, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
    assert RunStack([bnn], [guide]).chain is None
    with pytest.raises(ValueError, match="Sequential is not a chain of linear layers"):
        RunStack([bnn], [guide], chain=True)


def test_a_chain_without_flatten_acts_on_the_last_dimension_as_the_network_does():
    """Without a leading Flatten a Linear acts on the last input dimension: inputs with more dimensions than
    (R, B, in) go through vmap, which gives the network's own outputs."""
    pyro.set_rng_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    bnn = BNN(net, parse_prior("normal:0,1"), Categorical(N)).double()
    guide = parse_guide("flat:0.1").build(bnn).double()
    with torch.no_grad(), pyro.poutine.block():
        guide(torch.randn(B, 3, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
    stack, mapped = RunStack([bnn], [guide]), RunStack([bnn], [guide], chain=False)
    assert stack.chain is not None
    weights = stack.split(stack.loc.detach())
    for x in (torch.randn(1, B, 3, dtype=torch.float64), torch.randn(1, B, 4, 3, dtype=torch.float64)):
        expected = bnn.apply_parameters(x[0], guide.split(guide.loc.detach()))
        torch.testing.assert_close(stack.outputs(x, weights)[0], expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(mapped.outputs(x, weights)[0], expected, rtol=0, atol=1e-12)


def test_likelihoods_or_dropout_that_differ_are_refused():
    from pyro_bnn.likelihoods import Gaussian

    def regression(scale, dropout=0.0):
        pyro.set_rng_seed(0)
        net = build_model("mlp:4", input_shape=(2,), num_classes=1, activation="tanh", dropout=dropout).double()
        bnn = BNN(net, parse_prior("normal:0,1"), Gaussian(N, scale=scale)).double()
        guide = parse_guide("flat:0.1").build(bnn).double()
        with torch.no_grad(), pyro.poutine.block():
            guide(torch.randn(B, 2, dtype=torch.float64), torch.randn(B, 1, dtype=torch.float64))
        return bnn, guide

    (a, ga), (b, gb) = regression(0.1), regression(1.0)
    with pytest.raises(ValueError, match="run 1's likelihood .* differs from run 0's"):
        RunStack([a, b], [ga, gb])
    (c, gc) = regression(0.1, dropout=0.2)
    with pytest.raises(ValueError, match="run 0's network has dropout"):
        RunStack([c], [gc])


def test_stacked_and_row_adam_match_torch_adam_per_run():
    """Both BatchedAdam updates equal torch's Adam run by run: per-run learning rates and weight decays, a run
    frozen for some steps (its values and state untouched, its step count behind the others) and a grad of None."""
    gen = torch.Generator().manual_seed(0)
    runs, shape = 3, (4, 5)
    start = [torch.randn(runs, *shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    grads = [[torch.randn(runs, *shape, generator=gen, dtype=torch.float64) for _ in range(2)] for _ in range(6)]
    lrs = [torch.tensor([0.1, 0.01, 0.05], dtype=torch.float64)] * 2
    decays = [torch.tensor([0.0, 0.1, 0.5], dtype=torch.float64), None]
    frozen = {1: [False, True, True], 2: [False, True, True], 4: [True, False, True]}
    results = {}
    for stacked in (True, False):
        params = [p.clone().requires_grad_() for p in start]
        adam = BatchedAdam(params, betas=(0.8, 0.99), eps=1e-6, stacked=stacked)
        assert adam.stacked is stacked
        for t, (g0, g1) in enumerate(grads):
            params[0].grad, params[1].grad = g0, (None if t == 3 else g1)
            active = torch.tensor(frozen.get(t, [True] * runs))
            adam.step(lrs, decays, active)
        results[stacked] = [p.detach() for p in params], [[adam.row_state(i, r) for r in range(runs)] for i in (0, 1)]
    for r in range(runs):  # each run alone through torch's Adam
        own = [p[r].clone().requires_grad_() for p in start]
        groups = [{"params": [own[0]], "weight_decay": float(decays[0][r])}, {"params": [own[1]]}]
        reference = torch.optim.Adam(groups, lr=float(lrs[0][r]), betas=(0.8, 0.99), eps=1e-6)
        for t, (g0, g1) in enumerate(grads):
            if not frozen.get(t, [True] * runs)[r]:
                continue
            own[0].grad, own[1].grad = g0[r], (None if t == 3 else g1[r])
            reference.step()
        for stacked in (True, False):
            values, states = results[stacked]
            for i in (0, 1):
                torch.testing.assert_close(values[i][r], own[i].detach(), rtol=0, atol=1e-12)
                want = reference.state[own[i]]
                got = states[i][r]
                assert float(got["step"]) == float(want["step"])
                torch.testing.assert_close(got["exp_avg"], want["exp_avg"], rtol=0, atol=1e-12)
                torch.testing.assert_close(got["exp_avg_sq"], want["exp_avg_sq"], rtol=0, atol=1e-12)


def _dropout_runs(model: str, input_shape: tuple[int, ...], classes: int, p: float) -> list:
    runs = []
    for seed, prior in enumerate(["normal:0,1", "normal:0,0.3"]):
        pyro.set_rng_seed(seed)
        net = build_model(model, input_shape=input_shape, num_classes=classes, activation="relu", dropout=p).double()
        bnn = BNN(net, parse_prior(prior), Categorical(N)).double()
        guide = parse_guide(f"mc-dropout:{p}").build(bnn).double()
        with torch.no_grad(), pyro.poutine.block():
            guide(torch.randn(B, *input_shape, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
        runs.append((bnn, guide))
    return runs


@pytest.mark.parametrize(
    ("model", "input_shape", "classes", "options"),
    [
        ("mlp:6,5", (3,), 3, {"chain": True}),
        ("mlp:6,5", (3,), 3, {"chain": False, "loop_runs": False}),
        ("mlp:6,5", (3,), 3, {"chain": False, "loop_runs": True}),
        ("lenet:1", (1, 28, 28), 10, {"loop_runs": False}),
    ],
    ids=["chain", "vmap", "loop", "lenet"],
)
def test_a_batched_dropout_step_is_each_runs_map_objective_under_its_own_masks(model, input_shape, classes, options):
    """MC dropout runs: each run's loss is -(N/B) log p(y | w, masks) - kl_weight log p(w) with the network's
    dropout layers replaced by the masks its noise gives (a value kept, at 1 / (1 - p), where its draw exceeds the
    p-quantile of N(0, 1); written here from the noise, per example and layer in the network's order), and its
    gradient that loss's gradient."""
    p = 0.3
    runs = _dropout_runs(model, input_shape, classes, p)
    models, guides = zip(*runs, strict=True)
    stack = RunStack(models, guides, **options)
    kl = BatchedKL(models, stack.sites, closed_form_kl=True, device=stack.loc.device, dtype=torch.float64)
    step = BatchedStep(stack, kl, BatchedAdam(stack.leaves), BatchedForm(antithetic=False))
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, B, *input_shape, dtype=torch.float64, generator=gen)
    y = torch.randint(0, classes, (2, B), generator=gen)
    layers = stack.dropout_layers(input_shape)
    size = sum(layer.size for layer in layers)
    assert [layer.p for layer in layers] == [p] * len(layers) and len(layers) >= 2
    eps = torch.randn(2, B * size, dtype=torch.float64, generator=gen)
    kl_weights = (1.0, 0.25)
    loss, terms = step.terms(x, y, torch.tensor(kl_weights, dtype=torch.float64), eps)
    loss.sum().backward()
    threshold = Normal(0.0, 1.0).icdf(torch.tensor(p)).item()
    for r, ((bnn, guide), weight) in enumerate(zip(runs, kl_weights, strict=True)):
        draws = eps[r].reshape(B, size).split([layer.size for layer in layers], dim=1)
        dropouts = [m for m in bnn.net.modules() if isinstance(m, torch.nn.Dropout)]
        hooks = [
            module.register_forward_hook(
                lambda _, args, out, d=d: out * (d > threshold).double().reshape(out.shape) / (1 - p)
            )
            for module, d in zip(dropouts, draws, strict=True)
        ]
        bnn.net.eval()  # nn.Dropout passes its input on; the hook applies the mask
        values = {name: guide.median()[name].requires_grad_() for name in bnn.site_names}
        try:
            log_likelihood = bnn.likelihood.log_likelihood(bnn.apply_parameters(x[r], values), y[r]).sum()
        finally:
            for hook in hooks:
                hook.remove()
        log_prior = sum(bnn.prior.distribution(site, {}).log_prob(values[site.name]) for site in bnn.sites)
        expected = -log_likelihood * (N / B) - weight * log_prior
        torch.testing.assert_close(loss[r], expected, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(terms.data_term[r], -log_likelihood.detach() * (N / B), rtol=1e-9, atol=1e-9)
        grads = torch.autograd.grad(expected, [values[n] for n in bnn.site_names])
        torch.testing.assert_close(stack.loc.grad[r], torch.cat([g.reshape(-1) for g in grads]), rtol=1e-9, atol=1e-9)


def test_dropout_masks_keep_each_value_with_probability_one_minus_p():
    """Over 200 000 draws the masks keep 70 % of the values (within 4 standard errors) at 1 / 0.7, and every layer
    gets its own part of the noise."""
    runs = _dropout_runs("mlp:6,5", (3,), 3, 0.3)
    stack = RunStack(*zip(*runs, strict=True))
    layers = stack.dropout_layers((3,))
    assert [(layer.name, layer.shape) for layer in layers] == [("drop1", (6,)), ("drop2", (5,))]
    rows = 200_000 // 11
    eps = torch.randn(2, rows, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    masks = dropout_masks(eps, layers)
    assert masks["drop1.mask"].shape == (2, rows, 6) and masks["drop2.mask"].shape == (2, rows, 5)
    values = torch.cat([m.reshape(-1) for m in masks.values()])
    assert set(values.unique().tolist()) == {0.0, 1 / 0.7}
    kept = (values > 0).double().mean().item()
    assert abs(kept - 0.7) < 4 * (0.7 * 0.3 / values.numel()) ** 0.5, kept
    torch.testing.assert_close(masks["drop2.mask"][0, 0] > 0, eps[0, 0, 6:] > Normal(0.0, 1.0).icdf(torch.tensor(0.3)))
