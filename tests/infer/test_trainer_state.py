"""What a trainer checkpoint holds (:mod:`pyro_bnn.infer.trainer_state`): its layout stays the one older versions
wrote, and a state in that layout written by hand resumes."""

import json

import pyro
import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import init_to_network
from pyro_bnn.infer import Checkpoint, EarlyStopping, Trainer, load_checkpoint, save_checkpoint
from pyro_bnn.infer.checkpoint import CheckpointMismatchError
from pyro_bnn.infer.trainer_state import RunState, TrainerState, restore_trainer_state, trainer_state_dict
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior

KEYS = {
    "format",
    "epoch",
    "global_step",
    "model",
    "guide",
    "optimizer",
    "scheduler",
    "config",
    "history",
    "callbacks",
    "rng_torch",
    "rng_cuda",
    "optimizer_class",
}
"""The keys of a pyro_bnn.checkpoint/1 file as this version writes them: every earlier version's, and the optimiser's
class (a checkpoint without it still resumes)."""


def _loaders():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(120, 2, generator=g), torch.arange(120) % 3
    return BatchLoader(x[:90], y[:90], 30, shuffle=True, seed=4), BatchLoader(x[90:], y[90:], 30)


def _trainer(**kwargs):
    torch.manual_seed(0)
    bnn = BNN(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)), NormalPrior(0.0, 1.0), Categorical(90))
    return Trainer(
        bnn,
        lambda m: AutoNormal(m, init_loc_fn=init_to_network(m), init_scale=0.05),
        optim=kwargs.pop("optim", pyro.optim.Adam({"lr": 0.05})),
        progress=False,
        num_val_samples=4,
        **{"seed": 0, **kwargs},
    )


def test_the_checkpoint_layout_is_unchanged(tmp_path):
    train, val = _loaders()
    stopper = EarlyStopping("val_nll", mode="min")
    trainer = _trainer(callbacks=[stopper, Checkpoint(tmp_path / "c.pt")], config={"lr": 0.05})
    trainer.fit(train, 2, val_loader=val)
    state = load_checkpoint(tmp_path / "c.pt")
    assert set(state) == KEYS
    assert (state["epoch"], state["global_step"]) == (2, 6)
    assert json.loads(state["history"]) == trainer.history and json.loads(state["config"]) == {"lr": 0.05}
    assert set(state["callbacks"]) == {"0:EarlyStopping", "1:Checkpoint"}
    assert state["callbacks"]["0:EarlyStopping"]["best_epoch"] == stopper.best_epoch
    assert state["scheduler"] == {} and (state["rng_cuda"] == [] or torch.cuda.is_available())
    assert set(trainer_state_dict(trainer)) == KEYS - {"format"}


def test_a_state_in_the_old_layout_resumes(tmp_path):
    """A checkpoint assembled key by key, as trainer_state_dict wrote it before TrainerState existed."""
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]  # noqa: E731
    train, val = _loaders()
    straight = _trainer().fit(train, 3, val_loader=val)
    train, val = _loaders()
    first = _trainer()
    first.fit(train, 2, val_loader=val)
    old = {
        "epoch": first.epoch,
        "global_step": first.global_step,
        "model": first.bnn.state_dict(),
        "guide": first.guide.state_dict(),
        "optimizer": first.optimizer.state_dict(),
        "scheduler": {},
        "config": json.dumps({}),
        "history": json.dumps(first.history),
        "callbacks": {},
        "rng_torch": torch.get_rng_state(),
        "rng_cuda": [],
    }
    save_checkpoint(old, tmp_path / "old.pt")
    train, val = _loaders()
    resumed = _trainer(seed=7)
    assert strip(resumed.fit(train, 3, val_loader=val, resume_from=tmp_path / "old.pt")) == strip(straight)


