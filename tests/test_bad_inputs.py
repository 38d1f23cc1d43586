"""Bad input, table-driven: every case exits (or raises) at once with one line naming the value and what was
expected, with no traceback, and, for what can be checked without data, before any data is loaded."""

import json
import os
from dataclasses import replace

import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.cli import main
from pyro_bnn.experiments import RunConfig, runs, train_run
from pyro_bnn.infer import Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior

TINY = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="autonormal:0.05",
    epochs=1,
    batch_size=64,
    num_samples=4,
    num_val_samples=2,
    device="cpu",
)


class DataLoaded(AssertionError):
    pass


@pytest.fixture
def no_data(monkeypatch):
    """Loading data fails the test: the case had to be refused before."""

    def refuse(*args, **kwargs):
        raise DataLoaded("data was loaded although the option could be checked without it")

    monkeypatch.setattr(runs, "load_data", refuse)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    train_run(TINY, out, progress=False)
    return out


def _one_line_error(capsys, args, code=2):
    assert main([str(a) for a in args]) == code
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


TRAIN = ["train", "--dataset", "moons", "--model", "tanh-small", "--quiet"]

TRAIN_CASES = [
    (["--lr", "inf"], "lr must be a finite number > 0, got inf"),
    (["--lr", "nan"], "lr must be a finite number > 0, got nan"),
    (["--lr=-0.1"], "got -0.1"),
    (["--guide", "autonormal:inf"], "inf"),
    (["--guide", "autonormal:rel=nan"], "nan"),
    (["--guide", "autonormal:loc=prior"], "'prior'"),
    (["--guide", "bbb:-4,-5"], "low <= high"),
    (["--guide", "laplace"], "'laplace'"),
    (["--prior", "mixture:0.5,1,1e-300"], "1e-300"),
    (["--prior", "gaussian"], "'gaussian'"),
    (["--activation", "leaky:abc"], "abc"),
    (["--model", "vgg"], "'vgg'"),
    (["--model", "mlp:0"], "mlp:0"),
    (["--dataset", "imagenet"], "'imagenet'"),
    (["--device", "tpu"], "'tpu'"),
    (["--device", "cuda:7"], "'cuda:7'"),
    (["--epochs", "-1"], "epochs must be an int >= 0, got -1"),
    (["--batch-size", "0"], "batch_size must be an int >= 1, got 0"),
    (["--num-samples", "0"], "num_samples must be an int >= 1, got 0"),
    (["--n-bins", "0"], "n_bins must be an int >= 1, got 0"),
    (["--patience", "-1"], "patience"),
    (["--train-subset", "0"], "train_subset"),
    (["--seed", "-1"], "-1"),
    (["--kl-anneal", "linear:0"], "linear:0"),
    (["--kl-anneal", "sigmoid"], "'sigmoid'"),
    (["--kl-scale", "paper", "--kl-weighting", "blundell"], "does not combine"),
    (["--elbo", "fast", "--guide", "autonormal:0.1"], "elbo 'fast' needs the flat guide"),
    (["--noise-scale", "0", "--dataset", "cubic", "--model", "mlp:8"], "noise_scale"),
    (["--guide", "mixture:4"], "it needs --node-noise"),
    (["--guide", "mixture:0", "--node-noise"], "mixture:0"),
    (["--bias-noise"], "needs node_noise"),
    (["--node-noise", "--elbo", "fast"], "does not score the mixture guide"),
    (["--elbo", "mixture"], "elbo 'mixture' needs the mixture guide"),
    (["--node-noise", "--samples-per-example", "0"], "samples_per_example"),
    (["--node-noise", "--guide", "mixture:3", "--num-samples", "10"], "not a multiple of the mixture's K=3"),
    (["--lr-variational", "-1"], "lr_variational"),
    (["--weight-decay", "nan"], "weight_decay"),
    (["--lr-schedule", "decay:2"], "decay:2"),
    (["--node-noise", "--kl-scale", "paper"], "does not combine with sgd or weight_decay"),
    (["--lr-variational-schedule", "cosine"], "'cosine'"),
]


@pytest.mark.parametrize("extra, message", TRAIN_CASES, ids=[" ".join(c[0]) for c in TRAIN_CASES])
def test_train_options_fail_before_any_data_is_loaded(tmp_path, capsys, no_data, extra, message):
    err = _one_line_error(capsys, [*TRAIN, *extra, "--out", tmp_path / "out"])
    assert err.startswith("pyro-bnn train: error:") and message in err
    assert not (tmp_path / "out").exists()


def test_out_inside_a_file_or_on_a_file(tmp_path, capsys, no_data):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = _one_line_error(capsys, [*TRAIN, "--out", blocker / "run"])
    assert f"--out {blocker / 'run'} cannot be created: {blocker} is not a folder" in err
    err = _one_line_error(capsys, [*TRAIN, "--out", blocker])
    assert f"--out {blocker} exists and is not a folder" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_out_in_an_unwritable_folder(tmp_path, capsys, no_data):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    err = _one_line_error(capsys, [*TRAIN, "--out", locked / "run"])
    assert "no write permission" in err


