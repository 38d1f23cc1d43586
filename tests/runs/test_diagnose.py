"""``pyro-bnn diagnose`` end to end on a tiny run, and its bad input."""

import json

import pytest

from pyro_bnn.cli import main
from pyro_bnn.runs import RunConfig, runs, train_run

TINY = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="flat:rel=1",
    epochs=2,
    batch_size=64,
    lr=0.02,
    num_samples=4,
    num_val_samples=2,
    device="cpu",
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("diag") / "run"
    train_run(TINY, out, progress=False)
    return out


def test_diagnose_writes_every_part_and_its_figures(tiny_run, capsys):
    args = [
        "diagnose",
        str(tiny_run),
        "--slices",
        "2",
        "--slice-images",
        "200",
        "--pruning",
        "--shape",
        "--num-samples",
        "8",
        "--quiet",
    ]
    assert main(args) == 0
    report = json.loads((tiny_run / "diagnostics.json").read_text())
    assert set(report) == {"slices", "pruning", "shape"}
    assert set(report["slices"]["layers"]) == {"fc1.weight", "fc2.weight", "out.weight"}
    assert all(layer["sampled"] == 2 for layer in report["slices"]["layers"].values())
    assert [row["fraction"] for row in report["pruning"]["rows"]] == [0, 0.25, 0.5, 0.75, 0.95]
    assert report["pruning"]["num_samples"] == 8  # a later part at another count is told apart
    assert report["shape"]["loo"]["train_points"] > 0  # of the training set, which the posterior saw
    for figure in ("plateau_fractions.png", "slice.png", "pruning.png", "marginals.png", "weight_stats.png"):
        assert (tiny_run / figure).is_file(), figure
    # A second call with one part keeps the others in diagnostics.json.
    assert main(["diagnose", str(tiny_run), "--pruning", "--num-samples", "4", "--quiet"]) == 0
    assert set(json.loads((tiny_run / "diagnostics.json").read_text())) == {"slices", "pruning", "shape"}


def test_an_interrupted_diagnose_keeps_the_numbers_of_every_figure_it_wrote(tmp_path, monkeypatch, capsys):
    """Ctrl-C during NUTS left shape's marginals.png with no 'shape' in diagnostics.json (written only at the end)."""
    from pyro_bnn.runs import diagnose

    run = tmp_path / "run"
    train_run(TINY, run, progress=False)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(diagnose, "_nuts", interrupted)
    args = ["diagnose", str(run), "--shape", "--nuts", "--num-samples", "8", "--quiet"]
    assert main(args) == 130
    assert (run / "marginals.png").is_file()
    assert set(json.loads((run / "diagnostics.json").read_text())) == {"shape"}


@pytest.mark.slow
def test_diagnose_nuts_compares_the_guide_with_a_nuts_reference(tiny_run):
    # Slow (minutes on 2 cores): NUTS's tree depth grows to 2^10 leapfrog steps per draw during warm-up.
    assert (
        main(
            [
                "diagnose",
                str(tiny_run),
                "--nuts",
                "--num-samples",
                "8",
                "--nuts-chains",
                "2",
                "--nuts-samples",
                "10",
                "--nuts-warmup",
                "10",
                "--quiet",
            ]
        )
        == 0
    )
    report = json.loads((tiny_run / "diagnostics.json").read_text())["nuts"]
    assert report["chains"] == 2 and report["predictive_distance"]["kl"] >= 0
    assert 0.0 <= report["accuracy"]["nuts"] <= 1.0


