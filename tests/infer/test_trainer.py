import functools
import json
import pickle
import sys
import types

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoDelta, AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import BayesByBackprop, init_to_network, posterior_loc_scale
from pyro_bnn.infer import (
    Callback,
    Checkpoint,
    CheckpointMismatchError,
    EarlyStopping,
    HistoryLogger,
    NonFiniteLossError,
    RuntimeOptions,
    Trainer,
    linear_warmup,
    load_checkpoint,
    save_checkpoint,
)
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.predict import predict, predict_posterior_mean
from pyro_bnn.priors import NormalPrior


def _blobs(n=120, seed=0):
    """Three Gaussian blobs in 2-D, labels 0..2."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    return centres[y] + 0.8 * torch.randn(n, 2, generator=g), y


def _classifier(n_train=90):
    torch.manual_seed(0)  # the network's initialisation, which the guide starts from
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 3))
    return BNN(net, NormalPrior(0.0, 1.0), Categorical(n_train))


def _loaders(batch_size=30):
    x, y = _blobs()
    return BatchLoader(x[:90], y[:90], batch_size, shuffle=True, seed=4), BatchLoader(x[90:], y[90:], 30)


def _trainer(bnn, **kwargs):
    kwargs.setdefault("optim", pyro.optim.Adam({"lr": 0.05}))
    guide = kwargs.pop("guide", lambda m: AutoNormal(m, init_loc_fn=init_to_network(m), init_scale=0.05))
    return Trainer(bnn, guide, seed=kwargs.pop("seed", 0), progress=False, num_val_samples=8, **kwargs)


def test_mean_field_guide_recovers_the_bayesian_linear_regression_posterior():
    """y = Xw + noise with known noise and a N(0, alpha^2) prior: the exact posterior is Gaussian with precision
    L = X'X / sigma^2 + I / alpha^2 and mean L^-1 X'y / sigma^2; the best mean-field Gaussian has that mean and
    variances 1 / L_ii. Tolerances: 0.15 posterior standard deviations on the means, 10 % on the scales."""
    g = torch.Generator().manual_seed(0)
    n, d, sigma, alpha = 200, 3, 0.5, 1.0
    x = torch.randn(n, d, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5]) + sigma * torch.randn(n, generator=g)).unsqueeze(-1)
    precision = x.T @ x / sigma**2 + torch.eye(d) / alpha**2
    post_mean = torch.linalg.solve(precision, x.T @ y.squeeze(-1) / sigma**2)
    mean_field_std = precision.diagonal().rsqrt()

    bnn = BNN(nn.Linear(d, 1, bias=False), NormalPrior(0.0, alpha), Gaussian(n, sigma))
    trainer = Trainer(
        bnn,
        functools.partial(BayesByBackprop, rho_init=(-3.0, -3.0)),
        optim=pyro.optim.Adam({"lr": 0.05}),
        objective="meanfield",
        num_particles=16,
        seed=0,
        progress=False,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.MultiStepLR(opt, [300, 400, 500], 0.25),
    )
    trainer.fit(BatchLoader(x, y, n), 600)
    loc, scale = posterior_loc_scale(trainer.guide)["weight"]
    assert ((loc.squeeze(0) - post_mean).abs() / mean_field_std).max() < 0.15
    assert ((scale.squeeze(0) / mean_field_std) - 1).abs().max() < 0.10
    # A broken N/B scaling or KL would land far away: the prior alone has std 1, the full posterior ~0.035.


def test_training_learns_and_reports_the_elbo_split():
    train, val = _loaders()
    history = _trainer(_classifier()).fit(train, 15, val_loader=val)
    first, last = history[0], history[-1]
    assert last["loss"] < first["loss"]
    assert last["val_accuracy"] > 0.85
    for record in history:
        assert record["loss"] == pytest.approx(record["data_term"] + record["kl_term"], rel=1e-6)
        assert record["kl_term"] > 0
        assert {"val_nll", "val_ece", "val_brier", "time_s", "lr"} <= set(record)


def test_progress_into_a_log_file_is_a_line_per_epoch(capsys):
    """stderr captured here is no terminal: a bar redrawn in place would be noise in a log, so each epoch is one
    line with the epoch's mean loss, the one the history records."""
    train, _ = _loaders()
    trainer = Trainer(_classifier(), lambda m: AutoNormal(m), runtime=RuntimeOptions(seed=0, progress=True))
    history = trainer.fit(train, 2)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"epoch {r['epoch']}/2: loss {r['loss']:.4g}" for r in history]


