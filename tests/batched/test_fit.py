"""fit_batched: per-run bookkeeping (histories, validation, checkpoints, divergence, early stopping) and batched runs
against separate ones."""

from __future__ import annotations

import math

import pyro
import pytest
import torch
from torch.distributions import Normal

from pyro_bnn import BNN
from pyro_bnn.batched import RunStack, fit_batched
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import Checkpoint, EarlyStopping, NonFiniteLossError, ObjectiveOptions, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.priors import nothing, parse_prior

N, VAL = 120, 60
BLUNDELL = ObjectiveOptions("trace", num_particles=2)
"""Bayes by Backprop's objective as Blundell et al. train it: Trace_ELBO with two particles."""


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy two-class problem: the label is the sign of x0 + x1, flipped for 10 % of points."""
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(N + VAL, 2, generator=gen)
    y = (x.sum(1) > 0).long()
    flip = torch.rand(N + VAL, generator=gen) < 0.1
    return x, torch.where(flip, 1 - y, y)


def _trainer(
    seed: int,
    *,
    prior="normal:0,1",
    lr=0.05,
    guide="flat:0.05",
    objective="auto",
    callbacks=(),
    dropout=None,
    batch_size=40,
    **kw,
):
    x, y = _data(seed)
    train = BatchLoader(x[:N], y[:N], batch_size=batch_size, shuffle=True, seed=seed)
    val = BatchLoader(x[N:], y[N:], batch_size=VAL)
    pyro.set_rng_seed(seed)
    if dropout is None:  # MC dropout's network has dropout layers of its probability
        dropout = float(guide.split(":")[1]) if guide.startswith("mc-dropout") else 0.0
    net = build_model("mlp:8", input_shape=(2,), num_classes=2, activation="tanh", dropout=dropout)
    bnn = BNN(net, parse_prior(prior, select=nothing if guide == "mle" else None), Categorical(N))
    trainer = Trainer(
        bnn,
        guide,
        optim=pyro.optim.Adam({"lr": lr}),
        objective=objective,
        seed=seed,
        num_val_samples=4,
        progress=False,
        callbacks=list(callbacks),
        **kw,
    )
    return trainer, train, val


def _fit(specs, epochs, **kw):
    built = [_trainer(**spec) for spec in specs]
    trainers = [t for t, _, _ in built]
    outcomes = fit_batched(
        trainers, [tr for _, tr, _ in built], epochs, val_loaders=[v for _, _, v in built], progress=False, **kw
    )
    return trainers, outcomes


def test_each_run_keeps_a_history_with_its_own_validation_metrics():
    trainers, outcomes = _fit([{"seed": 0}, {"seed": 1, "prior": "normal:0,0.3", "lr": 0.01}], 3)
    for trainer, outcome in zip(trainers, outcomes, strict=True):
        assert not outcome.failed
        assert [r["epoch"] for r in outcome.history] == [1, 2, 3] and trainer.epoch == 3
        assert trainer.global_step == 9
        record = outcome.history[-1]
        assert {"loss", "data_term", "kl_term", "kl_weight", "val_accuracy", "val_nll", "val_ece"} <= set(record)
        assert record["batched_runs"] == 2
        assert math.isclose(record["loss"], record["data_term"] + record["kl_term"], rel_tol=1e-9)
    assert outcomes[0].history[-1]["lr"] == 0.05 and outcomes[1].history[-1]["lr"] == 0.01
    # Each run's validation metrics are those of its own guide after the epoch, copied back into it.
    metrics = trainers[1].evaluate(_trainer(1)[2], num_samples=400)
    assert abs(metrics["accuracy"] - outcomes[1].history[-1]["val_accuracy"]) < 0.15


def test_a_batched_checkpoint_is_an_ordinary_one_and_resumes_exactly(tmp_path):
    """Runs checkpointed after 2 of 4 epochs and resumed (batched) end where uninterrupted batched runs end; an
    ordinary Trainer resumes the same checkpoint on its own."""
    specs = [{"seed": s, "prior": p} for s, p in ((0, "normal:0,1"), (1, "laplace:0,1"))]
    full, _ = _fit([{**s, "objective": "trace"} for s in specs], 4)

    paths = [tmp_path / f"run{i}.pt" for i in range(2)]
    first = [{**s, "objective": "trace", "callbacks": [Checkpoint(p)]} for s, p in zip(specs, paths, strict=True)]
    _fit(first, 2)
    resumed, outcomes = _fit(
        [{**s, "objective": "trace", "callbacks": [Checkpoint(p)]} for s, p in zip(specs, paths, strict=True)],
        4,
        resume_from=paths,
    )
    for a, b, outcome in zip(full, resumed, outcomes, strict=True):
        assert [r["epoch"] for r in outcome.history] == [1, 2, 3, 4]
        torch.testing.assert_close(a.guide.loc, b.guide.loc, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.guide.log_scale, b.guide.log_scale, rtol=1e-5, atol=1e-6)

    single, train, val = _trainer(seed=0, objective="trace")
    history = single.fit(train, 6, val_loader=val, resume_from=tmp_path / "run0.pt")
    assert [r["epoch"] for r in history] == [1, 2, 3, 4, 5, 6]
    state = single.optimizer.state[single.guide.loc]
    assert float(state["step"]) == 6 * 3


@pytest.mark.parametrize("weight", [-1.0, math.nan])
def test_a_kl_weight_a_single_run_refuses_is_refused_in_a_batch(weight):
    """A bad schedule fails as it does alone (one line naming the weight), not trains with a negative KL or reads
    as a divergence."""
    bad = ObjectiveOptions("auto", kl_schedule=lambda progress: weight)
    with pytest.raises(ValueError, match="KL weight must be a finite number >= 0, got") as error:
        _fit([{"seed": 0}, {"seed": 1, "objective": bad}], 1)
    assert "\n" not in str(error.value)
    alone, train, _ = _trainer(seed=1, objective=bad)
    with pytest.raises(ValueError, match="KL weight must be a finite number >= 0, got"):
        alone.fit(train, 1)


def test_a_diverging_run_fails_alone_and_the_others_are_unchanged():
    specs = [{"seed": 0}, {"seed": 1}, {"seed": 2}]
    sane, sane_outcomes = _fit(specs, 3)
    broken_specs = [specs[0], {"seed": 1, "lr": 1e30}, specs[2]]
    broken, outcomes = _fit(broken_specs, 3)
    assert outcomes[1].failed and isinstance(outcomes[1].error, NonFiniteLossError)
    assert "loss became nan at epoch 1" in str(outcomes[1].error)
    # Frozen at its last good values: it failed in epoch 1, so those are the values it started from.
    fresh, train, _ = _trainer(seed=1, lr=1e30)
    fresh.fit(train, 0)
    assert torch.equal(broken[1].guide.loc, fresh.guide.loc)
    for r in (0, 2):
        assert not outcomes[r].failed
        assert torch.equal(sane[r].guide.loc, broken[r].guide.loc)
        assert [h["loss"] for h in sane_outcomes[r].history] == [h["loss"] for h in outcomes[r].history]


def test_a_diverging_run_under_the_rows_update_keeps_its_optimiser_state(monkeypatch):
    # torch's Adam over rows (large stacks) must skip the run whose loss turned NaN in the step, as the stacked
    # formula does: the run's own optimiser shares that state.
    from pyro_bnn.batched import adam as adam_module

    monkeypatch.setattr(adam_module, "STACKED_MAX_ELEMENTS", 0)
    broken, outcomes = _fit([{"seed": 0}, {"seed": 1, "lr": 1e30}], 2)
    assert outcomes[1].failed and not outcomes[0].failed
    assert "before the optimiser step" in str(outcomes[1].error)
    states = list(broken[1].optimizer.state_dict()["state"].values())
    assert states and all(torch.isfinite(t).all() for state in states for t in state.values() if torch.is_tensor(t))


def test_early_stopping_freezes_one_run_and_restores_its_best_epoch():
    """The monitored KL weight is constant, so it never improves after epoch 1: run 0 stops after epoch 2 with the
    guide of epoch 1 put back; run 1 trains on."""
    stopper = EarlyStopping("kl_weight", patience=1, mode="max", restore_best=True)
    trainers, outcomes = _fit([{"seed": 0, "callbacks": [stopper]}, {"seed": 1}], 5)
    assert len(outcomes[0].history) == 2
    torch.testing.assert_close(trainers[0].guide.state_dict()["loc"], stopper._best_state["guide"]["loc"])
    assert stopper.best_epoch == 1
    assert len(outcomes[1].history) == 5
    assert trainers[0].stop_training


def test_runs_that_cannot_share_a_batch_are_refused_before_training():
    with pytest.raises(ValueError, match="hierarchical prior"):
        _fit([{"seed": 0}, {"seed": 1, "prior": "hierarchical:normal,halfnormal,1", "objective": "trace"}], 1)
    with pytest.raises(ValueError, match="different objectives"):
        _fit([{"seed": 0}, {"seed": 1, "objective": "trace"}], 1)


@pytest.mark.parametrize(
    "spec",
    [
        {"guide": "flat:0.05", "objective": "trace"},
        pytest.param({"guide": "bbb", "objective": "trace"}, marks=pytest.mark.slow),
        {"guide": "bbb", "objective": BLUNDELL, "prior": "mixture:0.5,1,0.05"},
        {"guide": "mc-dropout:0.2", "objective": "trace"},
    ],
    ids=["flat", "bayes-by-backprop", "blundell", "mc-dropout"],
)
def test_batched_runs_match_separate_runs_over_seeds(spec):
    """Over 8 seeds, batched runs reach the final ELBO and validation accuracy of runs trained one by one (the mean
    differences within 3 standard errors of the difference), and both learn the problem."""
    seeds = list(range(8))
    specs = [{"seed": s, **spec} for s in seeds]
    _, outcomes = _fit(specs, 30)
    batched = torch.tensor([[o.history[-1]["loss"], o.history[-1]["val_accuracy"]] for o in outcomes])
    separate = []
    for spec in specs:
        trainer, train, val = _trainer(**spec)
        history = trainer.fit(train, 30, val_loader=val)
        separate.append([history[-1]["loss"], history[-1]["val_accuracy"]])
    separate = torch.tensor(separate)
    assert (batched[:, 1].mean() > 0.75) and (separate[:, 1].mean() > 0.75)
    diff = batched.mean(0) - separate.mean(0)
    se = (batched.var(0) / len(seeds) + separate.var(0) / len(seeds)).sqrt()
    assert (diff.abs() < 3 * se + 1e-3).all(), (diff, se)


def test_learning_rate_schedules_step_as_in_a_single_run(recwarn):
    """A per-step schedule gives the batched run the learning rates of the same run trained alone, epoch by epoch,
    without torch's warning about the scheduler stepping before its optimiser."""

    def schedule(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)

    kw = {"lr_scheduler": schedule, "lr_scheduler_interval": "step"}
    _, outcomes = _fit([{"seed": 0, **kw}, {"seed": 1}], 3)
    single, train, val = _trainer(seed=0, **kw)
    history = single.fit(train, 3, val_loader=val)
    assert [r["lr"] for r in outcomes[0].history] == [r["lr"] for r in history]
    assert outcomes[0].history[-1]["lr"] == 0.05 * 0.5**8  # the rate the last of 9 steps used
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]


