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
}
"""The keys of a pyro_bnn.checkpoint/1 file as every version so far writes them."""


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
        optim=pyro.optim.Adam({"lr": 0.05}),
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