def test_a_notebook_keeps_its_bars(capsys, monkeypatch):
    """A notebook's stderr is no terminal either, but tqdm.auto draws its bar there as a widget: no lines."""
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    train, _ = _loaders()
    Trainer(_classifier(), lambda m: AutoNormal(m), runtime=RuntimeOptions(seed=0, progress=True)).fit(train, 1)
    assert "epoch 1/1: loss" not in capsys.readouterr().err


def test_kl_annealing_weights_reach_the_record():
    train, _ = _loaders()
    history = _trainer(_classifier(), kl_schedule=linear_warmup(2)).fit(train, 3)
    # three steps per epoch at progress 0, 1/3, 2/3 then 1, 4/3, 5/3 (weights progress/2), then 1.
    assert [r["kl_weight"] for r in history] == pytest.approx([1 / 6, 2 / 3, 1.0])


def test_blundell_weighting_averages_to_one_per_epoch():
    train, _ = _loaders(batch_size=10)
    history = _trainer(_classifier(), kl_weighting="blundell").fit(train, 1)
    assert history[0]["kl_weight"] == pytest.approx(1.0)


class _OrderLog(BatchLoader):
    """A BatchLoader that records every iteration: the epoch whose order it visits, and the batches it yields."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.iterations: list[int] = []

    def __iter__(self):
        self.iterations.append(self.epoch)
        return super().__iter__()


@pytest.mark.parametrize("progress", [False, True])
def test_each_epoch_trains_on_its_own_order_from_one_iteration(progress):
    """Epoch e visits ``loader.epoch_order(e)``, the loader iterated once per epoch (plus once for the first batch
    the guide is set up on), with or without the progress bar: tqdm.auto's bar iterated a plain iterable twice,
    so epoch e trained on the order of e + 1 and batched runs (which iterate once) saw other batches."""
    x, y = _blobs()
    loader = _OrderLog(x[:90], y[:90], 30, shuffle=True, seed=4)
    trainer = _trainer(_classifier())
    trainer.progress = progress
    trainer.fit(loader, 3)
    assert loader.iterations == [0, 0, 1, 2]


def test_same_seed_gives_identical_runs():
    histories = []
    for _ in range(2):
        train, val = _loaders()
        history = _trainer(_classifier(), num_particles=2).fit(train, 3, val_loader=val)
        histories.append([{k: v for k, v in r.items() if k != "time_s"} for r in history])
    assert histories[0] == histories[1]


def test_checkpoint_round_trip_gives_identical_predictions(tmp_path):
    train, val = _loaders()
    trainer = _trainer(_classifier(), callbacks=[Checkpoint(tmp_path / "ckpt.pt")])
    trainer.fit(train, 2)
    restored = _trainer(_classifier())
    restored.setup(*next(iter(train)))
    restored.load_checkpoint(tmp_path / "ckpt.pt")
    x, y = _blobs()
    mean_a = predict_posterior_mean(trainer.bnn, trainer.guide, (x, y)).probs
    mean_b = predict_posterior_mean(restored.bnn, restored.guide, (x, y)).probs
    assert torch.equal(mean_a, mean_b)
    pyro.set_rng_seed(9)
    samples_a = predict(trainer.bnn, trainer.guide, x, num_samples=5).probs
    pyro.set_rng_seed(9)
    samples_b = predict(restored.bnn, restored.guide, x, num_samples=5).probs
    assert torch.equal(samples_a, samples_b)
    assert restored.epoch == 2 and len(restored.history) == 2


def test_resume_after_interruption_matches_an_uninterrupted_run(tmp_path):
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]  # noqa: E731
    train, val = _loaders()
    straight = _trainer(_classifier()).fit(train, 4, val_loader=val)

    train, val = _loaders()
    interrupted = _trainer(_classifier(), callbacks=[Checkpoint(tmp_path / "run.pt")])
    interrupted.fit(train, 2, val_loader=val)  # the "interruption": the process ends after epoch 2
    train, val = _loaders()
    resumed = _trainer(_classifier(), seed=12345)  # a different seed must not matter when resuming
    history = resumed.fit(train, 4, val_loader=val, resume_from=tmp_path / "run.pt")
    assert strip(history) == strip(straight)


@pytest.mark.parametrize(
    "damage, message",
    [
        # Adam's moments cut short: the fused CPU step read past their end (a segmentation fault, exit 139)
        (
            lambda s: s["optimizer"]["state"][0].update(exp_avg=s["optimizer"]["state"][0]["exp_avg"][:10]),
            r"the optimiser's 'exp_avg' of parameter 0 has shape \(10, 2\), the parameter \(16, 2\)$",
        ),
        # torch's "Error(s) in loading state_dict for AutoNormal:" and a traceback
        (
            lambda s: s["guide"].update({k: v[..., :3] for k, v in s["guide"].items() if v.dim() > 1}),
            r"size mismatch for .*: copying a param with shape",
        ),
        (lambda s: s.pop("guide"), r"it holds no 'guide'$"),
    ],
    ids=["optimiser-shape", "guide-shape", "no-guide"],
)
def test_a_checkpoint_that_does_not_fit_the_trainer_is_one_line_naming_it(tmp_path, damage, message):
    train, _ = _loaders()
    _trainer(_classifier(), callbacks=[Checkpoint(tmp_path / "run.pt")]).fit(train, 1)
    state = load_checkpoint(tmp_path / "run.pt")
    damage(state)
    save_checkpoint({k: v for k, v in state.items() if k != "format"}, tmp_path / "run.pt")
    expected = rf"^cannot resume from {tmp_path / 'run.pt'}: it does not fit this trainer: " + message
    with pytest.raises(CheckpointMismatchError, match=expected) as info:
        _trainer(_classifier()).fit(train, 2, resume_from=tmp_path / "run.pt")
    assert "\n" not in str(info.value)


def test_an_optimiser_whose_state_is_not_parameter_shaped_resumes(tmp_path):
    # Adafactor keeps factored second moments, (16, 1) and (1, 2) for a (16, 2) weight: the shape check refused them
    def adafactor(params):
        return torch.optim.Adafactor(params, lr=0.01)

    train, _ = _loaders()
    straight = _trainer(_classifier(), optim=adafactor).fit(train, 2)
    _trainer(_classifier(), optim=adafactor, callbacks=[Checkpoint(tmp_path / "run.pt")]).fit(train, 1)
    resumed = _trainer(_classifier(), optim=adafactor).fit(train, 2, resume_from=tmp_path / "run.pt")
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    x, y = _blobs()

    class PoisonedLoader(BatchLoader):
        """Serves a NaN input from the third epoch on."""

        def __iter__(self):
            for xb, yb in super().__iter__():
                yield (xb * float("nan") if self.current >= 2 else xb), yb

        def set_epoch(self, epoch):
            self.current = epoch
            super().set_epoch(epoch)

    loader = PoisonedLoader(x[:90], y[:90], 30, shuffle=True, seed=1)
    loader.set_epoch(0)
    path = tmp_path / "ckpt.pt"
    trainer = _trainer(_classifier(), callbacks=[Checkpoint(path)])
    with pytest.raises(NonFiniteLossError, match=f"input batch of epoch 3, step 1 holds NaN.*checkpoint is {path}"):
        trainer.fit(loader, 5)
    state = load_checkpoint(path)
    assert state["epoch"] == 2
    assert all(torch.isfinite(v).all() for v in state["guide"].values())


def test_checkpoint_with_a_pickled_object_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save(
        {"format": "pyro_bnn.checkpoint/1", "payload": pickle.loads(pickle.dumps(functools.partial(print)))},
        path,
    )
    with pytest.raises(ValueError, match="refusing to load"):
        load_checkpoint(path)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a pyro_bnn checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    (tmp_path / "truncated.pt").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "truncated.pt")


@pytest.mark.parametrize(
    "keep, message",
    [
        (0.5, "is not a readable checkpoint (truncated or corrupt, {size} bytes): "),
        (0.0, "is not a readable checkpoint: the file is empty (0 bytes)"),
    ],
    ids=["half", "empty"],
)
def test_a_cut_checkpoint_names_the_file_and_what_is_wrong(tmp_path, keep, message):
    """A real checkpoint cut to half its size (torch 2.x raises a bare ``OSError: [Errno 22] Invalid argument``
    naming no file) or to zero bytes (a bare EOFError, whose empty message left the old one ending in a colon)."""
    path = save_checkpoint({"model": {"w": torch.randn(50, 50)}, "config": "{}"}, tmp_path / "checkpoint.pt")
    data = path.read_bytes()
    size = int(len(data) * keep)
    path.write_bytes(data[:size])
    with pytest.raises(ValueError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert text.startswith(f"{path} ") and message.format(size=f"{size:,}") in text, text
    assert "\n" not in text and not text.rstrip().endswith(":") and text.split(": ")[-1].strip()  # says why


def test_bytes_damaged_inside_a_checkpoint_are_found_by_its_checksums(tmp_path):
    # torch's reader checks no CRC: 4 KiB of zeros in the middle loaded as 1 024 wrong values
    path = save_checkpoint({"model": {"w": torch.randn(50_000)}, "config": "{}"}, tmp_path / "checkpoint.pt")
    data = bytearray(path.read_bytes())
    data[100_000:104_096] = bytes(4096)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"is not a readable checkpoint \(corrupt, [\d,]+ bytes\): the bytes of its "
                       r"record 'data/0' do not match the checksum stored with them$"):  # fmt: skip
        load_checkpoint(path)


@pytest.mark.parametrize("content", [b'{"epoch": 3}', bytes(range(256)) * 20], ids=["json", "random"])
def test_a_file_torch_never_wrote_is_not_called_hostile(tmp_path, content):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"is not a pyro_bnn checkpoint \(.* bytes\): torch.load reads no checkpoint"):
        load_checkpoint(path)


def test_save_checkpoint_leaves_no_temporary_files(tmp_path):
    save_checkpoint({"a": torch.ones(3)}, tmp_path / "sub" / "c.pt")
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["c.pt"]


def test_early_stopping_and_restore_best():
    train, val = _loaders()
    stopper = EarlyStopping("val_nll", patience=2, mode="min", restore_best=True)
    trainer = _trainer(_classifier(), optim=pyro.optim.Adam({"lr": 0.5}), callbacks=[stopper])
    history = trainer.fit(train, 40, val_loader=val)
    assert len(history) < 40
    assert len(history) == stopper.best_epoch + 2


def test_early_stopping_without_validation_metrics_is_a_clear_error():
    train, _ = _loaders()
    with pytest.raises(ValueError, match="EarlyStopping monitors 'val_accuracy'"):
        _trainer(_classifier(), callbacks=[EarlyStopping()]).fit(train, 2)


def test_history_logger(tmp_path):
    train, _ = _loaders()
    _trainer(_classifier(), callbacks=[HistoryLogger(tmp_path / "h.json")]).fit(train, 2)
    assert '"epoch": 2' in (tmp_path / "h.json").read_text()


def test_pyro_optim_with_per_parameter_arguments_and_clipping():
    train, _ = _loaders()
    optim = pyro.optim.Adam(lambda name: {"lr": 0.0 if name.startswith("guide.scales") else 0.05}, {"clip_norm": 1.0})
    trainer = _trainer(_classifier(), optim=optim)
    trainer.fit(train, 1)
    scales = {n: p for n, p in trainer.guide.named_parameters() if n.startswith("scales")}
    expected = torch.full_like(next(iter(scales.values())), 0.05).expm1().log()  # softplus^-1(0.05), untouched
    assert torch.allclose(next(iter(scales.values())), expected, atol=1e-6)


def test_param_groups_clip_norm_bounds_every_step_of_training():
    """SGD at lr 1 without momentum with clip_norm c: each step moves all parameters (model and guide together) by
    exactly c, the gradient's norm being far above it; 3 steps of one epoch move them by at most 3c."""
    from pyro_bnn.infer import ParamGroups

    train, _ = _loaders()
    optim = ParamGroups(model={"lr": 1.0}, guide={"lr": 1.0}, clip_norm=1e-3)
    trainer = _trainer(_classifier(), optim=optim)
    trainer.fit(train, 0)  # builds the guide and the optimiser, takes no step
    params = trainer.optimizer.param_groups[0]["params"]
    before = torch.cat([p.detach().flatten() for p in params])
    steps = []

    def record(optimizer, *args, **kwargs):
        steps.append(torch.cat([p.detach().flatten() for p in params]))

    trainer.optimizer.register_step_post_hook(record)
    trainer.fit(train, 1)
    moves = torch.stack(steps).diff(dim=0, prepend=before.unsqueeze(0)).norm(dim=1)
    assert len(steps) == 3 and torch.allclose(moves, torch.full((3,), 1e-3), rtol=1e-4), moves