def test_runs_with_other_batch_sizes_are_refused():
    built = [_trainer(seed=0), _trainer(seed=1)]
    x, y = _data(1)
    other = BatchLoader(x[:N], y[:N], batch_size=30, shuffle=True, seed=1)  # 4 steps against 3
    with pytest.raises(ValueError, match="same number of steps per epoch"):
        fit_batched([t for t, _, _ in built], [built[0][1], other], 1, progress=False)
    odd = BatchLoader(x[:N], y[:N], batch_size=34, shuffle=True, seed=1)  # also 4 steps: 34, 34, 34, 18
    odd_first = BatchLoader(x[:N], y[:N], batch_size=30, shuffle=True, seed=0)
    with pytest.raises(ValueError, match="same batch size"):
        fit_batched([_trainer(seed=0)[0], _trainer(seed=1)[0]], [odd_first, odd], 1, progress=False)


def _trained_values(trainer) -> dict[str, torch.Tensor]:
    return {**dict(trainer.guide.named_parameters()), **dict(trainer.bnn.named_parameters())}


@pytest.mark.parametrize("guide", ["map", "mle"])
def test_batched_point_estimates_train_exactly_as_single_runs(guide):
    """A point estimate draws no noise, so a batch of MAP (or maximum-likelihood) runs with their own seeds, priors,
    learning rates and KL weights (annealed, Blundell's minibatch weights, a temperature) must follow each run
    trained alone step for step: the same epoch losses and validation NLL, and the same final weights (within
    float32 rounding after 15 Adam steps)."""
    annealed = ObjectiveOptions(kl_schedule=lambda progress: min(1.0, 0.2 + progress / 3), temperature=0.5)
    specs = [
        {"seed": 0, "guide": guide},
        {"seed": 1, "guide": guide, "prior": "laplace:0,0.5", "lr": 0.02, "objective": annealed},
        {"seed": 2, "guide": guide, "prior": "normal:0,0.3", "objective": ObjectiveOptions(kl_weighting="blundell")},
    ]
    batched, outcomes = _fit(specs, 5)
    for spec, trainer, outcome in zip(specs, batched, outcomes, strict=True):
        single, train, val = _trainer(**spec)
        history = single.fit(train, 5, val_loader=val)
        assert not outcome.failed and outcome.history[-1]["batched_runs"] == 3
        for a, b in zip(outcome.history, history, strict=True):
            assert math.isclose(a["loss"], b["loss"], rel_tol=1e-5), (a["epoch"], a["loss"], b["loss"])
            assert math.isclose(a["kl_term"], b["kl_term"], rel_tol=1e-5, abs_tol=1e-6)
            assert math.isclose(a["val_nll"], b["val_nll"], rel_tol=1e-5)
        ours, theirs = _trained_values(trainer), _trained_values(single)
        assert ours.keys() == theirs.keys() and len(ours) == 4
        for name, value in ours.items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6, msg=name)
    # MAP's latent term is -log p(w) under each run's prior, times its KL weight; maximum likelihood has none.
    kl = [o.history[-1]["kl_term"] for o in outcomes]
    assert all(k == 0 for k in kl) if guide == "mle" else all(k != 0 for k in kl)
    weights = [o.history[0]["kl_weight"] for o in outcomes]
    assert weights[0] == 1.0 and weights[1] < 0.5 and weights[2] < 1.0  # three schedules, each followed


