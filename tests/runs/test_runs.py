"""End-to-end runs with tiny settings: train, evaluate (with a corruption), resume, the demo and the CLI."""

import json
import types
from dataclasses import replace

import pytest

from pyro_bnn.cli import main
from pyro_bnn.commands.demo import DEMO_CONFIG, format_table, run_demo
from pyro_bnn.evaluation import regression_metrics
from pyro_bnn.infer import load_checkpoint
from pyro_bnn.runs import RunConfig, evaluate_run, runs, train_run
from pyro_bnn.runs.evaluate import read_run
from pyro_bnn.runs.scoring import CONFORMAL_KEYS

TINY = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="autonormal:0.05",
    epochs=3,
    batch_size=64,
    lr=0.02,
    num_samples=8,
    num_val_samples=4,
    device="cpu",
)

TINY_CUBIC = RunConfig(
    dataset="cubic",
    model="mlp:16,16",
    guide="autonormal:0.05",
    epochs=2,
    batch_size=200,
    lr=0.01,
    num_samples=8,
    num_val_samples=4,
    device="cpu",
)

REGRESSION_KEYS = {"rmse", "nll", "coverage", "posterior_mean_rmse", "history", "train_time_s", "epochs_run"}


@pytest.fixture
def no_data_loading(monkeypatch):
    """Makes loading a run's data fail loudly: for checks that must happen before any data is loaded."""

    def refuse(config):
        raise AssertionError(f"data was loaded for {config.dataset!r}")

    monkeypatch.setattr(runs, "load_data", refuse)


def test_train_writes_every_artifact(tmp_path):
    result = train_run(TINY, tmp_path / "run", progress=False)
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.json", "metrics.json", "checkpoint.pt", "history.json", "reliability.png"} <= files
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics) >= {"accuracy", "nll", "ece", "brier", "history", "posterior_mean_accuracy", *CONFORMAL_KEYS}
    assert len(metrics["history"]) == 3 and metrics["accuracy"] == result.metrics["accuracy"]
    assert result.prediction.probs.shape == (8, 200, 2)
    assert RunConfig.load(tmp_path / "run" / "config.json") == TINY.resolved()  # the defaults filled, as trained


def test_evaluate_reproduces_the_test_metrics_and_scores_corruptions(tmp_path):
    trained = train_run(TINY, tmp_path / "run", progress=False).metrics
    rescored = evaluate_run(tmp_path / "run")
    # the draws are made under the run's seed both times: the same numbers (they differed by sampling noise)
    for key in ("accuracy", "nll", "ece", "brier", "posterior_mean_accuracy", "conformal_coverage"):
        assert rescored[key] == trained[key], key
    noisy = evaluate_run(tmp_path / "run", corruption="gaussian:1.0", num_samples=4)
    assert noisy["corruption"] == "gaussian:1.0" and noisy["accuracy"] < trained["accuracy"]
    assert (tmp_path / "run" / "evaluation-gaussian_1.0.json").is_file()
    assert (tmp_path / "run" / "reliability-gaussian_1.0.png").is_file()


def test_resume_refuses_a_checkpoint_from_another_config(tmp_path):
    train_run(replace(TINY, epochs=1), tmp_path / "b", progress=False)
    checkpoint = load_checkpoint(tmp_path / "b" / "checkpoint.pt")
    assert checkpoint["epoch"] == 1
    with pytest.raises(
        ValueError,
        match=r"different config \(activation: 'tanh' in the checkpoint, 'relu' now\); resume it with --activation "
        r"tanh, or pass --overwrite to start again$",
    ):
        train_run(replace(TINY, epochs=1, activation="relu"), tmp_path / "b", resume=True, progress=False)
    # two settings changed: one flag would not do, so none is named
    with pytest.raises(ValueError, match=r"resume it with the settings in its config.json, or pass --overwrite"):
        train_run(replace(TINY, epochs=1, activation="relu", lr=0.5), tmp_path / "b", resume=True, progress=False)


