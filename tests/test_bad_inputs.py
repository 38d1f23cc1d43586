"""Bad input, table-driven: every case exits (or raises) at once with one line naming the value and what was
expected, with no traceback, and, for what can be checked without data, before any data is loaded."""

import errno
import json
import os
import re
import shutil
from dataclasses import replace

import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.cli import main
from pyro_bnn.infer import Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior
from pyro_bnn.runs import RunConfig, run_folder, runs, train_run

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
    (
        ["--data-dir", "moons=/nowhere/moons"],
        "--data-dir moons=/nowhere/moons: a run takes the data's folder itself (--data-dir /nowhere/moons); "
        "DATASET=PATH is the form of evaluate and reproduce",
    ),
    (["--lr", "nan"], "lr must be a finite number > 0, got nan"),
    (["--lr=-0.1"], "got -0.1"),
    (["--guide", "autonormal:inf"], "inf"),
    (["--guide", "autonormal:rel=nan"], "nan"),
    (["--guide", "autonormal:loc=prior"], "'prior'"),
    (["--guide", "bbb:-4,-5"], "low <= high"),
    (["--guide", "laplace"], "'laplace'"),
    (["--guide", "lowrank:rank=0"], "rank must be an int >= 1, got '0'"),
    (["--guide", "mvn:0"], "init scale must be a finite number > 0, got '0'"),
    (["--guide", "iaf:flows=0"], "flows must be an int >= 1, got '0'"),
    (["--elbo", "fast", "--guide", "lowrank"], "elbo 'fast' needs the flat guide"),
    (["--model", "mlp:100,100", "--guide", "mvn"], "D=10,602 random weights, above its limit of 4,096"),
    (["--dataset", "fashion-mnist", "--model", "3fc", "--guide", "mvn"], "D=2,797,010 random weights"),
    (["--model", "mlp:64,64", "--guide", "iaf"], "D=4,482 random weights, above its limit of 1,024"),
    (["--guide", "iaf:hidden=4"], "needs hidden >= D (a MADE network cannot be narrower than its input)"),
    (["--prior", "mixture:0.5,1,1e-300"], "1e-300"),
    (["--prior", "gaussian"], "'gaussian'"),
    (["--activation", "leaky:abc"], "abc"),
    (["--model", "vgg"], "'vgg'"),
    (["--model", "mlp:0"], "mlp:0"),
    (["--dataset", "imagenet"], "'imagenet'"),
    (["--model", "lenet"], "model 'lenet' cannot take dataset 'moons': lenet expects an image input_shape"),
    (["--model", "conv"], "model 'conv' cannot take dataset 'moons': conv expects an image input_shape"),
    (["--model", "resnet18"], "model 'resnet18' cannot take dataset 'moons'"),
    (["--dataset", "digits", "--model", "lenet"], "lenet needs images of at least 28x28"),
    (["--dataset", "digits", "--model", "vgg16"], "vgg16 needs images of at least 32x32"),
    (["--dataset", "cubic", "--model", "wrn"], "model 'wrn' cannot take dataset 'cubic'"),
    (["--device", "tpu"], "'tpu'"),
    (["--device", "cuda:7"], "'cuda:7'"),
    (["--epochs", "-1"], "epochs must be an int >= 1, got -1"),
    (["--epochs", "0"], "epochs must be an int >= 1, got 0"),
    (["--batch-size", "0"], "--batch-size must be an int >= 1, got 0"),
    (["--num-samples", "0"], "--num-samples must be an int >= 1, got 0"),
    (["--n-bins", "0"], "--n-bins must be an int >= 1, got 0"),
    (["--patience", "-1"], "patience"),
    (["--train-subset", "0"], "--train-subset"),
    (["--seed", "-1"], "-1"),
    (["--kl-anneal", "linear:0"], "linear:0"),
    (["--kl-anneal", "sigmoid"], "'sigmoid'"),
    (["--kl-scale", "paper", "--kl-weighting", "blundell"], "does not combine"),
    (["--elbo", "fast", "--guide", "autonormal:0.1"], "elbo 'fast' needs the flat guide"),
    (["--noise-scale", "0", "--dataset", "cubic", "--model", "mlp:8"], "--noise-scale"),
    (["--guide", "mixture:4"], "it needs --node-noise"),
    (["--guide", "mixture:0", "--node-noise"], "mixture:0"),
    (["--bias-noise"], "needs node_noise"),
    (["--node-noise", "--elbo", "fast"], "elbo 'fast' needs the flat guide"),
    (["--elbo", "mixture"], "elbo 'mixture' needs the mixture guide"),
    (["--node-noise", "--samples-per-example", "0"], "--samples-per-example"),
    (["--samples-per-example", "5"], "samples_per_example (--samples-per-example) 5 needs node_noise (--node-noise)"),
    (
        ["--node-noise", "--prior", "cauchy:1,0.1"],
        "elbo 'auto' trains guide 'mixture:4,loc_std=0.5' with the mixture-mean KL, which has no closed form against "
        "prior 'cauchy:1,0.1' (CauchyPrior); use a Normal prior such as 'normal:1,0.1', or --elbo trace",
    ),
    (["--node-noise", "--prior", "mixture"], "no closed form against prior 'mixture' (ScaleMixturePrior)"),
    (["--node-noise", "--prior", "flat"], "no closed form against prior 'flat' (FlatPrior)"),
    (
        ["--node-noise", "--elbo", "mixture", "--prior", "flat"],
        "elbo 'mixture' (the mixture-mean KL) has no closed form against prior 'flat' (FlatPrior)",
    ),
    (
        ["--node-noise", "--prior", "hierarchical:normal,halfcauchy,1"],
        "guide 'mixture:4' covers real-valued node-noise sites only, but prior 'hierarchical:normal,halfcauchy,1' "
        "adds a positive scale site per layer; use a Normal prior such as 'normal:1,0.1'",
    ),
    (
        ["--node-noise", "--elbo", "trace", "--prior", "hierarchical:normal,halfcauchy,1"],
        "guide 'mixture:4' covers real-valued node-noise sites only",
    ),
    (
        ["--elbo", "fast", "--prior", "hierarchical:normal,halfcauchy,1"],
        "elbo 'fast' cannot train a hierarchical prior ('hierarchical:normal,halfcauchy,1' adds a scale site per "
        "layer); use --elbo trace, or auto, which takes trace for it",
    ),
    (["--elbo", "fast-single", "--prior", "hierarchical:laplace,inversegamma,1,1"], "cannot train a hierarchical"),
    (
        ["--elbo", "meanfield", "--guide", "autonormal:0.1", "--prior", "hierarchical:normal,inversegamma,2,2"],
        "elbo 'meanfield' cannot score guide 'autonormal:0.1' under prior 'hierarchical:normal,inversegamma,2,2': the "
        "guide samples the prior's per-layer scale sites through a Delta whose Jacobian the mean-field KL ignores; use "
        "--elbo trace, or a guide that samples them as transformed Normals (flat, bbb)",
    ),
    (["--elbo", "meanfield", "--guide", "mvn", "--prior", "hierarchical:normal,halfcauchy,1"], "cannot score guide"),
    (
        ["--prior", "flat", "--guide", "flat:0.1,loc=median"],  # was a traceback from init_to_median after loading
        "guide 'flat:0.1,loc=median' starts its locations at the median of draws from the prior (loc=median), but "
        "prior 'flat' cannot be sampled; use loc=network (the default: the network's own initial weights) or loc=map "
        "(a MAP warm start)",
    ),
    (["--prior", "flat", "--guide", "autonormal:0.1,loc=median"], "but prior 'flat' cannot be sampled"),
    (["--node-noise", "--guide", "mixture:3", "--num-samples", "10"], "--num-samples=10 is not a multiple of 3"),
    (["--lr-variational", "-1"], "--lr-variational"),
    (["--weight-decay", "nan"], "--weight-decay"),
    (["--lr-schedule", "decay:2"], "decay:2"),
    (["--node-noise", "--kl-scale", "paper"], "does not combine with sgd or weight_decay"),
    (["--lr-variational-schedule", "cosine"], "'cosine'"),
    (
        ["--data-samples", "1"],
        "moons with data_samples=1 splits into train / validation / test sizes 1 / 0 / 0, leaving the validation and "
        "test parts empty",
    ),
    (
        ["--data-samples", "2", "--val-size", "0"],
        "data_samples=2 splits into train / validation / test sizes 2 / 0 / 0",
    ),
    (["--dataset", "circles", "--data-samples", "3"], "sizes 2 / 0 / 1, leaving the validation part empty"),
    # a negative whole number is a count, refused as the API refuses one (it read "as a fraction ..., got -1.0")
    (["--val-size=-1"], "pyro-bnn train: error: --val-size must be a count >= 0 or a fraction in [0, 1), got -1"),
    # named the config field val_size, not the flag
    (["--val-size=-0.5"], "pyro-bnn train: error: --val-size as a fraction must lie in [0, 1), got -0.5"),
    (["--val-size", "1.5"], "pyro-bnn train: error: --val-size as a fraction must lie in [0, 1), got 1.5"),
    (["--val-size", "nan"], "pyro-bnn train: error: --val-size as a fraction must lie in [0, 1), got nan"),
    (["--val-size", "inf"], "pyro-bnn train: error: --val-size as a fraction must lie in [0, 1), got inf"),
    # torch.manual_seed overflowed after the data had loaded (a traceback); pyro.set_rng_seed stops at 2**32 - 1
    (
        ["--seed", "99999999999999999999"],
        "pyro-bnn train: error: --seed must be an int in [0, 2**32 - 1 = 4294967295] (the seeds Pyro takes), got "
        "99999999999999999999",
    ),
    (["--seed", "4294967296"], "--seed must be an int in [0, 2**32 - 1 = 4294967295] (the seeds Pyro takes), got"),
    (["--data-seed", "4294967296"], "--data-seed must be an int in [0, 2**32 - 1 = 4294967295] (the seeds Pyro"),
]


