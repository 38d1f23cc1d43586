"""Batched node-noise runs (implicit BNNs with the K-component mixture guide): each run's loss against
MixtureMeanKL given the same noise (float64), the batched SGD against torch's SGD, validation draws against the
mixture's own, and runs trained in a batch against runs trained alone."""

from __future__ import annotations

import math

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.batched import BatchedForm, BatchedKL, BatchedStep, RunStack, fit_batched
from pyro_bnn.batched.sgd import BatchedSGD
from pyro_bnn.batched.step import RunNoise
from pyro_bnn.batched.validation import validation_outputs
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import NodeNoiseMixture
from pyro_bnn.infer import Checkpoint, ParamGroups, Trainer
from pyro_bnn.infer.mixture_kl import MixtureMeanKL
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.node_noise import NodeNoisePrior, add_node_noise, is_node_noise

N, B = 40, 8


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 3))


def _conv() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 3))


def _runs(make, input_shape, k, prior_scales, bias_noise):
    runs = []
    for seed, scale in enumerate(prior_scales):
        torch.manual_seed(seed)
        pyro.set_rng_seed(seed)
        bnn = BNN(add_node_noise(make(), bias_noise=bias_noise), NodeNoisePrior(scale), Categorical(N)).double()
        guide = NodeNoiseMixture(bnn, k)
        with torch.no_grad(), pyro.poutine.block():
            guide(torch.randn(B, *input_shape, dtype=torch.float64), torch.zeros(B, dtype=torch.long))
        runs.append((bnn, guide))
    return runs