def test_resume_and_evaluate_take_option_strings_in_another_case(tmp_path):
    # "names ignore case" (pyro-bnn list): a run trained as TANH resumed as tanh was refused as "a different config"
    upper = replace(TINY, dataset="MOONS", model="TANH-SMALL", activation="TANH", guide="AUTONORMAL:0.05", epochs=1)
    train_run(upper, tmp_path / "run", progress=False)
    resumed = train_run(replace(TINY, epochs=2), tmp_path / "run", resume=True, progress=False)
    assert len(resumed.metrics["history"]) == 2
    # the run keeps the spelling it was trained with, in config.json and in its checkpoint
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    stored = json.loads(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["config"])
    for config in (written, stored):
        assert (config["dataset"], config["model"], config["activation"], config["epochs"]) == (
            "MOONS",
            "TANH-SMALL",
            "TANH",
            2,
        )
    # evaluate's check of config.json against the checkpoint: the same up to case is the same run
    (tmp_path / "run" / "config.json").write_text(
        json.dumps({**written, "activation": "tanh", "guide": "autonormal:0.05"})
    )
    _, config, _ = read_run(tmp_path / "run", num_samples=None, device=None)
    assert config.activation == "TANH"  # the checkpoint's, which says what was trained
    (tmp_path / "run" / "config.json").write_text(json.dumps({**written, "activation": "relu"}))
    with pytest.raises(ValueError, match=r"\(activation: 'TANH' in the checkpoint, 'relu' now\)"):
        read_run(tmp_path / "run", num_samples=None, device=None)


def test_resume_and_overwrite_exclude_each_other(tmp_path, no_data_loading):
    with pytest.raises(ValueError, match=r"^resume=True and overwrite=True exclude each other: resume continues"):
        train_run(TINY, tmp_path / "run", resume=True, overwrite=True, progress=False)
    assert not (tmp_path / "run").exists()


def test_resume_with_more_epochs_extends_a_finished_run(tmp_path):
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]  # noqa: E731
    straight = train_run(replace(TINY, epochs=2), tmp_path / "a", progress=False).metrics["history"]
    train_run(replace(TINY, epochs=1), tmp_path / "b", progress=False)
    extended = train_run(replace(TINY, epochs=2), tmp_path / "b", resume=True, progress=False).metrics["history"]
    assert len(extended) == 2 and strip(extended) == strip(straight)


def test_resume_with_the_same_config_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    strip = lambda h: [{k: v for k, v in r.items() if k != "time_s"} for r in h]  # noqa: E731
    straight = train_run(TINY, tmp_path / "a", progress=False).metrics["history"]

    from pyro_bnn.infer import Trainer

    real_fit = Trainer.fit

    def interrupted_fit(self, loader, epochs, **kwargs):
        real_fit(self, loader, 2, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "fit", interrupted_fit)
    with pytest.raises(KeyboardInterrupt):
        train_run(TINY, tmp_path / "b", progress=False)
    monkeypatch.setattr(Trainer, "fit", real_fit)
    resumed = train_run(TINY, tmp_path / "b", resume=True, progress=False).metrics["history"]
    assert strip(resumed) == strip(straight)