def _no_data(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("data was loaded although the option could be checked without it")

    monkeypatch.setattr(runs, "load_data", refuse)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "nothing to diagnose"),
        (["--slices", "0"], "error: --slices must be an int >= 1, got 0"),
        (["--pruning", "--num-samples", "0"], "error: --num-samples must be an int >= 1, got 0"),
        (["--nuts", "--nuts-chains", "0"], "error: --nuts-chains must be an int >= 1, got 0"),
        (["--shape", "--slice-images", "0"], "error: --slice-images must be an int >= 1, got 0"),
        # the seed was checked by the pruning part, after the slices had run and been written to diagnostics.json
        (["--slices", "2", "--shape", "--pruning", "--seed", "-1"], "error: --seed must be an int >= 0, got -1"),
        # above 2**32 - 1 torch.manual_seed or pyro.set_rng_seed raised after the data had loaded
        (
            ["--shape", "--seed", "99999999999999999999"],
            "pyro-bnn diagnose: error: --seed must be an int in [0, 2**32 - 1 = 4294967295] (the seeds Pyro takes), "
            "got 99999999999999999999",
        ),
        # NUTS chain c runs under seed * 1000 + c: 4294968 * 1000 is above 2**32 - 1 = 4294967295
        (
            ["--nuts", "--nuts-chains", "2", "--seed", "4294968"],
            "pyro-bnn diagnose: error: --seed=4294968 is too large for 2 NUTS chains, which run under seed * 1000 + "
            "chain (at most 4294967295); pass a seed in [0, 4294967]",
        ),
    ],
)
def test_diagnose_bad_options_fail_in_one_line_before_data(tiny_run, capsys, monkeypatch, extra, message):
    _no_data(monkeypatch)
    assert main(["diagnose", str(tiny_run), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and message in err, err


def test_diagnose_refuses_pruning_of_a_deterministic_run_before_data(tmp_path, capsys, monkeypatch):
    out = tmp_path / "mle"
    train_run(RunConfig(**{**vars(TINY), "guide": "mle", "epochs": 1}), out, progress=False)
    _no_data(monkeypatch)
    assert main(["diagnose", str(out), "--pruning"]) == 2
    err = capsys.readouterr().err
    assert "need a guide with a Normal scale per weight" in err and "'mle'" in err


def test_diagnose_refuses_nuts_on_a_large_network(tmp_path, capsys):
    out = tmp_path / "big"
    config = RunConfig(**{**vars(TINY), "model": "mlp:128,128", "epochs": 1})
    train_run(config, out, progress=False)
    assert main(["diagnose", str(out), "--nuts"]) == 2
    assert "at most 5000 random scalars" in capsys.readouterr().err


def test_diagnose_names_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path), "--pruning"]) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_diagnose_takes_its_default_sample_count_for_a_mixture_of_three(tmp_path, capsys):
    # --num-samples defaulted to 100, which a mixture:3 run refused ("not a multiple of 3 ... leave it unset")
    from dataclasses import replace

    config = replace(TINY, model="mlp:5", guide="mixture:3", node_noise=True, num_samples=None, num_val_samples=None)
    train_run(replace(config, epochs=1), tmp_path / "run", progress=False)
    assert main(["diagnose", str(tmp_path / "run"), "--shape", "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "diagnostics.json").read_text())["shape"]["num_samples"] == 102


def test_diagnose_shape_of_a_sampled_run_takes_all_its_draws_by_default(tmp_path, capsys):
    # --num-samples defaulted to 100, which a run of 2 chains x 10 draws refused ("--num-samples=100 but ... holds
    # 20 posterior draws") though none was given; an explicit count above the draws is still refused
    out = tmp_path / "sampled"
    model = ["--dataset", "moons", "--model", "tanh-small", "--activation", "tanh", "--device", "cpu"]
    sampler = ["--step-size", "1e-3", "--draws", "10", "--chains", "2", "--burn-in", "20", "--quiet"]
    assert main(["sample", *model, *sampler, "--out", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["diagnose", str(out), "--shape", "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((out / "diagnostics.json").read_text())["shape"]["num_samples"] == 20
    capsys.readouterr()
    assert main(["diagnose", str(out), "--shape", "--num-samples", "21"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--num-samples=21 but" in err and "holds 20 posterior draws; ask for at most 20" in err, err


def test_the_nuts_report_counts_the_r_hats_arviz_could_not_tell():
    from pyro_bnn.reproduce.studies.nuts_reference.report import _scalars

    assert _scalars({"num_scalars": 12, "num_rhat_nan": 3}) == "12 (3 undefined)"
    assert _scalars({"num_scalars": 12, "num_rhat_nan": 0}) == 12
    assert _scalars({"num_scalars": 12}) == 12  # written before they were counted


def test_diagnose_help_describes_the_verb_and_every_argument():
    # diagnose --help had no description, and run_dir, --seed, --device and --quiet no help text
    import argparse

    from pyro_bnn.cli import VERBS

    verb = VERBS["diagnose"]
    assert verb.description and "RUN_DIR/diagnostics.json" in verb.description
    parser = verb.parser()
    bare = [a.dest for a in parser._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert bare == []
    text = " ".join(parser.format_help().split())
    assert "run_dir a folder written by 'pyro-bnn train' or 'pyro-bnn sample'" in text
    assert "--seed SEED seeds the sliced weights and the posterior draws (default 0)" in text


def test_diagnose_shape_stores_the_signed_mean_kurtosis_of_a_bimodal_posterior(tiny_run, monkeypatch, capsys):
    # diagnostics.json held the mean |excess kurtosis| over scalars, so two separated modes (true -2 everywhere)
    # read +2, heavy-tailed; draws of two chains at loc +- 1 are two equal spikes: skewness 0, excess kurtosis
    # m4 / m2^2 - 3 = 1 - 3 = -2 exactly
    import torch

    from pyro_bnn.diagnostics import arviz_export

    real = arviz_export.draw_samples

    def two_spikes(bnn, source, num_samples, **kwargs):
        drawn = real(bnn, source, num_samples, **kwargs)  # {site: (1, num_samples, *shape)}, for the shapes
        spikes = {}
        for site, value in drawn.items():
            sign = torch.tensor([1.0, -1.0]).reshape(2, 1, *[1] * (value.dim() - 2))
            spikes[site] = value.mean((0, 1)) + sign * torch.ones(2, num_samples // 2, *value.shape[2:])
        return spikes

    monkeypatch.setattr(arviz_export, "draw_samples", two_spikes)
    assert main(["diagnose", str(tiny_run), "--shape", "--num-samples", "8", "--quiet"]) == 0, capsys.readouterr().err
    normality = json.loads((tiny_run / "diagnostics.json").read_text())["shape"]["normality"]
    assert set(normality) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "out.weight", "out.bias"}
    for site, score in normality.items():
        assert score["excess_kurtosis"] == pytest.approx(-2.0, abs=1e-9), site  # was +2.0
        assert set(score) == {"skewness", "excess_kurtosis", "ks_distance", "mean_abs_skewness"}, site
        assert score["skewness"] == pytest.approx(0.0, abs=1e-9) and score["mean_abs_skewness"] < 1e-9, site
        assert score["ks_distance"] == pytest.approx(0.3413, abs=1e-4), site  # Phi(1) - 1/2 at the lower spike


def test_the_normality_summary_keeps_the_sign_and_the_mean_absolute_skewness():
    # draws (0, 0, 0, 3) have skewness m3 / m2^1.5 = 2.53125 / 1.6875^1.5 = 2 / sqrt(3); their mirror -2 / sqrt(3)
    import math

    import torch

    from pyro_bnn.diagnostics.normality import normality_scores
    from pyro_bnn.runs.diagnose import _normality_summary

    draws = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [3.0, -3.0]])  # (S, 2 scalars)
    summary = _normality_summary(normality_scores({"w": draws}, sample_dims=1)["w"])
    assert summary["skewness"] == pytest.approx(0.0, abs=1e-12)
    assert summary["mean_abs_skewness"] == pytest.approx(2 / math.sqrt(3), rel=1e-12)
    assert summary["excess_kurtosis"] == pytest.approx(-2 / 3, rel=1e-12)  # m4 / m2^2 - 3 = 7/3 - 3


def test_diagnose_refuses_nuts_on_a_regression_run_before_sampling(tmp_path, capsys, monkeypatch):
    # NUTS ran (minutes at full size), then the comparison of class probabilities ended in AttributeError:
    # 'NoneType' object has no attribute 'shape'
    from pyro_bnn.diagnostics import nuts

    out = tmp_path / "cubic"
    train_run(RunConfig(**{**vars(TINY), "dataset": "cubic", "epochs": 1}), out, progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("NUTS ran although the run could be refused from its config")

    monkeypatch.setattr(nuts, "run_nuts", refuse)
    _no_data(monkeypatch)
    assert main(["diagnose", str(out), "--shape", "--nuts", "--nuts-chains", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "pyro-bnn diagnose: error: --nuts compares class probabilities (predictive KL, W1, accuracy), so it needs a "
        "classifier, but 'cubic' is a regression run"
    )
    assert not (out / "diagnostics.json").exists()  # refused before --shape ran too
