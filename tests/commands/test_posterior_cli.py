"""``pyro-bnn laplace`` and ``pyro-bnn sample`` on tiny moons runs: the Laplace record around a saved MAP, the sampled
run folder, and ``pyro-bnn evaluate`` re-scoring that folder to the same numbers."""

import json
import math

import pytest
import torch

from pyro_bnn.cli import main
from pyro_bnn.runs import RunConfig, train_run

MAP_RUN = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="map",
    epochs=15,
    batch_size=64,
    num_samples=8,
    num_val_samples=2,
    device="cpu",
)

MODEL = ["--dataset", "moons", "--model", "tanh-small", "--activation", "tanh", "--batch-size", "64", "--device", "cpu"]


@pytest.fixture(scope="module")
def map_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("laplace") / "map"
    train_run(MAP_RUN, out, progress=False)
    return out


def test_laplace_writes_its_record_around_the_runs_own_map(map_run, capsys):
    assert main(["laplace", str(map_run)]) == 0
    summary = capsys.readouterr().out
    record = json.loads((map_run / "laplace-last_layer-kron.json").read_text())
    trained = json.loads((map_run / "metrics.json").read_text())
    # the approximation's mean is the run's MAP: its network scores exactly what train measured for the MAP
    assert record["map_metrics"]["accuracy"] == trained["accuracy"]
    assert record["map_metrics"]["nll"] == pytest.approx(trained["nll"], rel=1e-5)
    metrics = record["metrics"]
    assert all(math.isfinite(metrics[k]) for k in ("accuracy", "nll", "ece", "brier"))
    # last-layer probit only tempers each logit by its predictive variance: on 200 moons test points it may flip a
    # few near the boundary (0.03 = 6 points), while a posterior not centred at the MAP would miss by far more
    assert abs(metrics["accuracy"] - trained["accuracy"]) <= 0.03
    assert record["prior_precision"] > 0 and math.isfinite(record["log_marginal_likelihood"])
    assert record["options"] == {
        "subset": "last_layer",
        "structure": "kron",
        "predictive": "glm",
        "link": "probit",
        "tune_prior": True,
        "prior_structure": "scalar",
        "initial_prior_precision": 1.0,  # read from the run's N(0, 1) prior
    }
    assert record["num_samples"] is None  # the probit link draws nothing
    assert record["num_train"] == 640 and record["fit_time_s"] > 0
    assert "laplace-last_layer-kron.json" in summary and "prior precision" in summary and "accuracy" in summary


def test_laplace_options_reach_the_approximation(map_run, capsys):
    args = ["laplace", str(map_run), "--subset", "all", "--structure", "diag", "--predictive", "mc"]
    assert main([*args, "--no-tune", "--prior-precision", "2.5", "--num-samples", "16"]) == 0
    record = json.loads((map_run / "laplace-all-diag.json").read_text())
    assert record["prior_precision"] == 2.5  # --no-tune keeps the precision it was given, exactly
    assert record["options"]["predictive"] == "mc" and record["num_samples"] == 16
    assert record["options"]["link"] is None and record["options"]["initial_prior_precision"] == 2.5
    assert math.isfinite(record["metrics"]["nll"]) and math.isfinite(record["log_marginal_likelihood"])


def test_a_refit_of_the_same_file_is_refused_unless_overwrite_replaces_it(map_run, capsys):
    args = ["laplace", str(map_run), "--structure", "full"]
    assert main(args) == 0
    out_file = map_run / "laplace-last_layer-full.json"
    first = out_file.read_text()
    capsys.readouterr()
    assert main([*args, "--predictive", "mc"]) == 2  # another predictive, the same file name: refused
    err = capsys.readouterr().err
    assert f"{out_file} already holds a Laplace fit" in err and "pass --overwrite to replace it" in err
    assert out_file.read_text() == first
    assert main([*args, "--predictive", "mc", "--overwrite"]) == 0
    assert json.loads(out_file.read_text())["options"]["predictive"] == "mc"


def test_a_sampled_run_is_a_run_folder_that_evaluate_rescores(tmp_path, capsys):
    out = tmp_path / "sgld"
    sampler = ["--method", "sgld", "--step-size", "1e-3", "--draws", "10", "--burn-in", "100", "--thin", "2"]
    assert main(["sample", *MODEL, *sampler, "--chains", "2", "--seed", "3", "--quiet", "--out", str(out)]) == 0
    assert "sgld: 2 chains x 10 draws" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"config.json", "checkpoint.pt", "metrics.json", "reliability.png"}
    config = json.loads((out / "config.json").read_text())
    assert config["num_samples"] == 20 and config["seed"] == 3 and config["guide"] == RunConfig().resolved().guide
    state = torch.load(out / "checkpoint.pt", weights_only=True)  # plain tensors only
    assert state["sgmcmc"]["method"] == "sgld" and state["sgmcmc"]["steps_per_chain"] == 100 + 10 * 2
    assert state["draws"]["fc1.weight"].shape == (2, 10, 5, 2)  # (chain, draw, *site_shape): tanh-small is 2-5-5-2
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["sampler"]["num_chains"] == 2 and 0 < metrics["convergence"]["ess_bulk_min"]
    assert metrics["convergence"]["rhat_max"] >= 1.0 and metrics["accuracy"] > 0.8  # moons is nearly separable

    assert main(["evaluate", str(out)]) == 0
    evaluation = json.loads((out / "evaluation.json").read_text())
    # the same 20 draws, in the same order, through the same predict: the same numbers
    assert evaluation["accuracy"] == metrics["accuracy"] and evaluation["num_samples"] == 20
    assert evaluation["nll"] == pytest.approx(metrics["nll"], rel=1e-6)
    capsys.readouterr()
    assert main(["evaluate", str(out), "--num-samples", "40"]) == 2
    assert "--num-samples=40 but" in capsys.readouterr().err
    assert main(["laplace", str(out)]) == 2
    assert "holds SG-MCMC draws" in capsys.readouterr().err
    for part in (["--pruning"], ["--nuts"], ["--slices", "2"]):  # Normal scales or a median, which draws lack
        assert main(["diagnose", str(out), *part]) == 2
        assert "the run holds SG-MCMC draws" in capsys.readouterr().err


def test_a_step_size_that_blows_up_the_chains_is_one_line_not_a_traceback(tmp_path, capsys):
    """Logits that overflow make the log joint NaN: the sampler reports the divergence (the distribution's own
    argument check must not raise first)."""
    args = ["--dataset", "moons", "--model", "tanh-small", "--device", "cpu", "--method", "sgld", "--step-size", "1e3"]
    code = main(["sample", *args, "--draws", "20", "--chains", "2", "--out", str(tmp_path / "blown"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "diverged at step" in err and "smaller step_size" in err


def test_an_improper_prior_with_prior_starts_is_refused_before_data_loads(tmp_path, capsys, no_data):
    # The flat prior cannot be drawn from: the chains' default starts (--init prior) raised a traceback ending in
    # "the prior cannot be sampled (an improper prior?): pass init='network'" after the data was loaded.
    out = tmp_path / "flat"
    args = ["sample", *MODEL, "--prior", "flat", "--step-size", "1e-3", "--draws", "2", "--chains", "1"]
    assert main([*args, "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--prior flat is improper" in err and err.endswith("pass --init network"), err
    assert not out.exists()