@pytest.mark.parametrize(
    "specs",
    [
        [{"seed": s, "guide": "bbb", "objective": "trace"} for s in (0, 1)],
        [
            {"seed": s, "guide": "bbb", "prior": p, "objective": BLUNDELL}
            for s, p in ((0, "mixture:0.5,1,0.05"), (1, "normal:0,1"))
        ],
        [{"seed": s, "guide": "map", "prior": p} for s, p in ((0, "normal:0,1"), (1, "cauchy:0,1"))],
        [{"seed": s, "guide": "mc-dropout:0.3", "prior": p} for s, p in ((0, "normal:0,1"), (1, "normal:0,0.5"))],
    ],
    ids=["bayes-by-backprop", "blundell", "map", "mc-dropout"],
)
def test_a_batch_resumes_exactly(tmp_path, specs):
    """Bayes by Backprop's per-site mu and rho (copied to and from the batched Adam's rows; with one particle, or
    Blundell et al.'s two and a scale mixture) and the point estimates' values go into their checkpoints with their
    Adam state and back: a batch resumed after 2 of 4 epochs ends where an uninterrupted one ends (MC dropout's
    masks too: each run draws them from its generator seeded by the epoch)."""
    full, _ = _fit(specs, 4)
    paths = [tmp_path / f"run{i}.pt" for i in range(2)]
    _fit([{**s, "callbacks": [Checkpoint(p)]} for s, p in zip(specs, paths, strict=True)], 2)
    resumed, _ = _fit(
        [{**s, "callbacks": [Checkpoint(p)]} for s, p in zip(specs, paths, strict=True)], 4, resume_from=paths
    )
    for a, b in zip(full, resumed, strict=True):
        ours, theirs = _trained_values(a), _trained_values(b)
        assert ours.keys() == theirs.keys()
        for name, value in ours.items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6, msg=name)