@pytest.mark.parametrize(
    ("make", "input_shape", "options", "copies"),
    [
        (_mlp, (3,), {"chain": True}, 2),
        (_mlp, (3,), {"chain": False, "loop_runs": False}, 2),
        (_mlp, (3,), {"chain": False, "loop_runs": True}, 3),
        (_conv, (1, 6, 6), {"loop_runs": False}, 2),
    ],
    ids=["chain", "vmap", "loop", "conv"],
)
def test_a_batched_node_noise_step_is_each_runs_mixture_objective_with_the_same_noise(
    monkeypatch, make, input_shape, options, copies
):
    """Each run's loss, data term and gradients (component means, raw scales, the deterministic weights) equal
    MixtureMeanKL's for that run alone when it draws the same noise: rows repeated S times, row j from component
    j mod K, the data term scaled by N / (B S), the closed-form KL of the mixture mean under each run's prior and KL
    weight; with bias noise (the MLPs: a chain of batched products that applies the noise itself, vmapped and
    looped) and per-channel noise of a convolution."""
    runs = _runs(make, input_shape, 3, (0.1, 0.3), bias_noise=make is _mlp)
    models, guides = zip(*runs, strict=True)
    stack = RunStack(models, guides, **options)
    assert stack.components == 3 and (stack.chain is not None) == bool(options.get("chain"))
    kl = BatchedKL(models, stack.sites, closed_form_kl=True, device=stack.loc.device, dtype=torch.float64)
    step = BatchedStep(stack, kl, BatchedSGD(stack.leaves, momentum=0.9), BatchedForm(False, True, copies=copies))
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, B, *input_shape, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 3, (2, B), generator=gen)
    eps = torch.randn(2, B * copies, stack.num_latents, dtype=torch.float64, generator=gen)
    kl_weights = (1.0, 0.3)
    loss, terms = step.terms(x, y, torch.tensor(kl_weights, dtype=torch.float64), eps)
    loss.sum().backward()
    for r, ((bnn, guide), weight) in enumerate(zip(runs, kl_weights, strict=True)):
        with monkeypatch.context() as patch:
            patch.setattr(torch, "randn", lambda *args, r=r, **kw: eps[r].clone())
            single = MixtureMeanKL(samples_per_example=copies)(bnn, guide, x[r], y[r], weight)
        torch.testing.assert_close(loss[r], single.loss, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(terms.data_term[r], single.data_term, rtol=1e-10, atol=1e-10)
        weights = dict(bnn.net.named_parameters())
        grads = torch.autograd.grad(single.loss, [guide.locs, guide.scale_raw, *weights.values()])
        torch.testing.assert_close(stack.loc.grad[r], grads[0], rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(stack.raw_scale.grad[r], grads[1], rtol=1e-9, atol=1e-10)
        for (name, _), grad in zip(weights.items(), grads[2:], strict=True):
            torch.testing.assert_close(stack.deterministic[name].grad[r], grad, rtol=1e-9, atol=1e-10, msg=name)


@pytest.mark.parametrize(("momentum", "nesterov"), [(0.9, True), (0.5, False), (0.0, False)])
def test_batched_sgd_matches_torch_sgd_per_run(momentum, nesterov):
    """Per-run learning rates and weight decays, a run frozen for a step: parameters and momentum buffers equal those
    of torch's SGD on each run alone (which skips the frozen run's step)."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(3, 4, 2, generator=gen, dtype=torch.float64), torch.randn(3, 5, generator=gen)]
    params = [p.requires_grad_() for p in params]
    alone = [[p.detach()[r].clone().requires_grad_() for p in params] for r in range(3)]
    lrs, decays = [0.1, 0.02, 0.3], [0.0, 1e-2, 5e-4]
    optimizers = [
        torch.optim.SGD(alone[r], lr=lrs[r], momentum=momentum, nesterov=nesterov, weight_decay=decays[r])
        for r in range(3)
    ]
    batched = BatchedSGD(params, momentum=momentum, nesterov=nesterov)
    lr = torch.tensor(lrs, dtype=torch.float64)
    wd = torch.tensor(decays, dtype=torch.float64)
    for t in range(5):
        grads = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
        active = torch.tensor([True, t != 2, True])
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        batched.step([lr, lr], [wd, wd], active)
        for r in range(3):
            if not bool(active[r]):
                continue
            for q, g in zip(alone[r], grads, strict=True):
                q.grad = g[r].clone()
            optimizers[r].step()
    for r in range(3):
        for leaf, (p, q) in enumerate(zip(params, alone[r], strict=True)):
            torch.testing.assert_close(p.detach()[r], q.detach(), rtol=1e-6, atol=1e-7)
            state = optimizers[r].state[q]
            if momentum:
                torch.testing.assert_close(batched.row_state(leaf, r)["momentum_buffer"], state["momentum_buffer"])
            else:
                assert batched.row_state(leaf, r) == {}


def test_batched_validation_draws_sample_i_from_component_i_mod_k():
    """Validation draws S noise vectors per run from its own generator, draw i from component i mod K (as the
    mixture guide's draw()), each one the noise of the whole validation set."""
    runs = _runs(_mlp, (3,), 2, (0.1, 0.2), bias_noise=False)
    stack = RunStack(*zip(*runs, strict=True))
    x = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    noise = RunNoise([4, 5], stack.loc.device)
    noise.start_epoch(2)
    outputs = validation_outputs(stack, [0, 1], x, 3, noise)
    again = RunNoise([4, 5], stack.loc.device)
    again.start_epoch(2)
    for r, (bnn, guide) in enumerate(runs):
        eps = torch.randn(3, stack.num_latents, generator=again.generators[r], dtype=torch.float64)
        locs, scales = guide.component_loc_scale()
        for i in range(3):
            z = guide.split((locs[i % 2] + scales[i % 2] * eps[i]).detach())
            torch.testing.assert_close(outputs[r, i], bnn.run_network(x[r], z), rtol=1e-10, atol=1e-10)


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(200 + seed)
    x = torch.randn(3 * N, 2, generator=gen)
    return x, ((x.sum(1) > 0) ^ (torch.rand(3 * N, generator=gen) < 0.1)).long()  # 10 % of the labels flipped


def _trainer(
    seed: int, *, k: int = 2, lr: float = 0.05, prior_scale: float = 0.3, callbacks=(), device="cpu", prior=None
):
    """A node-noise net trained as the implicit-BNN runs are: SGD with Nesterov momentum, its rates per example."""
    x, y = _data(seed)
    train = BatchLoader(x[: 2 * N], y[: 2 * N], batch_size=20, shuffle=True, seed=seed, device=device)
    val = BatchLoader(x[2 * N :], y[2 * N :], batch_size=N, device=device)
    pyro.set_rng_seed(seed)
    net = add_node_noise(nn.Sequential(nn.Linear(2, 12), nn.Tanh(), nn.Linear(12, 2)), bias_noise=True)
    bnn = BNN(net, NodeNoisePrior(prior_scale) if prior is None else prior, Categorical(2 * N))
    sgd = {"momentum": 0.9, "nesterov": True}
    optim = ParamGroups(
        model={"lr": lr / (2 * N), "weight_decay": 5e-4 * 2 * N, **sgd}, guide={"lr": 4 * lr / (2 * N), **sgd}
    )
    trainer = Trainer(
        bnn,
        f"mixture:{k}",
        optim=optim,
        objective=MixtureMeanKL(samples_per_example=2),
        seed=seed,
        num_val_samples=2 * k,
        progress=False,
        callbacks=list(callbacks),
        device=device,
    )
    return trainer, train, val


class _InjectedNoise(MixtureMeanKL):
    """MixtureMeanKL for a run alone that draws its per-row noise from the run's RunNoise, as the batch does
    (reseeded at every epoch's start by the callback it is)."""

    def __init__(self, seed: int, copies: int) -> None:
        super().__init__(copies)
        self.noise = RunNoise([seed], torch.device("cpu"))
        self.noise.start_epoch(0)

    def __call__(self, model, guide, x, y, kl_weight):
        eps = self.noise.draw(
            (x.shape[0] * self.samples_per_example, guide.num_latents), dtype=x.dtype, device=x.device
        )
        real = torch.randn
        torch.randn = lambda *args, **kwargs: eps[0].clone()
        try:
            return super().__call__(model, guide, x, y, kl_weight)
        finally:
            torch.randn = real

    def on_train_start(self, trainer) -> None:
        pass

    def on_epoch_end(self, trainer, record) -> None:
        self.noise.start_epoch(trainer.epoch)

    def on_train_end(self, trainer) -> None:
        pass


@pytest.mark.parametrize(
    ("optimizer", "kl_scale", "schedule"),
    [("sgd", "dataset", False), ("sgd", "paper", True), ("adam", "dataset", False)],
    ids=["sgd", "paper-decay", "adam"],
)
def test_a_node_noise_batch_follows_each_run_trained_alone_with_the_same_noise(optimizer, kl_scale, schedule):
    """Two runs (their own priors, rates and weight decays; bias noise; a last minibatch of 10 rows) trained in a
    batch for 2 epochs end, epoch losses, data terms, KL terms, rates, weights, mixture parameters and optimiser
    state, where each ends trained alone by MixtureMeanKL drawing the batch's noise (float64, to 1e-9): SGD with
    Nesterov momentum, the paper's unscaled likelihood under a per-step decay schedule, and Adam with weight decay."""
    from pyro_bnn.infer import LRSchedulerOptions
    from pyro_bnn.infer.lr_schedules import group_scheduler

    size, epochs = 50, 2

    def build(seed, objective):
        gen = torch.Generator().manual_seed(200 + seed)
        x = torch.randn(size + 20, 2, generator=gen, dtype=torch.float64)
        y = (x.sum(1) > 0).long()
        train = BatchLoader(x[:size], y[:size], batch_size=20, shuffle=True, seed=seed)
        pyro.set_rng_seed(seed)
        net = add_node_noise(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)), bias_noise=True)
        bnn = BNN(net, NodeNoisePrior(0.3 + 0.1 * seed), Categorical(size, kl_scale=kl_scale)).double()
        lr = 0.05 * (1 + seed)
        if optimizer == "sgd":
            sgd = {"momentum": 0.9, "nesterov": True}
            optim = ParamGroups(
                model={"lr": lr / size, "weight_decay": 5e-4 * size, **sgd}, guide={"lr": 4 * lr / size, **sgd}
            )
        else:
            model = {"lr": lr / 10, "weight_decay": 1e-2 * (seed + 1)}
            optim = ParamGroups(constructor=torch.optim.Adam, model=model, guide={"lr": lr / 5})
        scheduler = None
        if schedule:
            steps = epochs * len(train)
            decay = {"model": "decay:0.01", "guide": "decay:0.01"}
            scheduler = LRSchedulerOptions(lambda o: group_scheduler(o, decay, steps), "step")
        callbacks = [objective] if isinstance(objective, _InjectedNoise) else []
        trainer = Trainer(
            bnn,
            "mixture:3",
            optim=optim,
            objective=objective,
            lr_scheduler=scheduler,
            seed=seed,
            progress=False,
            callbacks=callbacks,
        )
        return trainer, train

    built = [build(seed, MixtureMeanKL(2)) for seed in (0, 1)]
    outcomes = fit_batched([t for t, _ in built], [tr for _, tr in built], epochs, progress=False)
    for seed, (batched, _), outcome in zip((0, 1), built, outcomes, strict=True):
        alone, train = build(seed, _InjectedNoise(seed, 2))
        history = alone.fit(train, epochs)
        for a, b in zip(history, outcome.history, strict=True):
            for key in ("loss", "data_term", "kl_term", "lr"):
                assert math.isclose(a[key], b[key], rel_tol=1e-9, abs_tol=1e-12), (seed, a["epoch"], key)
        ours, theirs = _values(batched), _values(alone)
        for name, value in ours.items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-9, atol=1e-12, msg=name)
        states = [alone.optimizer.state[p] for g in alone.optimizer.param_groups for p in g["params"]]
        batched_states = [batched.optimizer.state[p] for g in batched.optimizer.param_groups for p in g["params"]]
        for a, b in zip(states, batched_states, strict=True):
            assert a.keys() == b.keys()
            for key in a:
                torch.testing.assert_close(torch.as_tensor(b[key]).double(), torch.as_tensor(a[key]).double())