def test_map_and_deterministic_parameters_train_together():
    """Parameters the prior does not select stay nn.Parameters and are optimised alongside the guide."""
    from pyro_bnn.priors import weights_only

    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 3))
    bnn = BNN(net, NormalPrior(select=weights_only), Categorical(90))
    before = net[0].bias.detach().clone()
    train, _ = _loaders()
    _trainer(bnn, guide=lambda m: AutoDelta(m, init_loc_fn=init_to_network(m))).fit(train, 2)
    assert not torch.equal(before, net[0].bias.detach())


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda x, y: (x[:, :1], y), r"found per-example shape \(1,\)|cannot run on inputs"),
        (lambda x, y: (x, y + 3), r"labels must lie in \[0, 3\)"),
        (lambda x, y: (x, y.float()), "class labels must be an integer tensor"),
    ],
)
def test_bad_batches_fail_before_training(change, message):
    x, y = _blobs()
    x, y = change(x[:90], y[:90])
    with pytest.raises(ValueError, match=message):
        _trainer(_classifier()).fit(BatchLoader(x, y, 30), 1)


def test_dataset_size_must_match_the_loader():
    train, _ = _loaders()
    with pytest.raises(ValueError, match="loader has 90 examples but the likelihood was built with dataset_size=50"):
        _trainer(_classifier(n_train=50)).fit(train, 1)


