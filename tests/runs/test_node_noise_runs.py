"""Node-noise runs end to end: classification and regression from the CLI, resume, evaluate, the optimiser."""

import json

import pytest

from pyro_bnn.cli import main
from pyro_bnn.infer import AutoELBO, ParamGroups
from pyro_bnn.infer.mixture_kl import MixtureMeanKL
from pyro_bnn.runs import RunConfig, evaluate_run, train_run
from pyro_bnn.runs.optimisation import run_objective, run_optimizer


def test_cli_node_noise_classification_run_writes_the_usual_folder(tmp_path, capsys):
    out = tmp_path / "nn"
    args = [
        "train",
        "--dataset",
        "moons",
        "--model",
        "mlp:16,16",
        "--node-noise",
        "--bias-noise",
        "--guide",
        "mixture:2",
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--num-samples",
        "6",
        "--num-val-samples",
        "2",
        "--lr-schedule",
        "decay:0.1",
        "--device",
        "cpu",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} >= {
        "config.json",
        "metrics.json",
        "checkpoint.pt",
        "history.json",
        "reliability.png",
    }
    metrics = json.loads((out / "metrics.json").read_text())
    # moons: 2 inputs, then 16 and 16 hidden units; one bias scalar per layer.
    assert (metrics["latent_input_nodes"], metrics["latent_bias_scalars"]) == (2 + 16 + 16, 3)
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["mean_posterior_sigma"] > 0
    config = json.loads((out / "config.json").read_text())
    assert (config["prior"], config["optimizer"], config["lr"], config["weight_decay"]) == (
        "normal:1,0.1",
        "sgd",
        0.05,
        5e-4,
    )
    rescored = evaluate_run(out, num_samples=6)
    assert rescored["accuracy"] == pytest.approx(metrics["accuracy"], abs=0.05)
    shifted = evaluate_run(out, num_samples=6, corruption="gaussian:0.5")  # corruptions apply unchanged
    assert 0.0 <= shifted["accuracy"] <= 1.0 and (out / "evaluation-gaussian_0.5.json").exists()
    history = json.loads((out / "history.json").read_text())
    n = metrics["num_train"]  # the rates are per example: lr / N
    assert history[-1]["lr_model"] < history[0]["lr_model"] == pytest.approx(0.05 / n)  # decay:0.1 from half-way
    assert history[-1]["lr_guide"] == history[0]["lr_guide"] == pytest.approx(0.3 / n)
    assert main([*args[:-2], "--epochs", "3", "--out", str(out), "--resume"]) == 0
    assert len(json.loads((out / "history.json").read_text())) == 3


def test_node_noise_regression_on_the_cubic_set(tmp_path):
    config = RunConfig(
        dataset="cubic",
        model="mlp:32,32",
        node_noise=True,
        guide="mixture:4",
        epochs=3,
        batch_size=1000,
        num_samples=8,
        num_val_samples=4,
        device="cpu",
        prior="normal:1,0.3",
        optimizer="adam",
        lr=0.01,
        lr_variational=0.05,
    )
    result = train_run(config, tmp_path / "cubic", progress=False)
    assert {"rmse", "nll", "coverage"} <= set(result.metrics)
    assert (tmp_path / "cubic" / "predictive.png").exists()
    assert result.prediction.means.shape[0] == 8


def test_run_optimizer_is_the_authors_sgd_per_example():
    config = RunConfig(node_noise=True).validate()
    optim = run_optimizer(config, dataset_size=1000)
    assert isinstance(optim, ParamGroups)
    assert optim.model["lr"] == pytest.approx(0.05 / 1000) and optim.model["weight_decay"] == pytest.approx(0.5)
    assert optim.guide["lr"] == pytest.approx(0.3 / 1000) and "weight_decay" not in optim.guide
    assert optim.model["nesterov"] and optim.model["momentum"] == 0.9
    # --elbo auto: AutoELBO picks the mixture-mean KL for the mixture guide when training starts, with the
    # run's samples_per_example; --elbo mixture builds it directly
    objective = run_objective(config)
    assert isinstance(objective, AutoELBO) and objective.mixture.samples_per_example == config.samples_per_example
    explicit = run_objective(RunConfig(node_noise=True, elbo="mixture", samples_per_example=3).validate())
    assert isinstance(explicit, MixtureMeanKL) and explicit.samples_per_example == 3
    assert isinstance(run_objective(RunConfig().validate()), AutoELBO)
    assert not isinstance(run_optimizer(RunConfig().validate(), 1000), ParamGroups)  # the plain default Adam
    weight_space_sgd = RunConfig(optimizer="sgd").validate()
    assert weight_space_sgd.lr_variational is None  # the guide's rate is lr: 0.3 is the node-noise default only
    assert run_optimizer(weight_space_sgd, 1000).guide["lr"] == pytest.approx(0.05 / 1000)


def test_a_run_written_before_the_node_noise_options_resumes(tmp_path):
    """Configs stored before these options existed lack them: a resume fills them at the weight-space defaults."""
    from pyro_bnn.infer import load_checkpoint, save_checkpoint

    config = RunConfig(
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
    out = tmp_path / "old"
    train_run(config, out, progress=False)
    state = load_checkpoint(out / "checkpoint.pt")
    stored = json.loads(state["config"])
    added = [
        "node_noise",
        "bias_noise",
        "samples_per_example",
        "optimizer",
        "lr_variational",
        "weight_decay",
        "lr_schedule",
        "lr_variational_schedule",
    ]
    for key in added:
        stored.pop(key)
    state["config"] = json.dumps(stored)
    save_checkpoint(state, out / "checkpoint.pt")
    (out / "config.json").write_text(json.dumps(stored))
    result = train_run(RunConfig(**{**stored, "epochs": 2}), out, resume=True, progress=False)
    assert result.metrics["epochs_run"] == 2
    assert evaluate_run(out, num_samples=4)["accuracy"] >= 0.0