def _values(trainer) -> dict[str, torch.Tensor]:
    return {**dict(trainer.guide.named_parameters()), **dict(trainer.bnn.net.named_parameters())}


def test_a_node_noise_batch_resumes_exactly(tmp_path):
    """The mixture's (K, D) means and raw scales, the weights and SGD's momentum buffers go into each run's checkpoint
    and back: a batch resumed after 2 of 4 epochs ends where an uninterrupted one ends."""
    specs = [{"seed": 0}, {"seed": 1, "prior_scale": 0.1, "lr": 0.02}]

    def fit(epochs, callbacks=None, resume=None):
        built = [_trainer(**s, callbacks=[] if callbacks is None else [callbacks[i]]) for i, s in enumerate(specs)]
        trainers = [t for t, _, _ in built]
        outcomes = fit_batched(
            trainers,
            [tr for _, tr, _ in built],
            epochs,
            val_loaders=[v for _, _, v in built],
            resume_from=resume,
            progress=False,
        )
        assert not any(o.failed for o in outcomes)
        return trainers

    full = fit(4)
    paths = [tmp_path / f"run{i}.pt" for i in range(2)]
    fit(2, [Checkpoint(p) for p in paths])
    resumed = fit(4, [Checkpoint(p) for p in paths], resume=paths)
    for a, b in zip(full, resumed, strict=True):
        ours, theirs = _values(a), _values(b)
        assert ours.keys() == theirs.keys() and {"locs", "scale_raw"} <= ours.keys()
        for name, value in ours.items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-6, atol=1e-7, msg=name)
        buffers = [s["momentum_buffer"] for s in b.optimizer.state.values()]
        assert len(buffers) == len(ours) and all(bool(buf.abs().sum() > 0) for buf in buffers)