def test_minibatch_larger_than_dataset_size_is_refused():
    bnn = _classifier(n_train=10)
    x, y = _blobs()
    with pytest.raises(ValueError, match="minibatch of 30 examples is larger than dataset_size=10"):
        bnn(x[:30], y[:30])


def test_optimizer_instance_is_refused_with_a_hint():
    train, _ = _loaders()
    bad = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(TypeError, match="pass a factory"):
        _trainer(_classifier(), optim=bad).fit(train, 1)


def test_torch_optimizer_factory():
    train, _ = _loaders()
    trainer = _trainer(_classifier(), optim=lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9))
    trainer.fit(train, 1)
    assert isinstance(trainer.optimizer, torch.optim.SGD)


def _early_stopped_run(tmp_path, resume_from=None, name="run.pt", extra=()):
    train, val = _loaders()
    stopper = EarlyStopping("val_nll", patience=2, mode="min", restore_best=True)
    callbacks = [stopper, Checkpoint(tmp_path / name), *extra]
    trainer = _trainer(_classifier(), optim=pyro.optim.Adam({"lr": 0.5}), callbacks=callbacks)
    history = trainer.fit(train, 40, val_loader=val, resume_from=resume_from)
    return trainer, stopper, history


def test_early_stopping_survives_a_resume(tmp_path, interrupt_after):
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]  # noqa: E731
    straight, stopper, history = _early_stopped_run(tmp_path, name="a.pt")
    stop_epoch = len(history)
    assert stop_epoch < 40
    # Interrupt one epoch before the stop, then resume: same records, same stop, same best epoch.
    with pytest.raises(KeyboardInterrupt):
        _early_stopped_run(tmp_path, name="b.pt", extra=[interrupt_after(stop_epoch - 1)])
    resumed, resumed_stopper, resumed_history = _early_stopped_run(tmp_path, resume_from=tmp_path / "b.pt", name="b.pt")
    assert strip(resumed_history) == strip(history)
    assert resumed_stopper.best_epoch == stopper.best_epoch
    # Resuming a run that already stopped trains no further.
    _, _, again = _early_stopped_run(tmp_path, resume_from=tmp_path / "a.pt", name="a.pt")
    assert len(again) == stop_epoch