def test_batched_validation_draws_dropout_masks_for_mc_dropout_only():
    """MC dropout validates with a fresh mask per draw, example and layer, each run's from its own generator (here
    drawn again from the same seed and applied by hooks on the run's own network); a MAP network with dropout
    layers validates with dropout off, every draw its network in evaluation mode."""
    from pyro_bnn.batched.step import RunNoise
    from pyro_bnn.batched.validation import validation_outputs

    x = torch.stack([_data(s)[0][N:] for s in (0, 1)])  # (R, VAL, 2)
    for guide in ("mc-dropout:0.3", "map"):
        built = [_trainer(seed=s, guide=guide, dropout=0.3) for s in (0, 1)]
        for trainer, train, _ in built:
            trainer.setup(*next(iter(train)))
        stack = RunStack([t.bnn for t, _, _ in built], [t.guide for t, _, _ in built])
        noise = RunNoise([10, 11], stack.loc.device)
        noise.start_epoch(0)
        outputs = validation_outputs(stack, [0, 1], x, 3, noise)
        assert outputs.shape == (2, 3, VAL, 2)
        for r, (trainer, _, _) in enumerate(built):
            net = trainer.bnn.net.eval()
            values = trainer.guide.median()
            if guide == "map":
                expected = trainer.bnn.apply_parameters(x[r], values)
                for s in range(3):
                    torch.testing.assert_close(outputs[r, s], expected, rtol=1e-6, atol=1e-6)
                continue
            again = RunNoise([10 + r], stack.loc.device)
            again.start_epoch(0)
            draws = torch.randn((3, VAL, 8), generator=again.generators[0])
            for s in range(3):
                mask = (draws[s] > Normal(0.0, 1.0).icdf(torch.tensor(0.3))).float() / 0.7
                hook = net.drop1.register_forward_hook(lambda _, args, out, m=mask: out * m)
                try:
                    expected = trainer.bnn.apply_parameters(x[r], values)
                finally:
                    hook.remove()
                torch.testing.assert_close(outputs[r, s], expected, rtol=1e-6, atol=1e-6)
            assert not torch.allclose(outputs[r, 0], outputs[r, 1])


