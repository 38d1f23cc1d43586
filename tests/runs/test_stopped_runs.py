"""A run folder says why a run stopped: ``stopped.json`` beside the last good checkpoint of a run that diverged
(removed when it trains again); and early stopping without validation examples is refused before training."""

import json

import pytest

from pyro_bnn.cli import main
from pyro_bnn.infer import NonFiniteLossError
from pyro_bnn.runs import RunConfig, train_run

MOONS = RunConfig(dataset="moons", model="tanh-small", guide="map", epochs=3, num_samples=2, num_val_samples=2)


def _diverge_after_first_epoch(monkeypatch):
    import pyro_bnn.infer.trainer as trainer_module

    def check(trainer):
        if trainer.epoch >= 1:  # the second epoch: the first one's checkpoint is written
            raise NonFiniteLossError("parameters became NaN or infinite during epoch 2")

    monkeypatch.setattr(trainer_module, "check_parameters_finite", check)


def test_a_diverged_run_leaves_its_reason_beside_its_last_good_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    _diverge_after_first_epoch(monkeypatch)
    with pytest.raises(NonFiniteLossError):
        train_run(MOONS, out, progress=False)
    assert json.loads((out / "stopped.json").read_text()) == {
        "stopped": "diverged",
        "message": "parameters became NaN or infinite during epoch 2",
    }
    assert (out / "checkpoint.pt").exists() and not (out / "metrics.json").exists()
    monkeypatch.undo()
    result = train_run(MOONS, out, resume=True, progress=False)  # trains again: the record goes
    assert result.metrics["epochs_run"] == 3 and not (out / "stopped.json").exists()


def test_a_run_that_diverges_before_any_checkpoint_leaves_no_folder(tmp_path, monkeypatch):
    import pyro_bnn.infer.trainer as trainer_module

    def check(trainer):
        raise NonFiniteLossError("parameters became NaN or infinite during epoch 1")

    monkeypatch.setattr(trainer_module, "check_parameters_finite", check)
    with pytest.raises(NonFiniteLossError):
        train_run(MOONS, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_the_cli_leaves_the_reason_too(tmp_path, monkeypatch, capsys):
    _diverge_after_first_epoch(monkeypatch)
    args = ["train", "--dataset", "moons", "--model", "tanh-small", "--guide", "map", "--epochs", "3", "--quiet"]
    assert main([*args, "--device", "cpu", "--out", str(tmp_path / "run")]) == 1
    assert "training stopped: parameters became NaN" in capsys.readouterr().err
    assert "epoch 2" in json.loads((tmp_path / "run" / "stopped.json").read_text())["message"]


@pytest.mark.parametrize("dataset", ["digits", "cubic"])
def test_early_stopping_with_a_validation_fraction_of_no_example_is_refused_in_one_line(dataset, tmp_path, capsys):
    """0.0001 of digits' 1 438 examples rounds to none: the config cannot count them before loading, so training
    used to start and fail after an epoch in a traceback (EarlyStopping found no validation metric)."""
    out = tmp_path / "run"
    args = ["train", "--dataset", dataset, "--model", "mlp:4", "--epochs", "2", "--device", "cpu", "--quiet"]
    assert main([*args, "--val-size", "0.0001", "--patience", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("pyro-bnn train: error: --patience=2 needs a validation split, but val_size=0.0001 holds out")
    assert not out.exists()