def test_final_checkpoint_holds_the_restored_best_epoch(tmp_path):
    trainer, _, _ = _early_stopped_run(tmp_path)
    restored = _trainer(_classifier())
    restored.setup(*next(iter(_loaders()[0])))
    restored.load_checkpoint(tmp_path / "run.pt")
    x, y = _blobs()
    in_memory = predict_posterior_mean(trainer.bnn, trainer.guide, (x, y)).probs
    assert torch.equal(predict_posterior_mean(restored.bnn, restored.guide, (x, y)).probs, in_memory)


def test_resume_with_another_config_is_refused(tmp_path):
    train, _ = _loaders()
    _trainer(_classifier(), config={"lr": 0.05}, callbacks=[Checkpoint(tmp_path / "c.pt")]).fit(train, 1)
    with pytest.raises(ValueError, match="written with a different config"):
        _trainer(_classifier(), config={"lr": 0.1}).fit(train, 2, resume_from=tmp_path / "c.pt")


class _CountingObjective:
    """Any Objective: here Trace_ELBO with a counter, to see that the trainer calls it and reports its parts."""

    def __init__(self):
        from pyro_bnn.infer import TraceELBO

        self.inner, self.calls, self.weights = TraceELBO(), 0, []

    def __call__(self, model, guide, x, y, kl_weight):
        self.calls += 1
        self.weights.append(kl_weight)
        return self.inner(model, guide, x, y, kl_weight)