@pytest.mark.parametrize("extra, message", TRAIN_CASES, ids=[" ".join(c[0]) for c in TRAIN_CASES])
def test_train_options_fail_before_any_data_is_loaded(tmp_path, capsys, no_data, extra, message):
    err = _one_line_error(capsys, [*TRAIN, *extra, "--out", tmp_path / "out"])
    assert err.startswith("pyro-bnn train: error:") and message in err
    assert not (tmp_path / "out").exists()


SAMPLE = ["sample", "--dataset", "moons", "--model", "tanh-small", "--quiet"]

SAMPLE_CASES = [
    (["--method", "hmc", "--step-size", "1e-3"], "unknown SG-MCMC method 'hmc'; expected one of 'sgld', 'sghmc'"),
    (["--step-size", "0"], "--step-size must be a finite number > 0, got 0.0"),
    (["--step-size=-1e-3"], "--step-size must be a finite number > 0, got -0.001"),
    (["--step-size", "nan"], "--step-size must be a finite number > 0, got nan"),
    (["--step-size", "1e-3", "--thin", "0"], "thin must be an int >= 1, got 0"),
    (["--step-size", "1e-3", "--draws", "0"], "--draws must be an int >= 1, got 0"),
    (["--step-size", "1e-3", "--burn-in", "-1"], "--burn-in must be an int >= 0, got -1"),
    (["--step-size", "1e-3", "--chains", "0"], "--chains must be an int >= 1, got 0"),
    (["--step-size", "1e-3", "--method", "csgld", "--draws", "5", "--cycles", "2"], "--cycles=2 must divide the 5"),
    (["--step-size", "1e-3", "--method", "sghmc", "--friction", "0"], "friction must be a number in (0, 1]"),
    (["--step-size", "1e-3", "--init", "zeros"], "unknown init 'zeros'"),
    (
        ["--step-size", "1e-3", "--val-size=-2"],
        "pyro-bnn sample: error: --val-size must be a count >= 0 or a fraction in [0, 1), got -2",
    ),
    (["--step-size", "1e-3", "--node-noise"], "SG-MCMC samples weight-space models only"),
    (["--step-size", "1e-3", "--prior", "hierarchical:normal,halfcauchy,1"], "hyperparameter sites"),
    (["--step-size", "1e-3", "--kl-scale", "paper"], "kl_scale='dataset'"),
    (["--step-size", "1e-3", "--model", "lenet"], "model 'lenet' cannot take dataset 'moons'"),
    (
        ["--step-size", "1e-3", "--friction", "0.5"],
        "--friction 0.5 applies to the methods sghmc, csghmc only, not 'sgld'",
    ),
    (["--step-size", "1e-3", "--cycles", "2"], "--cycles 2 applies to the methods csgld, csghmc only, not 'sgld'"),
    (["--step-size", "1e-3", "--method", "sghmc", "--exploration", "0.2"], "--exploration 0.2 applies to the methods"),
    (["--step-size", "1e-3", "--method", "csgld", "--friction", "0.3"], "not 'csgld'"),
]