def test_node_noise_runs_in_a_batch_match_runs_trained_alone_over_seeds():
    """Over 8 seeds, node-noise runs trained in one batch reach the final loss and validation accuracy of the same
    runs trained one by one (mean differences within 3 standard errors), and both learn the problem."""
    seeds = range(8)
    built = [_trainer(seed) for seed in seeds]
    outcomes = fit_batched(
        [t for t, _, _ in built], [tr for _, tr, _ in built], 25, val_loaders=[v for _, _, v in built], progress=False
    )
    batched = torch.tensor([[o.history[-1]["loss"], o.history[-1]["val_accuracy"]] for o in outcomes])
    separate = []
    for seed in seeds:
        trainer, train, val = _trainer(seed)
        history = trainer.fit(train, 25, val_loader=val)
        separate.append([history[-1]["loss"], history[-1]["val_accuracy"]])
    separate = torch.tensor(separate)
    assert batched[:, 1].mean() > 0.75 and separate[:, 1].mean() > 0.75, (batched, separate)
    diff = batched.mean(0) - separate.mean(0)
    se = (batched.var(0) / len(seeds) + separate.var(0) / len(seeds)).sqrt()
    assert (diff.abs() < 3 * se + 1e-3).all(), (diff, se)
    assert all(o.history[-1]["batched_runs"] == 8 for o in outcomes)
    assert math.isfinite(float(batched[:, 0].sum()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_graphed_node_noise_batch_trains_as_an_eager_one():
    """On a GPU the node-noise step (the per-row draws, the mixture-mean KL, the stacked SGD update) replays from a
    CUDA graph as it runs eagerly."""
    results = []
    for graph in (False, True):
        built = [_trainer(seed, device="cuda") for seed in (0, 1, 2)]
        outcomes = fit_batched(
            [t for t, _, _ in built], [tr for _, tr, _ in built], 2, progress=False, cuda_graph=graph
        )
        assert not any(o.failed for o in outcomes)
        results.append([_values(t) for t, _, _ in built])
    for eager, graphed in zip(*results, strict=True):
        for name, value in eager.items():
            torch.testing.assert_close(value, graphed[name], rtol=1e-5, atol=1e-6, msg=name)


def test_node_noise_runs_a_batch_cannot_reproduce_are_refused_in_one_line_before_any_step():
    def sgd(**changes):
        return {"momentum": 0.9, "nesterov": True, "lr": 1e-3, **changes}

    def refused(match, *, optims=(None, None), prior=None, objective=None, guides=("mixture:2", "mixture:2")):
        built = []
        for seed, (optim, guide) in enumerate(zip(optims, guides, strict=True)):
            trainer, train, _ = _trainer(seed, prior=prior)
            trainer = Trainer(
                trainer.bnn,
                guide,
                optim=optim or ParamGroups(model=sgd(), guide=sgd()),
                objective=objective or MixtureMeanKL(2),
                seed=seed,
                progress=False,
            )
            built.append((trainer, train))
        with pytest.raises(ValueError, match=match):
            fit_batched([t for t, _ in built], [tr for _, tr in built], 1, progress=False)
        assert all(not t.history for t, _ in built)

    adam = ParamGroups(constructor=torch.optim.Adam, model={"lr": 1e-3}, guide={"lr": 1e-3})
    refused("batched runs train with one optimiser, Adam or SGD; run 1 uses Adam, run 0 SGD", optims=(None, adam))
    # A run whose optimiser no batch takes is named as itself, whichever run it is (it read "run 0 uses
    # ClippedAdam, run 0 Adam").
    adamw = ParamGroups(constructor=torch.optim.AdamW, model={"lr": 1e-3}, guide={"lr": 1e-3})
    for optims, run in (((adamw, adam), 0), ((adam, adamw), 1)):
        refused(
            f"^run {run} trains with AdamW; batched runs take torch.optim.Adam or torch.optim.SGD only", optims=optims
        )
    uneven = ParamGroups(model=sgd(), guide=sgd(momentum=0.5))
    refused("run 0's SGD group 'guide' has momentum and nesterov", optims=(uneven, None))
    refused("SGD uses dampening", optims=(ParamGroups(model=sgd(nesterov=False, dampening=0.1), guide=sgd()), None))
    refused(r"differ in their mixture components \(K = 2, K = 3\)", guides=("mixture:2", "mixture:3"))
    from pyro_bnn.priors import parse_prior

    laplace = parse_prior("laplace:1,0.1", select=is_node_noise)
    refused("mixture-mean KL against Normal priors only", prior=laplace)
    from pyro_bnn.infer import TraceELBO

    refused("a node-noise mixture guide trains with the mixture-mean objective", objective=TraceELBO())