def test_trainer_takes_any_objective_and_reports_its_parts():
    objective = _CountingObjective()
    train, _ = _loaders()
    history = _trainer(_classifier(), objective=objective, kl_schedule=linear_warmup(2)).fit(train, 2)
    assert objective.calls == 6
    assert objective.weights == pytest.approx([0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6])
    for record in history:
        assert record["loss"] == pytest.approx(record["data_term"] + record["kl_term"], rel=1e-9)
    with pytest.raises(ValueError, match="num_particles applies to an objective given by name"):
        _trainer(_classifier(), objective=objective, num_particles=2)
    with pytest.raises(ValueError, match=r"objective must be an ElboKind name .* or an Objective, got 3"):
        _trainer(_classifier(), objective=3)


@pytest.mark.parametrize("interval,expected", [("epoch", 0.05 * 0.5), ("step", 0.05 * 0.5**3)])
def test_lr_scheduler_steps_per_epoch_or_per_step(interval, expected):
    train, _ = _loaders()  # 3 steps per epoch
    trainer = _trainer(
        _classifier(),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
        lr_scheduler_interval=interval,
    )
    trainer.fit(train, 1)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="unknown scheduler interval 'batch'"):
        _trainer(_classifier(), lr_scheduler_interval="batch")


def test_sparse_nan_checks_still_stop_training_and_say_so():
    train, _ = _loaders()
    trainer = _trainer(_classifier(), optim=pyro.optim.Adam({"lr": float("inf")}), nan_check_every=2)
    with pytest.raises(NonFiniteLossError, match=r"checked every 2 steps, so the parameters may already be"):
        trainer.fit(train, 2)
    with pytest.raises(ValueError, match="nan_check_every must be an int >= 1, got 0"):
        _trainer(_classifier(), nan_check_every=0)