def test_a_resumed_runs_training_time_counts_the_epochs_before_the_resume(tmp_path, monkeypatch):
    # it counted only the last session: a run resumed after its last epoch recorded a few milliseconds
    from pyro_bnn.runs import runs

    train_run(replace(TINY, epochs=1), tmp_path / "b", progress=False)
    clock = iter([100.0, 103.0])  # the second session's start and end, 3 s apart
    monkeypatch.setattr(runs, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    metrics = train_run(replace(TINY, epochs=2), tmp_path / "b", resume=True, progress=False).metrics
    assert metrics["train_time_s"] == pytest.approx(3.0 + metrics["history"][0]["time_s"], abs=1e-12)


def test_an_existing_run_is_not_overwritten_silently(tmp_path):
    train_run(replace(TINY, epochs=1), tmp_path / "run", progress=False)
    with pytest.raises(FileExistsError, match="--resume to continue it or --overwrite"):
        train_run(TINY, tmp_path / "run", progress=False)
    train_run(TINY, tmp_path / "run", overwrite=True, progress=False)


@pytest.mark.parametrize("guide", ["bbb", "map", "mle", "mc-dropout:0.2"])
def test_every_guide_runs_through_the_same_pipeline(tmp_path, guide):
    config = replace(TINY, guide=guide, epochs=1)
    metrics = train_run(config, tmp_path / guide.replace(":", ""), progress=False).metrics
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["ece"] >= 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": "resnet"}, "unknown model 'resnet'"),
        ({"prior": "normal:0"}, "takes 0 or 2 numeric"),
        ({"guide": "svgd"}, "unknown guide 'svgd'"),
        ({"activation": "leaky:nan"}, "slope must be finite"),
        ({"dataset": "svhn"}, "unknown dataset name 'svhn'"),
        ({"kl_anneal": "linear"}, "takes 1 numeric"),
        ({"epochs": -1}, "epochs must be an int >= 1"),
        ({"epochs": 0}, "epochs must be an int >= 1, got 0"),
        ({"model": "lenet"}, "model 'lenet' cannot take dataset 'moons'"),
        ({"lr": 0}, "lr must be a finite number > 0"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
        ({"model": "mlp:0"}, "model 'mlp:0': hidden widths must be positive ints, got '0'"),
        ({"noise_scale": float("nan")}, "noise_scale must be a finite number > 0"),
        ({"noise_scale": 0}, "noise_scale must be a finite number > 0"),
        ({"dataset": "cubic", "patience": 2}, "'cubic' holds none out by default"),
    ],
)
def test_bad_configs_fail_before_any_work(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        train_run(replace(TINY, **change), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_demo_on_a_tiny_fake_fashion_mnist(tmp_path, make_tiny):
    data_dir = make_tiny(n_train=80, n_test=30).write(tmp_path / "fmnist")
    config = replace(
        DEMO_CONFIG, data_dir=str(data_dir), train_subset=None, val_size=20, epochs=1, num_samples=2, num_val_samples=2
    )
    results = run_demo(tmp_path / "demo", config=config, seeds=(0, 1), progress=False)
    assert list(results) == ["ReLU", "Leaky ReLU (-0.5)"]
    assert {"reliability.png", "training.png", "summary.json", "relu-seed0", "leaky-0.5-seed1"} <= {
        p.name for p in (tmp_path / "demo").iterdir()
    }
    for seed_runs in results.values():
        assert len(seed_runs) == 2
        for run in seed_runs:
            assert run.metrics["mean_posterior_sigma"] > 0 and run.metrics["mutual_information"] >= 0
            assert "mutual_information" in json.loads((run.out_dir / "metrics.json").read_text())
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["seeds"] == [0, 1]
    assert any(words in summary["verdict"] for words in ("better calibrated", "no clear winner", "Cannot be judged"))
    table = format_table(results, config)
    assert "ReLU" in table and "accuracy" in table and "MI (γ=0.5)" in table and "over 2 seeds" in table
    # the demo says what it does not show, and where the paper's experiment is
    assert "after 1 epoch on" in table and "does not show" in table  # epochs=1: one epoch
    assert "pyro-bnn reproduce leaky-calibration" in table and "pyro-bnn reproduce" in summary["scope"]
    # one seed has no spread: the table shows means alone, not a measured-looking "± 0.0000"
    single = format_table({label: runs[:1] for label, runs in results.items()}, config)
    assert "(one seed: no spread over seeds)" in single and "±" not in single.splitlines()[1]
    assert f"{results['ReLU'][0].metrics['accuracy']:.4f}" in single.splitlines()[1]


def _row(ece, sd, accuracy=0.8):
    return {
        "accuracy": (accuracy, 0.0),
        "ece": (ece, sd),
        "mean_posterior_sigma": (0.01, 0.0),
        "mutual_information": (0.1, 0),
    }


def test_demo_verdict_names_the_better_calibrated_activation_or_says_it_cannot_tell():
    from pyro_bnn.commands.demo import verdict

    clear = verdict({"ReLU": _row(0.05, 0.004), "Leaky": _row(0.02, 0.003)}, 2)
    assert clear.startswith("Leaky came out better calibrated at this scale: ECE 0.0200 vs 0.0500 (2 seeds)")
    close = verdict({"ReLU": _row(0.030, 0.004), "Leaky": _row(0.028, 0.003)}, 2)
    assert "Leaky had the lower mean ECE" in close and "no clear winner" in close
    single = verdict({"ReLU": _row(0.030, 0.0), "Leaky": _row(0.031, 0.0)}, 1)
    assert single.startswith("ReLU came out better calibrated") and "(1 seed, no spread to judge" in single
    untrained = verdict({"ReLU": _row(0.030, 0.004), "Leaky": _row(0.001, 0.001, accuracy=0.1)}, 2)
    assert untrained == (
        "Cannot be judged: not every network trained (test accuracy Leaky 0.1000, chance 0.10); run more epochs or "
        "a larger --train-subset."
    )


def test_cli_train_evaluate_and_list(tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["train", "--dataset", "moons", "--model", "tanh-small", "--activation", "leaky:-0.5", "--epochs", "1"]
    args += ["--num-samples", "4", "--num-val-samples", "2", "--device", "cpu", "--quiet", "--out", str(out)]
    assert main(args) == 0
    assert json.loads((out / "config.json").read_text())["activation"] == "leaky:-0.5"
    assert main(["evaluate", str(out), "--corruption", "salt-pepper:0.2", "--num-samples", "3"]) == 0
    assert main(["list"]) == 0
    assert "3fc" in capsys.readouterr().out


def test_cli_train_without_activation_trains_and_records_the_models_own(tmp_path, monkeypatch):
    """tanh-small is a tanh network: a run that names no activation trains tanh and its config.json says so (it
    trained ReLU and wrote "relu": the CLI's default overrode the model's); a ReLU model records "relu"."""
    from pyro_bnn.runs import run_model

    built = []

    def spy(*args, **kwargs):
        net = build_model(*args, **kwargs)
        built.append({type(m).__name__ for m in net.modules()})
        return net

    build_model = run_model.build_model
    monkeypatch.setattr(run_model, "build_model", spy)
    common = ["--epochs", "1", "--train-subset", "50", "--test-subset", "50", "--num-samples", "2"]
    common += ["--num-val-samples", "2", "--device", "cpu", "--quiet"]
    for model, activation, module, other in (("tanh-small", "tanh", "Tanh", "ReLU"), ("mlp:4", "relu", "ReLU", "Tanh")):
        out = tmp_path / model.replace(":", "")
        built.clear()
        assert main(["train", "--dataset", "moons", "--model", model, *common, "--out", str(out)]) == 0
        assert json.loads((out / "config.json").read_text())["activation"] == activation
        assert built and all(module in kinds and other not in kinds for kinds in built), built


def test_resume_of_a_run_whose_config_names_relu_goes_on_with_no_activation_given(tmp_path):
    """A folder written when the default was an explicit "relu" resumes under a config that leaves it to the model."""
    relu = replace(TINY, model="mlp:4", epochs=1, activation="relu")
    train_run(relu, tmp_path / "run", progress=False)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["activation"] == "relu"
    resumed = train_run(replace(relu, epochs=2, activation=None), tmp_path / "run", resume=True, progress=False)
    assert len(resumed.metrics["history"]) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--prior", "gaussian", "--out", "X"], "unknown prior 'gaussian'"),
        (["train", "--model", "vgg", "--out", "X"], "unknown model 'vgg'"),
        (["train", "--kl-scale", "paper", "--kl-weighting", "blundell", "--out", "X"], "does not combine"),
        (["train", "--guide", "autonormal:loc=prior", "--out", "X"], "unknown location init 'prior'"),
        (["evaluate", "nowhere"], "nowhere does not exist"),
        (["evaluate", "RUN", "--corruption", "blur:3"], "corruption"),
    ],
)
def test_cli_errors_are_one_clear_line(tmp_path, capsys, args, message):
    if "RUN" in args:
        train_run(replace(TINY, epochs=1), tmp_path / "RUN", progress=False)
    args = [str(tmp_path / a) if a in ("X", "nowhere", "RUN") else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_lets_errors_raised_during_training_keep_their_traceback(tmp_path, monkeypatch):
    from pyro_bnn.infer import Trainer

    def broken_fit(self, *args, **kwargs):
        raise ValueError("a bug inside training")

    monkeypatch.setattr(Trainer, "fit", broken_fit)
    args = ["train", "--dataset", "moons", "--model", "tanh-small", "--device", "cpu", "--quiet"]
    with pytest.raises(ValueError, match="a bug inside training"):
        main([*args, "--out", str(tmp_path / "run")])


def test_cli_reports_a_non_finite_loss_in_one_line(tmp_path, monkeypatch, capsys):
    from pyro_bnn.infer import NonFiniteLossError, Trainer

    def diverging_fit(self, *args, **kwargs):
        raise NonFiniteLossError("loss became nan at epoch 1, step 3")

    monkeypatch.setattr(Trainer, "fit", diverging_fit)
    args = ["train", "--dataset", "moons", "--model", "tanh-small", "--device", "cpu", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 1
    assert "training stopped: loss became nan" in capsys.readouterr().err


# ---- regression (cubic) ------------------------------------------------------------------------------


def test_regression_run_writes_metrics_and_the_predictive_figure(tmp_path):
    result = train_run(TINY_CUBIC, tmp_path / "run", progress=False)
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.json", "metrics.json", "checkpoint.pt", "history.json", "predictive.png"} <= files
    assert "reliability.png" not in files and result.figure == tmp_path / "run" / "predictive.png"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert REGRESSION_KEYS <= set(metrics) and "accuracy" not in metrics
    assert len(metrics["history"]) == 2 and 0.0 <= metrics["coverage"] <= 1.0
    prediction = result.prediction
    assert prediction.means.shape == (8, 801, 1) and prediction.targets.shape == (801, 1)
    assert float(prediction.noise_scale) == pytest.approx(1.0)
    # without figures: the same run and metrics, no png and no figure path
    bare = train_run(TINY_CUBIC, tmp_path / "bare", progress=False, figures=False)
    assert bare.figure is None and not list((tmp_path / "bare").glob("*.png"))
    bare_metrics = json.loads((tmp_path / "bare" / "metrics.json").read_text())
    for values in (metrics, bare_metrics):  # the times aside
        del values["train_time_s"]
        for epoch in values["history"]:
            del epoch["time_s"]
    assert bare_metrics == metrics
    # metrics.json holds exactly what regression_metrics says of the prediction
    expected = regression_metrics(prediction.means, prediction.noise_scale, prediction.targets)
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, rel=1e-12)


def test_regression_noise_scale_sets_the_likelihood(tmp_path):
    result = train_run(replace(TINY_CUBIC, epochs=1, noise_scale=0.25), tmp_path / "run", progress=False)
    assert float(result.prediction.noise_scale) == pytest.approx(0.25)


def test_regression_evaluate_rescores_the_run(tmp_path):
    trained = train_run(TINY_CUBIC, tmp_path / "run", progress=False).metrics
    (tmp_path / "run" / "predictive.png").unlink()
    rescored = evaluate_run(tmp_path / "run", num_samples=16)
    assert rescored["posterior_mean_rmse"] == trained["posterior_mean_rmse"]  # deterministic after the round trip
    assert rescored["rmse"] == pytest.approx(trained["rmse"], rel=0.2)
    assert json.loads((tmp_path / "run" / "evaluation.json").read_text())["num_samples"] == 16
    assert (tmp_path / "run" / "predictive.png").is_file()


def test_regression_early_stopping_watches_the_validation_nll(tmp_path):
    config = replace(TINY_CUBIC, val_size=0.25, patience=1, epochs=3)
    history = train_run(config, tmp_path / "run", progress=False).metrics["history"]
    assert {"val_rmse", "val_nll"} <= set(history[0]) and "val_accuracy" not in history[0]


def test_configs_written_before_noise_scale_still_load(tmp_path):
    values = json.loads(TINY.to_json())
    del values["noise_scale"]
    (tmp_path / "config.json").write_text(json.dumps(values))
    assert RunConfig.load(tmp_path / "config.json").noise_scale == 1.0


def test_cli_regression_train_and_evaluate(tmp_path, capsys):
    out = tmp_path / "cubic"
    args = ["train", "--dataset", "cubic", "--model", "mlp:16,16", "--epochs", "1", "--batch-size", "200"]
    args += ["--noise-scale", "0.5", "--num-samples", "4", "--device", "cpu", "--quiet", "--out", str(out)]
    assert main(args) == 0
    assert "predictive.png" in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert REGRESSION_KEYS <= set(metrics) and (out / "predictive.png").is_file()
    assert json.loads((out / "config.json").read_text())["noise_scale"] == 0.5
    assert main(["evaluate", str(out), "--num-samples", "3"]) == 0
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert {"rmse", "nll", "coverage", "posterior_mean_rmse"} <= set(evaluation)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--noise-scale", "0"], "--noise-scale must be a finite number > 0 (the Gaussian likelihood's standard "),
        (["--noise-scale", "nan"], "got nan"),
        (["--noise-scale=-inf"], "got -inf"),
        (["--model", "mlp:0"], "model 'mlp:0': hidden widths must be positive ints, got '0'; expected mlp:W1,W2"),
        (["--model", "mlp:a"], "model 'mlp:a': hidden widths must be positive ints, got 'a'"),
        (["--model", "3fc:10"], "model '3fc' takes no arguments after ':', got '3fc:10'"),
        (["--model", "mlp:" + "9" * 20], "hidden widths must be at most 2147483647 (2**31 - 1), got '99999"),
    ],
)
def test_cli_bad_regression_options_fail_before_data_loads(tmp_path, capsys, no_data_loading, args, message):
    out = tmp_path / "run"
    assert main(["train", "--dataset", "cubic", *args, "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_cli_refuses_a_corruption_for_a_regression_run(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    train_run(replace(TINY_CUBIC, epochs=1), run, progress=False)

    def refuse(config):
        raise AssertionError("data was loaded")

    monkeypatch.setattr(runs, "load_data", refuse)
    assert main(["evaluate", str(run), "--corruption", "gaussian:0.5"]) == 2
    err = capsys.readouterr().err
    assert "corruption 'gaussian:0.5' does not apply to a regression run (dataset 'cubic')" in err
    assert err.count("\n") == 1
    assert not list(run.glob("evaluation*"))


def test_cli_list_shows_cubic_and_the_mlp_string(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cubic (regression)" in out and "mlp[:W1,W2,...]" in out


def test_cli_paper_kl_scale_trains_the_unscaled_objective(tmp_path):
    out = tmp_path / "paper"
    args = ["train", "--dataset", "moons", "--model", "tanh-small", "--epochs", "1", "--kl-scale", "paper"]
    args += ["--num-samples", "4", "--num-val-samples", "2", "--device", "cpu", "--quiet", "--out", str(out)]
    assert main(args) == 0
    assert json.loads((out / "config.json").read_text())["kl_scale"] == "paper"
    history = json.loads((out / "history.json").read_text())
    # Unscaled: the data term is a sum over a minibatch of 128 rows (about 128 ln 2 = 89 nats at chance for two
    # classes), not over the 640 training points (443 nats at chance) that the N/B scaling would give.
    assert history[0]["data_term"] < 128 * 1.0