@pytest.mark.parametrize("extra, message", SAMPLE_CASES, ids=[" ".join(c[0]) for c in SAMPLE_CASES])
def test_sample_options_fail_before_any_data_is_loaded(tmp_path, capsys, no_data, extra, message):
    err = _one_line_error(capsys, [*SAMPLE, *extra, "--out", tmp_path / "out"])
    assert err.startswith("pyro-bnn sample: error:") and message in err
    assert not (tmp_path / "out").exists()


LAPLACE_CASES = [
    (["--subset", "first"], "unknown Laplace subset 'first'"),
    (["--structure", "lowrank"], "unknown Hessian structure 'lowrank'"),
    (["--predictive", "nn"], "unknown Laplace predictive 'nn'"),
    (["--link", "logit"], "unknown GLM link 'logit'"),
    (["--prior-precision", "0"], "--prior-precision must be a finite number > 0 or None, got 0.0"),
    (["--num-samples", "0"], "--num-samples must be an int >= 1, got 0"),
    ([], "was trained with guide 'autonormal:0.05': a Laplace approximation is fitted around the MAP"),
]


@pytest.mark.parametrize("extra, message", LAPLACE_CASES, ids=[" ".join(c[0]) or "guide" for c in LAPLACE_CASES])
def test_laplace_options_and_runs_fail_before_any_data_is_loaded(trained_run, capsys, no_data, extra, message):
    before = sorted(p.name for p in trained_run.iterdir())
    err = _one_line_error(capsys, ["laplace", trained_run, *extra])
    assert err.startswith("pyro-bnn laplace: error:") and message in err
    assert sorted(p.name for p in trained_run.iterdir()) == before


# The data is passed in: a test's no_data may already be in place when getfixturevalue builds these.
@pytest.fixture(scope="module")
def map_run(tmp_path_factory):
    from pyro_bnn.data import load_dataset

    out = tmp_path_factory.mktemp("runs") / "map"
    train_run(replace(TINY, guide="map"), out, progress=False, data=load_dataset("moons", seed=TINY.seed))
    return out


@pytest.fixture(scope="module")
def cubic_map_run(tmp_path_factory):
    from pyro_bnn.data import load_dataset

    cubic = replace(TINY, dataset="cubic", model="mlp:8", activation="relu", guide="map", batch_size=200)
    out = tmp_path_factory.mktemp("runs") / "cubic-map"
    train_run(cubic, out, progress=False, data=load_dataset("cubic", seed=cubic.seed))
    return out


# Options of `laplace` that the run's task or the chosen predictive would ignore: refused, before any data.
LAPLACE_APPLIES_CASES = [
    (
        "cubic_map_run",
        ["--link", "mc"],
        "--link mc applies to classifiers only: RUN is a regression run (dataset 'cubic'), whose GLM predictive "
        "draws Gaussian outputs with no link",
    ),
    ("cubic_map_run", ["--link", "probit", "--predictive", "mc"], "--link probit applies to classifiers only"),
    ("map_run", ["--predictive", "mc", "--link", "mc"], "--link mc applies to the GLM predictive only"),
    (
        "map_run",
        ["--num-samples", "8"],
        "--num-samples 8 does not apply to a classifier's GLM predictive with the probit link, which draws nothing",
    ),
    ("map_run", ["--link", "probit", "--num-samples", "8"], "--num-samples 8 does not apply"),
]