def test_mc_dropout_validation_of_a_run_does_not_depend_on_the_runs_beside_it(monkeypatch):
    """Validated in small chunks (each drawing its masks), run 0's outputs are the same alone and beside run 1."""
    import pyro_bnn.batched.validation as validation_module
    from pyro_bnn.batched.step import RunNoise
    from pyro_bnn.batched.validation import validation_outputs

    monkeypatch.setattr(validation_module, "MAX_ACTIVATIONS", 100)  # chunks of a few rows
    built = [_trainer(seed=s, guide="mc-dropout:0.3") for s in (0, 1)]
    for trainer, train, _ in built:
        trainer.setup(*next(iter(train)))
    stack = RunStack([t.bnn for t, _, _ in built], [t.guide for t, _, _ in built])
    x = torch.stack([_data(s)[0][N:] for s in (0, 1)])
    outputs = {}
    for runs in ([0], [0, 1]):
        noise = RunNoise([10, 11], stack.loc.device)
        noise.start_epoch(3)
        outputs[len(runs)] = validation_outputs(stack, runs, x[: len(runs)], 3, noise)
    torch.testing.assert_close(outputs[1][0], outputs[2][0], rtol=0, atol=0)


def test_the_first_batched_mc_dropout_step_uses_the_masks_of_its_runs_noise():
    """Replayed by hand: the loss of a one-step epoch is the MAP objective of the run's first batch under the masks
    drawn from its RunNoise (seeded by its seed and epoch 0), applied by a hook on its own network."""
    from pyro_bnn.batched.step import RunNoise

    specs = [{"seed": s, "guide": "mc-dropout:0.5", "batch_size": N} for s in (0, 1)]
    built = [_trainer(**spec) for spec in specs]
    outcomes = fit_batched([b[0] for b in built], [b[1] for b in built], 1, progress=False)
    threshold = Normal(0.0, 1.0).icdf(torch.tensor(0.5)).item()  # 0: half the values kept, at 2
    for spec, outcome in zip(specs, outcomes, strict=True):
        trainer, train, _ = _trainer(**spec)
        train.set_epoch(0)
        x, y = next(iter(train))
        pyro.set_rng_seed(spec["seed"])
        trainer.setup(x, y)
        initial = {k: v.detach() for k, v in trainer.guide.median().items()}  # the values before the step
        noise = RunNoise([spec["seed"]], torch.device("cpu"))
        noise.start_epoch(0)
        mask = (noise.draw((N * 8,), dtype=torch.float32, device=torch.device("cpu"))[0] > threshold).float() * 2
        net, bnn = trainer.bnn.net.eval(), trainer.bnn
        hook = net.drop1.register_forward_hook(lambda _, args, out, m=mask: out * m.reshape(N, 8))
        try:
            log_likelihood = bnn.likelihood.log_likelihood(bnn.apply_parameters(x, initial), y).sum()
        finally:
            hook.remove()
        log_prior = sum(bnn.prior.distribution(site, {}).log_prob(initial[site.name]) for site in bnn.sites)
        expected = float(-log_likelihood - log_prior)  # N / B = 1: the whole training set is the batch
        assert math.isclose(outcome.history[0]["loss"], expected, rel_tol=1e-5), (outcome.history[0]["loss"], expected)