def test_trainer_state_round_trip_through_the_module_functions(tmp_path):
    train, _ = _loaders()
    trainer = _trainer(config={"a": 1})
    trainer.fit(train, 1)
    state = trainer.checkpoint_state()
    assert isinstance(state, TrainerState) and state.run is trainer.run_state
    assert trainer.run_state == RunState(1, 3, trainer.history)
    saved = trainer_state_dict(trainer)
    other = _trainer(config={"a": 1})
    other.setup(*next(iter(train)))
    restore_trainer_state(other, saved, "saved")
    assert (other.epoch, other.global_step, other.history) == (1, 3, trainer.history)
    different = _trainer(config={"a": 2})
    different.setup(*next(iter(train)))
    with pytest.raises(ValueError, match="cannot resume from saved: .*a: 1 in the checkpoint, 2 now"):
        restore_trainer_state(different, saved, "saved")
    with pytest.raises(RuntimeError, match="nothing to save before training has started"):
        _trainer().state_dict()


def test_a_view_is_saved_as_its_own_values_not_its_whole_storage(tmp_path):
    """A batched run's Adam state is a row of the batch's tensors: its checkpoint holds that row, not the batch."""
    batch = torch.arange(100_000, dtype=torch.float64).reshape(100, 1000)
    state = {"optimizer": {"state": {0: {"exp_avg": batch[3], "step": batch[5, 0]}}, "rows": [batch[7, :10], (1, 2)]}}
    save_checkpoint(state, tmp_path / "view.pt")
    save_checkpoint({"whole": batch[3].clone()}, tmp_path / "copy.pt")
    assert (tmp_path / "view.pt").stat().st_size < 1.2 * (tmp_path / "copy.pt").stat().st_size
    loaded = load_checkpoint(tmp_path / "view.pt")
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], batch[3])
    assert float(loaded["optimizer"]["state"][0]["step"]) == float(batch[5, 0])
    rows = loaded["optimizer"]["rows"]
    assert torch.equal(rows[0], batch[7, :10]) and tuple(rows[1]) == (1, 2)
    assert batch.untyped_storage().nbytes() == 800_000  # the state handed in is not changed


def _sgd(params):
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9)


@pytest.mark.parametrize(
    "save_with, recorded, resume_with, names",
    [
        (None, "torch.optim.adam.Adam", _sgd, "Adam, this trainer's is SGD"),
        (_sgd, "torch.optim.sgd.SGD", None, "SGD, this trainer's is Adam"),
    ],
    ids=["adam-then-sgd", "sgd-then-adam"],
)
def test_a_resume_with_another_optimiser_class_is_refused_naming_both(
    tmp_path, save_with, recorded, resume_with, names
):
    """Adam's state loaded into SGD, and the first step failed inside torch (KeyError: 'momentum'); SGD's into Adam
    was refused as "it holds no 'step'"."""
    train, _ = _loaders()
    path = tmp_path / "c.pt"
    _trainer(optim=save_with, callbacks=[Checkpoint(path)]).fit(train, 1)
    assert load_checkpoint(path)["optimizer_class"] == recorded
    train, _ = _loaders()
    with pytest.raises(CheckpointMismatchError) as info:
        _trainer(optim=resume_with).fit(train, 2, resume_from=path)
    assert str(info.value) == (
        f"cannot resume from {path}: it does not fit this trainer: it was written by the optimiser {names}"
    )


@pytest.mark.parametrize(
    "save_with, resume_with, message",
    [
        (None, _sgd, "its optimiser state has options amsgrad, betas, decoupled_weight_decay, eps that this "
         "trainer's SGD does not have: another optimiser class wrote it"),
        (_sgd, None, "its optimiser state has options dampening, momentum, nesterov that this trainer's Adam does "
         "not have: another optimiser class wrote it"),
    ],
    ids=["adam-then-sgd", "sgd-then-adam"],
)  # fmt: skip
def test_an_old_checkpoint_of_another_optimiser_is_known_by_its_options(tmp_path, save_with, resume_with, message):
    """A checkpoint written before the class was recorded: its parameter groups' options tell."""
    train, _ = _loaders()
    first = _trainer(optim=save_with)
    first.fit(train, 1)
    old = trainer_state_dict(first)
    old.pop("optimizer_class", None)
    save_checkpoint(old, tmp_path / "old.pt")
    train, _ = _loaders()
    with pytest.raises(CheckpointMismatchError) as info:
        _trainer(optim=resume_with).fit(train, 2, resume_from=tmp_path / "old.pt")
    assert str(info.value) == f"cannot resume from {tmp_path / 'old.pt'}: it does not fit this trainer: {message}"