def test_an_existing_run_needs_resume_or_overwrite(trained_run, capsys, no_data):
    err = _one_line_error(capsys, [*TRAIN, "--activation", "tanh", "--out", trained_run])
    assert "already holds a run" in err and "--resume" in err


def test_resume_with_another_config_names_the_keys(trained_run, capsys, no_data):
    err = _one_line_error(capsys, [*TRAIN, "--activation", "relu", "--resume", "--out", trained_run])
    assert "activation: 'tanh' in the checkpoint, 'relu' now" in err
    assert "model" not in err.split("different config")[1]  # only the differing keys


def _plant_hostile_checkpoint(folder):
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"format": "pyro_bnn.checkpoint/1", "payload": DataLoaded("not a tensor")}, folder / "checkpoint.pt")
    (folder / "config.json").write_text(TINY.to_json())


def test_a_hostile_checkpoint_is_refused_before_data_on_resume_and_evaluate(tmp_path, capsys, no_data):
    _plant_hostile_checkpoint(tmp_path / "run")
    err = _one_line_error(capsys, [*TRAIN, "--resume", "--out", tmp_path / "run"])
    assert "refusing to load" in err
    err = _one_line_error(capsys, ["evaluate", tmp_path / "run"])
    assert "refusing to load" in err


def test_a_busy_run_folder_is_refused(tmp_path, capsys, no_data):
    from pyro_bnn.experiments.run_folder import _lock

    folder = tmp_path / "run"
    folder.mkdir()
    descriptor = _lock(folder)  # as another process's run would hold it
    try:
        err = _one_line_error(capsys, [*TRAIN, "--out", folder])
    finally:
        os.close(descriptor)
    assert "is in use by another pyro-bnn run" in err


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"activation": "relu"}, "activation: 'tanh' in the checkpoint, 'relu' now"),
        ({"model": "3fc"}, "model: 'tanh-small' in the checkpoint, '3fc' now"),
        ({"prior": "laplace"}, "prior: 'normal:0,1' in the checkpoint, 'laplace' now"),
    ],
)
def test_evaluate_trusts_the_checkpoint_not_an_edited_config(trained_run, tmp_path, capsys, no_data, edit, message):
    run = tmp_path / "copy"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes((trained_run / "checkpoint.pt").read_bytes())
    config = json.loads((trained_run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, **edit}))
    err = _one_line_error(capsys, ["evaluate", run])
    assert message in err and "config.json does not match" in err


def test_evaluate_names_a_config_that_is_not_json(trained_run, tmp_path, capsys, no_data):
    run = tmp_path / "broken"
    run.mkdir()
    (run / "config.json").write_text("{not json")
    err = _one_line_error(capsys, ["evaluate", run])
    assert f"{run / 'config.json'} is not valid JSON" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "nowhere"], "has no config.json"),
        (["evaluate", "RUN", "--corruption", "blur:3"], "'blur"),
        (["evaluate", "RUN", "--num-samples", "0"], "num_samples must be an int >= 1, got 0"),
        (["evaluate", "RUN", "--device", "cuda:3"], "'cuda:3'"),
    ],
)
def test_evaluate_options(trained_run, tmp_path, capsys, no_data, args, message):
    args = [trained_run if a == "RUN" else tmp_path / a if a == "nowhere" else a for a in args]
    err = _one_line_error(capsys, args)
    assert message in err


def _bnn():
    return BNN(nn.Sequential(nn.Linear(2, 3)), NormalPrior(), Categorical(10))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Trainer(_bnn(), lambda b: None, n_bins=0), "n_bins must be an int >= 1, got 0"),
        (lambda: Trainer(_bnn(), lambda b: None, nan_check_every=0), "nan_check_every must be an int >= 1, got 0"),
        (lambda: Trainer(_bnn(), lambda b: None, objective="elbo2"), "unknown ELBO 'elbo2'"),
        (lambda: Trainer(_bnn(), lambda b: None, lr_scheduler_interval="batch"), "'batch'"),
        (lambda: Categorical(0), "dataset_size must be a positive int"),
        (lambda: Categorical(10, kl_scale="full"), "unknown KL scale 'full'"),
        (lambda: replace(TINY, lr=float("inf")).validate(), "lr must be a finite number > 0, got inf"),
    ],
)
def test_api_errors_are_raised_at_once(build, message):
    with pytest.raises(ValueError) as info:
        build()
    assert message in str(info.value)


def test_predict_on_inputs_of_the_wrong_shape():
    from pyro.infer.autoguide import AutoNormal

    bnn = _bnn()
    guide = AutoNormal(bnn)
    guide(torch.randn(4, 2), torch.tensor([0, 1, 2, 0]))
    with pytest.raises(ValueError, match=r"cannot run on inputs of shape \(1, 5\)") as info:
        predict(bnn, guide, torch.randn(6, 5), num_samples=2)
    assert "\n" not in str(info.value)