@pytest.mark.parametrize(
    "run, extra, message", LAPLACE_APPLIES_CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in LAPLACE_APPLIES_CASES]
)
def test_laplace_options_that_do_not_apply_are_refused(request, capsys, no_data, run, extra, message):
    folder = request.getfixturevalue(run)
    before = sorted(p.name for p in folder.iterdir())
    err = _one_line_error(capsys, ["laplace", folder, *extra])
    assert err.startswith("pyro-bnn laplace: error:") and message.replace("RUN", str(folder)) in err
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_second_laplace_fit_of_the_same_file_needs_overwrite(map_run, tmp_path, capsys, no_data):
    run = tmp_path / "map"
    run.mkdir()
    for name in ("config.json", "checkpoint.pt"):
        (run / name).write_bytes((map_run / name).read_bytes())
    earlier = run / "laplace-last_layer-kron.json"
    earlier.write_text('{"an": "earlier fit"}')
    err = _one_line_error(capsys, ["laplace", run, "--predictive", "mc"])
    assert err == (
        f"pyro-bnn laplace: error: {earlier} already holds a Laplace fit of this run (subset last_layer, structure "
        "kron); pass --overwrite to replace it, or another --subset or --structure"
    )
    assert earlier.read_text() == '{"an": "earlier fit"}'
    with pytest.raises(DataLoaded):  # with --overwrite the checks pass and the fit goes on to load the data
        main([str(a) for a in ["laplace", run, "--overwrite"]])


def test_model_checks_use_the_shapes_the_data_sets_load_with():
    from pyro_bnn.data import dataset_shape, load_dataset

    for name in ("digits", "moons", "circles", "cubic"):
        data = load_dataset(name, train_subset=8)
        shape = dataset_shape(name)
        assert (shape.input_shape, shape.num_classes, shape.output_dim) == (
            data.input_shape,
            data.num_classes,
            data.output_dim,
        )
    assert dataset_shape("fmnist").input_shape == (1, 28, 28) and dataset_shape("mnist").num_classes == 10


def test_data_dir_of_a_generated_data_set_is_warned_about(tmp_path, capsys):
    args = [*TRAIN, "--epochs", "1", "--num-samples", "2", "--device", "cpu", "--data-dir", tmp_path / "mnist"]
    assert main([str(a) for a in [*args, "--out", tmp_path / "run"]]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "--data-dir" in line]  # (one epoch: "barely left")
    assert err == [
        f"pyro-bnn train: warning: --data-dir {tmp_path / 'mnist'} is unused: dataset 'moons' is not read from files "
        "(only mnist, fashion-mnist, cifar10 and cifar100 are)"
    ]


# ------------------------------------------------------------------------------------------------ unusable paths
# Every verb that writes a folder refuses these with one line, before any data is read and leaving nothing behind.
# They fail for root too (the tests run as root here): /sys and /proc refuse new folders whatever the permissions.

UNUSABLE_PATHS = [
    ("/sys/x", "--out /sys/x cannot be created: "),
    ("/proc/x/run", "--out /proc/x/run cannot be created: /proc/x: "),
    ("file", "--out file exists and is not a folder"),
    ("file/run", "--out file/run cannot be created: file is not a folder"),
    ("a" * 300, "cannot be used: File name too long"),
    ("", "--out is empty; name a folder"),
]

VERBS = {
    "train": [*TRAIN, "--device", "cpu", "--out", "PATH"],
    "demo": ["demo", "--quiet", "--device", "cpu", "--out", "PATH"],
    "evaluate": ["evaluate", "PATH"],
    "diagnose": ["diagnose", "PATH", "--pruning"],
    "laplace": ["laplace", "PATH"],
    "sample": [*SAMPLE, "--step-size", "1e-3", "--device", "cpu", "--out", "PATH"],
}
RUN_FOLDER_VERBS = ("evaluate", "diagnose", "laplace")  # they write into a run folder given as their argument