def test_map_warm_start_moves_the_initial_values_the_guide_starts_from():
    from pyro_bnn.guides import parse_guide
    from pyro_bnn.infer import map_warm_start

    bnn = _classifier()
    before = {k: v.clone() for k, v in bnn.initial_values().items()}
    train, _ = _loaders()
    values = map_warm_start(bnn, train, 2, optim=pyro.optim.Adam({"lr": 0.05}), seed=0, progress=False)
    assert all(not torch.equal(values[k], before[k]) for k in before)
    assert all(torch.equal(bnn.initial_values()[k], values[k]) for k in values)
    guide = parse_guide("autonormal:0.01,loc=map").build(bnn)
    x, y = _blobs()
    guide(x[:30], y[:30])
    assert all(torch.equal(loc, values[k]) for k, (loc, _) in posterior_loc_scale(guide).items())
    with pytest.raises(ValueError, match="a MAP warm start needs epochs >= 1, got 0"):
        map_warm_start(bnn, train, 0)


def test_parameters_that_overflow_on_an_epochs_last_step_are_never_checkpointed(tmp_path):
    """Every loss is finite, but the update of epoch 2's last step uses lr = inf: the epoch's checkpoint must not be
    written, and the error names epoch 1's checkpoint as the last good one."""
    train, _ = _loaders()  # 3 steps per epoch; the LambdaLR factor for step k applies to step k + 1
    path = tmp_path / "ckpt.pt"
    trainer = _trainer(
        _classifier(),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda k: float("inf") if k == 5 else 1.0),
        lr_scheduler_interval="step",
        callbacks=[Checkpoint(path)],
    )
    with pytest.raises(NonFiniteLossError, match=f"parameters became NaN or infinite during epoch 2.*is {path}"):
        trainer.fit(train, 3)
    state = load_checkpoint(path)
    assert state["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in state["guide"].values())
    with pytest.raises(NonFiniteLossError, match="refusing to write"):
        trainer.save_checkpoint(tmp_path / "other.pt")
    assert not (tmp_path / "other.pt").exists()


def test_divergence_with_validation_on_is_the_trainers_one_line_error():
    """A huge learning rate: validation's distribution checks or the validation metrics see it first."""
    train, val = _loaders()
    trainer = _trainer(_classifier(), optim=pyro.optim.Adam({"lr": 1e6}))
    with pytest.raises(NonFiniteLossError) as info:
        trainer.fit(train, 3, val_loader=val)
    assert "\n" not in str(info.value)
    assert "lower learning rate" in str(info.value)


def test_bad_validation_settings_fail_at_construction():
    with pytest.raises(ValueError, match="n_bins must be an int >= 1, got 0"):
        _trainer(_classifier(), n_bins=0)
    with pytest.raises(ValueError, match="num_val_samples must be an int >= 1, got -1"):
        Trainer(_classifier(), AutoNormal, num_val_samples=-1)


def test_a_checkpoint_copies_only_the_views_among_long_lists_of_numbers(tmp_path):
    """``_compact`` rebuilds the containers that hold a view (so ``torch.save`` writes the view's values, not the
    whole storage) and hands lists and dicts of plain numbers through untouched; the file loads with
    ``weights_only=True`` into equal values."""
    from pyro_bnn.infer.checkpoint import _compact

    batch = torch.arange(12.0).reshape(3, 4)
    whole = torch.ones(5)
    floats = [i / 7 for i in range(10_000)]
    record = {"epoch": 3, "loss": 0.5, "name": "x", "ok": True, "none": None}
    state = {"adam": {"row": batch[1], "whole": whole}, "stats": [floats, (1, 2.5)], "record": record, "n": 4}
    compact = _compact(state)
    assert compact["adam"]["row"].untyped_storage().nbytes() == 4 * 4  # its own 4 floats, not the batch's 12
    assert torch.equal(compact["adam"]["row"], batch[1])
    assert compact["adam"]["whole"] is whole and compact["stats"][0] is floats and compact["record"] is record
    assert compact["stats"][1] == (1, 2.5) and compact["n"] == 4
    assert state["adam"]["row"].untyped_storage().nbytes() == 12 * 4  # the caller's state is left as it was
    path = save_checkpoint(state, tmp_path / "c.pt")
    loaded = torch.load(path, weights_only=True)
    assert loaded["stats"][0] == floats and loaded["record"] == record and loaded["stats"][1] == (1, 2.5)
    assert torch.equal(loaded["adam"]["row"], batch[1]) and loaded["adam"]["row"].untyped_storage().nbytes() == 16


def test_writes_wait_min_interval_s_but_training_always_ends_with_them(tmp_path, monkeypatch):
    """A clock that moves 1 s per epoch: a checkpoint due every epoch but at least 2.5 s apart is written after epochs
    3 and 6 and when training ends (8); a history due every 2nd epoch after epochs 4 and 8, and at the end. The
    history file ends complete, and the final checkpoint resumes like any other."""
    from pyro_bnn.infer import callbacks

    now = [0.0]
    monkeypatch.setattr(callbacks._Throttle, "clock", staticmethod(lambda: now[0]))

    class Tick(Callback):
        def on_epoch_end(self, trainer, record):
            now[0] += 1.0

    saved, written = [], []
    save = Trainer.save_checkpoint
    monkeypatch.setattr(Trainer, "save_checkpoint", lambda self, path: (saved.append(self.epoch), save(self, path)))
    write = callbacks.write_text_atomically
    monkeypatch.setattr(callbacks, "write_text_atomically", lambda path, text, **kw: (written.append(
        (len(json.loads(text)), kw.get("sync", True))), write(path, text, **kw)))  # fmt: skip
    train, _ = _loaders()
    history_logger = HistoryLogger(tmp_path / "h.json", every=2, min_interval_s=2.5)
    checkpoint = Checkpoint(tmp_path / "c.pt", min_interval_s=2.5)
    trainer = _trainer(_classifier(), callbacks=[Tick(), checkpoint, history_logger])
    history = trainer.fit(train, 8)
    assert saved == [3, 6, 8]
    assert written == [(4, False), (8, False), (8, True)]  # only the last write is synced
    assert (tmp_path / "h.json").read_text() == json.dumps(history, indent=2)
    assert load_checkpoint(tmp_path / "c.pt")["epoch"] == 8
    with pytest.raises(ValueError, match="min_interval_s"):
        Checkpoint(tmp_path / "c.pt", min_interval_s=-1)
    with pytest.raises(ValueError, match="min_interval_s"):
        HistoryLogger(tmp_path / "h.json", min_interval_s=-1)