def test_dropout_that_batched_runs_do_not_draw_is_refused_in_one_line():
    """Dropout2d's masks are per channel, and a dropout layer called twice a pass would need two masks; a MAP run
    beside an MC dropout run validates differently: each is refused before any step."""

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.drop, self.out = torch.nn.Linear(2, 4), torch.nn.Dropout(0.2), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.drop(self.drop(self.fc(x))))

    def run(net, guide):
        bnn = BNN(net, parse_prior("normal:0,1"), Categorical(N))
        built = parse_guide(guide).build(bnn)
        with torch.no_grad(), pyro.poutine.block():
            built(torch.randn(4, 2), torch.zeros(4, dtype=torch.long))
        return bnn, built

    channel = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Dropout1d(0.2), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"has Dropout1d \(1\), whose masks batched runs do not draw"):
        RunStack(*zip(run(channel, "map"), strict=True))
    stack = RunStack(*zip(run(Twice(), "mc-dropout:0.2"), strict=True))
    with pytest.raises(ValueError, match="calls its dropout layer 'drop' more than once a pass"):
        stack.dropout_layers((2,))
    nets = [build_model("mlp:4", input_shape=(2,), num_classes=2, activation="tanh", dropout=0.2) for _ in "ab"]
    (a, ga), (b, gb) = run(nets[0], "map"), run(nets[1], "mc-dropout:0.2")
    with pytest.raises(ValueError, match="some runs' guides are MC dropout and others are not"):
        RunStack([a, b], [ga, gb])


def test_the_bar_follows_the_trainers_runtime_options_unless_asked(capsys):
    # the trainers ask for no bar: fit_batched drew its own whatever they said
    built = [_trainer(seed=s) for s in (0, 1)]
    fit_batched([t for t, _, _ in built], [tr for _, tr, _ in built], 1)
    assert "batched runs" not in capsys.readouterr().err
    built = [_trainer(seed=s) for s in (0, 1)]
    built[1][0].progress = True
    fit_batched([t for t, _, _ in built], [tr for _, tr, _ in built], 1)
    assert "2 batched runs" in capsys.readouterr().err
    built = [_trainer(seed=s) for s in (0, 1)]
    fit_batched([t for t, _, _ in built], [tr for _, tr, _ in built], 1, progress=True)
    assert "2 batched runs" in capsys.readouterr().err


def test_a_batch_resumed_from_checkpoints_of_different_epochs_ends_where_an_uninterrupted_one_ends(tmp_path):
    """A batch killed while it wrote its checkpoints leaves them at mixed epochs (here 2, 2 and 3 of 4). Resumed,
    the two runs behind train epoch 3 as a batch of their own, then all three epoch 4 together: every record (loss,
    KL, validation metrics) and every final value is the uninterrupted batch's, where before the batch was refused
    ("the runs of a batch must resume at the same epoch") and a grid trained each run alone, on other noise."""
    specs = [{"seed": s, "prior": p} for s, p in ((0, "normal:0,1"), (1, "laplace:0,1"), (2, "cauchy:0,1"))]
    full, full_outcomes = _fit(specs, 4)

    def checkpointed(folder):
        return [{**s, "callbacks": [Checkpoint(folder / f"run{i}.pt")]} for i, s in enumerate(specs)]

    _fit(checkpointed(tmp_path / "at2"), 2)
    _fit(checkpointed(tmp_path / "at3"), 3, resume_from=[tmp_path / "at2" / f"run{i}.pt" for i in range(3)])
    mixed = [tmp_path / "at2" / "run0.pt", tmp_path / "at2" / "run1.pt", tmp_path / "at3" / "run2.pt"]
    resumed, outcomes = _fit(checkpointed(tmp_path / "resumed"), 4, resume_from=mixed)

    numbers = ("loss", "data_term", "kl_term", "kl_weight", "lr", "val_accuracy", "val_nll", "val_ece")
    for a, b, theirs, ours in zip(full, resumed, full_outcomes, outcomes, strict=True):
        assert not ours.failed and [r["epoch"] for r in ours.history] == [1, 2, 3, 4]
        assert [[r[k] for k in numbers] for r in ours.history] == [[r[k] for k in numbers] for r in theirs.history]
        assert torch.equal(a.guide.loc, b.guide.loc) and torch.equal(a.guide.log_scale, b.guide.log_scale)
        assert float(b.optimizer.state[b.guide.loc]["step"]) == 4 * 3
    assert [[r["batched_runs"] for r in o.history] for o in outcomes] == [[3, 3, 2, 3], [3, 3, 2, 3], [3, 3, 3, 3]]