RUN_FOLDER_MESSAGES = {"": "the run folder is empty", "a" * 300: "run folder aaa"}  # else as below


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("path, message", UNUSABLE_PATHS, ids=["sys", "proc", "file", "in-file", "long", "empty"])
def test_every_verb_refuses_an_unusable_path(tmp_path, monkeypatch, capsys, no_data, verb, path, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    err = _one_line_error(capsys, [path if a == "PATH" else a for a in VERBS[verb]])
    if verb in RUN_FOLDER_VERBS:
        found = os.path.exists(path)
        message = RUN_FOLDER_MESSAGES.get(path, f"{path} has no config.json" if found else f"{path} does not exist")
    assert err.startswith(f"pyro-bnn {verb}: error:") and message in err
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def _refuse_writes(monkeypatch, code=errno.EROFS):
    """A read-only file system, as root sees one too (chmod does not stop root)."""

    def mkstemp(*args, dir=None, **kwargs):
        raise OSError(code, os.strerror(code), str(dir))

    monkeypatch.setattr(run_folder.tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_refuses_a_folder_it_cannot_write(trained_run, tmp_path, monkeypatch, capsys, no_data, verb):
    (tmp_path / "mine").mkdir()
    path = trained_run if verb in RUN_FOLDER_VERBS else tmp_path / "mine"
    before = sorted(p.name for p in path.iterdir())
    _refuse_writes(monkeypatch)
    err = _one_line_error(capsys, [path if a == "PATH" else a for a in VERBS[verb]])
    assert f"{path} cannot be written: Read-only file system" in err
    assert sorted(p.name for p in path.iterdir()) == before


def test_list_needs_no_writable_folder(monkeypatch, capsys):
    monkeypatch.chdir("/sys")  # not writable, for root neither
    assert main(["list"]) == 0
    assert "model" in capsys.readouterr().out


def test_the_path_check_leaves_nothing_when_the_run_is_refused_later(tmp_path, monkeypatch, capsys):
    def missing(config):
        raise FileNotFoundError("no data here")

    monkeypatch.setattr(runs, "load_data", missing)
    err = _one_line_error(capsys, [*TRAIN, "--out", tmp_path / "new" / "deep" / "run"])
    assert err == "pyro-bnn train: error: no data here"
    assert list(tmp_path.iterdir()) == []  # the folders made to probe the path are gone again
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's own file")
    _one_line_error(capsys, [*TRAIN, "--out", tmp_path / "mine"])
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


# ------------------------------------------------------------------------------------------------ the CLI's rule
# Argument and path problems end in one line (exit 2); a file system that refuses a write during the work in one line
# naming the file (exit 1); anything else is a bug and keeps its traceback.


def test_a_write_refused_during_the_run_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    def full(path, value):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(runs, "write_json_atomically", full)
    err = _one_line_error(capsys, [*TRAIN, "--device", "cpu", "--out", tmp_path / "run"], code=1)
    assert err == f"pyro-bnn train: error: {tmp_path / 'run' / 'config.json'}: No space left on device"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("error", [RuntimeError("a bug"), ValueError("a bug in training"), KeyError("a bug")])
def test_an_unexpected_error_keeps_its_traceback(tmp_path, monkeypatch, error):
    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(runs, "build_bnn", broken)
    with pytest.raises(type(error), match="a bug"):
        main([str(a) for a in [*TRAIN, "--device", "cpu", "--out", tmp_path / "run"]])


def test_an_existing_run_needs_resume_or_overwrite(trained_run, capsys, no_data):
    err = _one_line_error(capsys, [*TRAIN, "--activation", "tanh", "--out", trained_run])
    assert "already holds a run" in err and "--resume" in err


@pytest.mark.parametrize("grid_file", ["grid.json", "reproduce.json"])
def test_a_run_and_a_grid_of_runs_do_not_share_a_folder(tmp_path, capsys, no_data, grid_file):
    """train and sample wrote a run beside an ensemble's or reproduction's grid, and ensemble and reproduce wrote a
    grid beside a run; each folder then read as neither."""
    from pyro_bnn.reproduce.grid import GRID
    from pyro_bnn.reproduce.request import STATE

    assert set(run_folder.GRID_FILES) == {GRID, STATE}
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / grid_file).write_text("{}")
    for args, verb in ((TRAIN, "train"), ([*SAMPLE, "--step-size", "1e-3"], "sample")):
        err = _one_line_error(capsys, [*args, "--out", grid])
        assert (
            err
            == f"pyro-bnn {verb}: error: {grid} holds a grid of runs ({grid_file}); give this run a folder of its own"
        )
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    ensemble = ["ensemble", "--dataset", "moons", "--model", "tanh-small", "--members", "2", "--out", run]
    for args, verb in ((ensemble, "ensemble"), (["reproduce", "leaky-calibration", "--out", run], "reproduce")):
        err = _one_line_error(capsys, args)
        assert err == f"pyro-bnn {verb}: error: {run} holds a run (config.json); give the grid a folder of its own"
    assert sorted(p.name for p in grid.iterdir()) == [grid_file] and sorted(p.name for p in run.iterdir()) == [
        "config.json"
    ]


@pytest.mark.parametrize("run_file", ["config.json", "checkpoint.pt"])
def test_demo_refuses_a_run_folder_for_its_own(tmp_path, capsys, no_data, run_file):
    """demo accepted a train run's folder as --out, then wrote its reliability.png over the run's and its runs into
    it; ensemble refused the same folder."""
    run = tmp_path / "run"
    run.mkdir()
    (run / run_file).write_text("{}")
    err = _one_line_error(capsys, ["demo", "--quiet", "--device", "cpu", "--out", run])
    assert err == f"pyro-bnn demo: error: {run} holds a run ({run_file}); give the demo a folder of its own"
    assert [p.name for p in run.iterdir()] == [run_file]
    from pyro_bnn.commands.demo import run_demo

    with pytest.raises(FileExistsError, match="holds a run"):
        run_demo(run, progress=False)


def test_an_existing_run_in_samples_out_names_only_the_flag_sample_has(trained_run, capsys, no_data):
    err = _one_line_error(capsys, [*SAMPLE, "--step-size", "1e-3", "--out", trained_run])
    assert err == (
        f"pyro-bnn sample: error: {trained_run} already holds a run (checkpoint.pt); pass --overwrite to replace it"
    )


@pytest.mark.parametrize("same_config", [True, False])
def test_resume_and_overwrite_together_are_refused(trained_run, tmp_path, capsys, no_data, same_config):
    # were taken silently: the same config resumed (--overwrite ignored), another one was told to pass --overwrite
    config = json.loads((trained_run / "config.json").read_text())
    args = ["train", "--resume", "--overwrite", "--out", trained_run, "--dataset", "moons", "--model", "tanh-small"]
    args += ["--activation", "tanh" if same_config else "relu", "--guide", config["guide"], "--epochs", "1"]
    args += ["--batch-size", "64", "--num-samples", "4", "--num-val-samples", "2", "--device", "cpu", "--quiet"]
    before = (trained_run / "checkpoint.pt").read_bytes()
    assert _one_line_error(capsys, args) == (
        "pyro-bnn train: error: --resume and --overwrite exclude each other: --resume continues the run in --out, "
        "--overwrite replaces it; pass one"
    )
    assert (trained_run / "checkpoint.pt").read_bytes() == before


def test_resume_with_another_config_names_the_keys(trained_run, capsys, no_data):
    err = _one_line_error(capsys, [*TRAIN, "--activation", "relu", "--resume", "--out", trained_run])
    assert "activation: 'tanh' in the checkpoint, 'relu' now" in err
    assert "model" not in err.split("different config")[1]  # only the differing keys


def test_resume_with_fewer_epochs_than_trained_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    train_run(replace(TINY, epochs=2), run, progress=False)
    config = json.loads((run / "config.json").read_text())
    assert json.loads((run / "metrics.json").read_text())["epochs_run"] == 2
    args = [*TRAIN, "--activation", "tanh", "--guide", "autonormal:0.05", "--batch-size", "64"]
    args += ["--num-val-samples", "2", "--epochs", "1", "--resume", "--out", run]
    err = _one_line_error(capsys, args)
    assert "with --epochs 1: it has trained 2 epochs; a resume only extends a run (pass --epochs 2 or more" in err
    assert json.loads((run / "config.json").read_text()) == config  # the run's record is untouched


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
    assert err.endswith("test_bad_inputs.DataLoaded)") and "weights_only" not in err  # no advice to unpickle


@pytest.mark.parametrize("keep", [0.5, 0.0], ids=["half", "empty"])
def test_a_cut_checkpoint_is_one_line_naming_the_file(trained_run, tmp_path, capsys, no_data, keep):
    run = tmp_path / "cut"
    run.mkdir()
    (run / "config.json").write_bytes((trained_run / "config.json").read_bytes())
    data = (trained_run / "checkpoint.pt").read_bytes()
    (run / "checkpoint.pt").write_bytes(data[: int(len(data) * keep)])
    err = _one_line_error(capsys, ["evaluate", run])
    assert f"{run / 'checkpoint.pt'} is not a readable checkpoint" in err and not err.endswith(":")
    assert "Errno" not in err


@pytest.mark.parametrize("flag", ["--resume", "--overwrite"])
def test_a_text_file_as_the_checkpoint_is_one_line(tmp_path, capsys, no_data, flag):
    """A CSV file where the checkpoint belongs made torch's unpickler raise a bare IndexError: a traceback."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(TINY.to_json())
    (run / "checkpoint.pt").write_bytes(b"step,loss\n1,0.5\n")
    err = _one_line_error(capsys, [*TRAIN, flag, "--out", run])
    assert err.endswith(
        f"{run / 'checkpoint.pt'} is not a pyro_bnn checkpoint (16 bytes): torch.load reads no checkpoint in it "
        "(its bytes are no pickle torch.save wrote: IndexError: pop from empty list)"
    )


def _damaged_copy(trained_run, folder, damage):
    from pyro_bnn.infer import load_checkpoint, save_checkpoint

    folder.mkdir()
    (folder / "config.json").write_bytes((trained_run / "config.json").read_bytes())
    state = load_checkpoint(trained_run / "checkpoint.pt")
    damage(state)
    save_checkpoint({k: v for k, v in state.items() if k != "format"}, folder / "checkpoint.pt")
    return folder


def test_a_checkpoint_of_other_shapes_is_one_line_naming_what_differs(trained_run, tmp_path, capsys):
    # evaluate kept only torch's first line, "Error(s) in loading state_dict for ...:", which names nothing
    def cut_loc(state):
        name = next(k for k in state["guide"] if k.endswith("loc") or "locs" in k)
        state["guide"][name] = state["guide"][name][..., :1]

    err = _one_line_error(capsys, ["evaluate", _damaged_copy(trained_run, tmp_path / "guide", cut_loc)])
    assert "does not fit the model its config describes: size mismatch for " in err and "copying a param" in err

    # resume: Adam's moments cut short segfaulted the fused step (exit 139); a traceback for a guide of other shapes
    def cut_moments(state):
        for moments in state["optimizer"]["state"].values():
            moments["exp_avg"] = moments["exp_avg"][..., :1]

    run = _damaged_copy(trained_run, tmp_path / "optimiser", cut_moments)
    args = [*TRAIN, "--activation", "tanh", "--guide", "autonormal:0.05", "--batch-size", "64", "--epochs", "2"]
    err = _one_line_error(capsys, [*args, "--num-val-samples", "2", "--resume", "--out", run])
    assert err.startswith(f"pyro-bnn train: error: cannot resume from {run / 'checkpoint.pt'}: it does not fit this ")
    assert "the optimiser's 'exp_avg' of parameter 0 has shape" in err


def test_a_diverged_overwrite_says_the_run_it_replaced_is_kept(trained_run, tmp_path, capsys, monkeypatch):
    # it named the staging folder's checkpoint, removed with the staging folder before the message was read
    import pyro_bnn.infer.trainer as loop

    run = tmp_path / "kept run"  # a space in the path: the message still names the run kept
    shutil.copytree(trained_run, run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    train_epoch = loop.train_epoch

    def diverging(trainer, *args, **kwargs):
        if trainer.run_state.epoch == 1:
            for group in trainer.optimizer.param_groups:
                group["lr"] = 1e12
        return train_epoch(trainer, *args, **kwargs)

    monkeypatch.setattr(loop, "train_epoch", diverging)
    args = [*TRAIN, "--activation", "tanh", "--guide", "autonormal:0.05", "--batch-size", "64", "--epochs", "4"]
    err = _one_line_error(capsys, [*args, "--num-val-samples", "2", "--overwrite", "--out", run], code=1)
    assert f"the run already in {run} is unchanged (the new run was discarded with its checkpoints)" in err
    assert "staging" not in err and "last good checkpoint" not in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


# Ctrl-C: status 130 and one line saying what is kept, pointing only to what the verb has.
INTERRUPTS = [
    (["train", "--out", "x"], "interrupted; no epoch had finished, so nothing was kept"),
    (["train", "--out", "x", "--overwrite"], "interrupted; no epoch had finished, so nothing was kept"),  # no old run
    (
        ["reproduce", "priors", "--out", "x"],
        "interrupted; finished runs are kept; running the same command again resumes the grid",
    ),
    (
        ["ensemble", "--out", "x"],
        "interrupted; finished runs are kept; running the same command again resumes the grid",
    ),
    (["sample", "--step-size", "1e-3", "--out", "x"], "interrupted"),
    (["laplace", "x"], "interrupted"),
    (["evaluate", "x"], "interrupted"),
    (["demo"], "interrupted"),
    (["diagnose", "x"], "interrupted"),
]


@pytest.mark.parametrize("args, message", INTERRUPTS, ids=[c[0][0] for c in INTERRUPTS])
def test_an_interrupt_says_what_is_kept_and_names_only_flags_the_verb_has(monkeypatch, capsys, args, message):
    import dataclasses

    from pyro_bnn import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.VERBS, args[0], dataclasses.replace(cli.VERBS[args[0]], run=interrupted))
    assert main(args) == 130
    assert capsys.readouterr().err == f"pyro-bnn {args[0]}: {message}\n"


def test_an_interrupted_train_points_to_the_checkpoint_it_left(monkeypatch, capsys, trained_run):
    import dataclasses

    from pyro_bnn import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.VERBS, "train", dataclasses.replace(cli.VERBS["train"], run=interrupted))
    assert main(["train", "--out", str(trained_run), "--resume"]) == 130
    expected = f"completed epochs are in {trained_run / 'checkpoint.pt'} (run the same command with --resume)"
    assert capsys.readouterr().err == f"pyro-bnn train: interrupted; {expected}\n"


def test_an_interrupted_overwrite_of_a_run_says_the_old_run_is_unchanged(tmp_path, trained_run, capsys):
    """Interrupted during its first epoch (a KeyboardInterrupt from the first training step)."""
    import pyro_bnn.infer.trainer as trainer_module

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    before = (run / "checkpoint.pt").read_bytes()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer_module, "train_epoch", interrupted)
        args = [*TRAIN, "--activation", "tanh", "--guide", "autonormal:0.05", "--overwrite", "--out", run]
        assert main([str(a) for a in args]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"pyro-bnn train: interrupted; the run already in {run} is unchanged; the new one kept nothing"
    assert (run / "checkpoint.pt").read_bytes() == before


def test_a_busy_run_folder_is_refused(tmp_path, capsys, no_data):
    from pyro_bnn.runs.run_folder import _lock

    folder = tmp_path / "run"
    folder.mkdir()
    descriptor = _lock(folder)  # as another process's run would hold it
    try:
        err = _one_line_error(capsys, [*TRAIN, "--out", folder])
    finally:
        os.close(descriptor)
    assert "is in use by another pyro-bnn run" in err


def test_evaluate_refuses_a_run_folder_that_is_training_now(trained_run, tmp_path, capsys, no_data):
    from pyro_bnn.runs.run_folder import _lock

    run = tmp_path / "copy"
    shutil.copytree(trained_run, run)
    descriptor = _lock(run)  # as the training process holds it
    try:
        err = _one_line_error(capsys, ["evaluate", run])
    finally:
        os.close(descriptor)
    assert f"{run} is in use by another pyro-bnn run" in err


def test_evaluate_warns_in_one_line_that_a_run_did_not_finish(trained_run, tmp_path, capsys):
    run = tmp_path / "copy"
    from pyro_bnn.infer import load_checkpoint

    shutil.copytree(trained_run, run)
    (run / "metrics.json").unlink()  # and a checkpoint of epoch 1 of 2: what a run killed while training leaves
    state = load_checkpoint(run / "checkpoint.pt")
    state["config"] = json.dumps({**json.loads(state["config"]), "epochs": 2})
    torch.save(state, run / "checkpoint.pt")
    (run / "config.json").write_text(json.dumps({**json.loads((run / "config.json").read_text()), "epochs": 2}))
    assert main(["evaluate", str(run), "--num-samples", "2"]) == 0
    err = capsys.readouterr().err
    expected = f"pyro-bnn evaluate: warning: {run} has no metrics.json of its checkpoint: its training did not finish"
    lines = [f"{expected} (the checkpoint holds epoch 1 of 2); scoring the weights it has"]
    assert [line for line in err.splitlines() if "metrics.json" in line] == lines
    # A finished run extended by a resume that was interrupted keeps the shorter run's metrics.json: still warned.
    (run / "metrics.json").write_text(json.dumps({"epochs_run": 0}))
    assert main(["evaluate", str(run), "--num-samples", "2"]) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "metrics.json" in line] == lines
    (run / "metrics.json").write_text(json.dumps({"epochs_run": 1}))  # early stopped at its checkpoint's epoch
    assert main(["evaluate", str(run), "--num-samples", "2"]) == 0
    assert "metrics.json" not in capsys.readouterr().err
    # A run that diverged says why (train's stopped.json).
    (run / "metrics.json").unlink()
    (run / "stopped.json").write_text(json.dumps({"stopped": "diverged", "message": "loss became nan at epoch 2"}))
    assert main(["evaluate", str(run), "--num-samples", "2"]) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "metrics.json" in line] == [
        f"{expected} (the checkpoint holds epoch 1 of 2; it stopped: loss became nan at epoch 2); scoring the weights "
        "it has"
    ]


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
        (["evaluate", "nowhere"], "nowhere does not exist"),
        (["evaluate", "RUN", "--corruption", "blur:3"], "'blur"),
        (["evaluate", "RUN", "--num-samples", "0"], "--num-samples must be an int >= 1, got 0"),
        (["evaluate", "RUN", "--device", "cuda:3"], "'cuda:3'"),
        (["evaluate", "RUN", "--conformal", "1.5"], "--conformal must be a number in (0, 1), got 1.5"),
        (["evaluate", "RUN", "--conformal", "0"], "--conformal must be a number in (0, 1), got 0.0"),
        (["evaluate", "RUN", "--conformal", "nan"], "--conformal must be a number in (0, 1), got nan"),
        (
            ["evaluate", "RUN", "--conformal", "0.01", "--calibration-size", "50"],
            "--calibration-size 50 is too small for --conformal 0.01: a finite threshold needs at least 99",
        ),
        (
            ["evaluate", "CUBIC", "--conformal", "0.1", "--conformal-method", "aps"],
            "--conformal-method aps needs class probabilities, but 'cubic' is a regression run",
        ),
    ],
)
def test_evaluate_options(trained_run, tmp_path, capsys, no_data, request, args, message):
    named = {"RUN": trained_run, "nowhere": tmp_path / "nowhere"}
    if "CUBIC" in args:
        named["CUBIC"] = request.getfixturevalue("cubic_run")
    err = _one_line_error(capsys, [named.get(a, a) for a in args])
    assert message in err


@pytest.fixture(scope="module")
def cubic_run(tmp_path_factory):
    from pyro_bnn.data import load_dataset

    cubic = replace(
        TINY, dataset="cubic", model="mlp:16", activation="relu", batch_size=200, num_samples=2, val_size=40
    )
    out = tmp_path_factory.mktemp("runs") / "cubic"
    train_run(cubic, out, progress=False, data=load_dataset("cubic", val_size=40, seed=cubic.seed))
    return out


# Conformal options that only the test set's size can refuse: after the data is loaded, before anything is scored.
@pytest.mark.parametrize(
    "args, message",
    [
        (["--conformal", "0.1", "--calibration-size", "100000"], "--calibration-size 100000 leaves nothing to score"),
        (["--conformal", "0.0001"], "is too small for --conformal 0.0001: a finite threshold needs at least 9999"),
    ],
)
def test_evaluate_conformal_options_checked_against_the_test_set(trained_run, capsys, args, message):
    err = _one_line_error(capsys, ["evaluate", trained_run, *args])
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
        (lambda: Categorical(0), "dataset_size must be an int >= 1, got 0"),
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
    with pytest.raises(ValueError, match=r"cannot run on inputs of shape \(6, 5\)") as info:
        predict(bnn, guide, torch.randn(6, 5), num_samples=2)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs, data, message",
    [
        ({"chunk_size": -1}, None, "chunk_size must be None or an int >= 1, got -1"),
        ({"chunk_size": 0}, None, "chunk_size must be None or an int >= 1, got 0"),
        ({"batch_size": 0}, None, "batch_size must be an int >= 1, got 0"),
        ({"max_chunk_bytes": 0}, None, "max_chunk_bytes must be None or an int >= 1, got 0"),
        ({}, "label", "labels must lie in [0, 3) for a network with 3 outputs, found values in [0, 5]"),
    ],
)
def test_predict_refuses_bad_sizes_and_targets_in_one_line(kwargs, data, message):
    from pyro.infer.autoguide import AutoNormal

    bnn = _bnn()
    guide = AutoNormal(bnn)
    guide(torch.randn(4, 2), torch.tensor([0, 1, 2, 0]))
    x = torch.randn(6, 2)
    data = (x, torch.tensor([0, 1, 2, 0, 5, 1])) if data == "label" else x
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        predict(bnn, guide, data, num_samples=2, **kwargs)
    assert "\n" not in str(info.value)
