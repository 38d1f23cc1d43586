"""``pyro-bnn reproduce`` and ``pyro-bnn ensemble``: the listing, one-line errors before anything runs, and a tiny
ensemble trained and scored from the command line."""

from __future__ import annotations

import pytest

from pyro_bnn.cli import main
from pyro_bnn.reproduce import api, records, request


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a run started although the request could be refused first")

    monkeypatch.setattr(records, "train_run", refuse)


def test_list_names_every_experiment_on_one_line(capsys):
    assert main(["reproduce", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(api.experiment_names())
    assert [line.split()[0] for line in lines] == [
        "bayes-by-backprop",
        "bbb-fashion",
        "implicit-bnn",
        "leaky-calibration",
        "posterior-families",
        "priors",
    ]
    for line in lines:  # every experiment has these three; paper 000 also full-3fc
        profiles = line.rsplit("(profiles: ", 1)[1].rstrip(")").split(", ")
        assert {"quick", "cpu", "paper"} <= set(profiles), line


CASES = [
    (
        ["nope", "--out", "{tmp}/o"],
        "unknown experiment 'nope'; expected one of bayes-by-backprop, bbb-fashion, implicit",
    ),
    (["leaky-calibration", "--profile", "huge", "--out", "{tmp}/o"], "unknown profile 'huge'"),
    (["leaky-calibration", "--seeds", "0", "--out", "{tmp}/o"], "seeds must be an int >= 1, got 0"),
    (["leaky-calibration", "--executor", "slurm", "--out", "{tmp}/o"], "unknown executor 'slurm'"),
    (["leaky-calibration", "--workers", "0", "--out", "{tmp}/o"], "workers must be an int >= 1, got 0"),
    (["leaky-calibration", "--device", "tpu", "--out", "{tmp}/o"], "unknown device 'tpu'"),
    (["leaky-calibration"], "--out is required"),
    ([], "name an experiment"),
    (["leaky-calibration", "--report-only", "--out", "{tmp}/o"], "holds no leaky-calibration grid"),
    (["leaky-calibration", "--out", "{tmp}/file/o"], "not a folder"),
    (["leaky-calibration", "--out", "/proc/pyro-bnn-x/o"], "/proc/pyro-bnn-x/o"),
    (["leaky-calibration", "--out", "/sys/pyro-bnn-x"], "/sys/pyro-bnn-x"),
    (["leaky-calibration", "--out", ""], "--out"),
    (["leaky-calibration", "--out", "{tmp}/" + "a" * 300], "aaaa"),
    (
        ["leaky-calibration", "--data-dir", "mnsit=/data", "--out", "{tmp}/o"],
        "--data-dir mnsit=...: leaky-calibration (quick) reads no data set 'mnsit'; it reads fashion-mnist, mnist",
    ),
    (["bayes-by-backprop", "--data-dir", "foo=/data", "--out", "{tmp}/o"], "reads no data set 'foo'; it reads mnist"),
    (["leaky-calibration", "--threads", "0", "--out", "{tmp}/o"], "threads must be an int >= 1, got 0"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_requests_fail_with_one_line_before_any_run(tmp_path, capsys, nothing_runs, args, message):
    (tmp_path / "file").write_text("x")
    assert main(["reproduce", *(a.format(tmp=tmp_path) for a in args)]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("pyro-bnn reproduce: error:") and message in err
    assert not (tmp_path / "o").exists()


def test_another_profile_in_the_same_folder_is_refused(tmp_path, capsys, nothing_runs):
    out = tmp_path / "grid"
    out.mkdir()
    (out / api.STATE).write_text(
        '{"experiment": "leaky-calibration", "profile": "cpu", "seeds": 3, "command": "pyro-bnn reproduce"}'
    )
    assert main(["reproduce", "leaky-calibration", "--profile", "quick", "--out", str(out)]) == 2
    assert "holds the 'cpu' profile of 'leaky-calibration', not 'quick'" in capsys.readouterr().err


def test_fewer_seeds_than_the_grid_holds_are_refused(tmp_path, capsys, nothing_runs):
    """--seeds 1 on a grid of 3 rewrote its state to 1 and left the finished runs of seeds 1 and 2 out of its report
    without a word."""
    out = tmp_path / "grid"
    out.mkdir()
    (out / api.STATE).write_text(
        '{"experiment": "leaky-calibration", "profile": "quick", "seeds": 3, "command": "pyro-bnn reproduce"}'
    )
    assert main(["reproduce", "leaky-calibration", "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--seeds 1: {out} holds a grid of 3 seeds per cell" in err and len(err.strip().splitlines()) == 1
    assert '"seeds": 3' in (out / api.STATE).read_text()


def test_report_only_with_seeds_is_refused_and_the_report_left_as_it_was(tmp_path, capsys, nothing_runs):
    """--report-only --seeds 5 on a finished 3-seed grid rewrote its report as a 5-seed grid ("24 done, 0 failed,
    16 missing of 40", 16 runs "not run yet") while reproduce.json still said 3 seeds; the API as the CLI."""
    out = tmp_path / "grid"
    out.mkdir()
    (out / api.STATE).write_text(
        '{"experiment": "leaky-calibration", "profile": "quick", "seeds": 3, "command": "pyro-bnn reproduce"}'
    )
    (out / "report.md").write_text("the report")
    for seeds in ("5", "3"):
        assert main(["reproduce", "leaky-calibration", "--report-only", "--seeds", seeds, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"pyro-bnn reproduce: error: --report-only runs nothing: leave out --seeds {seeds} (the report covers the "
            f"3 seed(s) per cell {out} holds)"
        )
    with pytest.raises(ValueError, match="leave out --seeds 5"):
        api.reproduce("leaky-calibration", seeds=5, out=out, report_only=True)
    assert (out / "report.md").read_text() == "the report"


def test_a_missing_ray_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch, nothing_runs):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["reproduce", "leaky-calibration", "--executor", "ray", "--out", str(tmp_path / "o")]) == 2
    assert "pip install 'pyro-bnn[ray]'" in capsys.readouterr().err


def test_a_rerun_without_seeds_keeps_the_grid_it_resumes(tmp_path, monkeypatch):
    from pyro_bnn.reproduce.api import reproduce

    planned = []

    def fake_grid(specs, out, runner, **kwargs):
        planned.append(len({s.run_id for s in specs}))
        return []

    monkeypatch.setattr(api, "run_grid", fake_grid)
    monkeypatch.setattr(request, "check_data", lambda *args: None)
    monkeypatch.setattr(api, "write_report", lambda out, **kwargs: out / "report.md")
    out = tmp_path / "grid"
    reproduce("leaky-calibration", profile="quick", seeds=3, out=out, progress=False)
    reproduce("leaky-calibration", out=out, progress=False)  # no --seeds, no --profile: the folder's
    assert planned[0] == planned[1] > 11


def test_a_resume_typed_without_profile_or_seeds_records_the_command_of_the_grid_it_resumes(tmp_path, monkeypatch):
    """A rerun typed without --profile (as the docs say to resume) wrote its command as typed into reproduce.json and
    the report, `python -m pyro_bnn reproduce leaky-calibration --out gpucopy ...`, which into a new folder runs the
    quick profile. The profile, and seeds other than the profile's, are named now; other flags stay as typed."""
    import json
    import sys

    reported = []
    monkeypatch.setattr(api, "run_grid", lambda *args, **kwargs: [])
    monkeypatch.setattr(request, "check_data", lambda *args: None)
    monkeypatch.setattr(api, "write_report", lambda out, **kwargs: reported.append(kwargs["command"]) or out / "r")
    out = tmp_path / "grid"

    def typed(*args):
        monkeypatch.setattr(sys, "argv", ["pyro-bnn", "reproduce", "leaky-calibration", *args])
        assert main(sys.argv[1:]) == 0
        return json.loads((out / api.STATE).read_text())["command"]

    first = typed("--profile", "cpu", "--out", str(out), "--workers", "2", "--quiet")
    assert first == f"pyro-bnn reproduce leaky-calibration --profile cpu --out {out} --workers 2 --quiet"
    resumed = typed("--out", str(out), "--quiet")
    assert resumed == f"pyro-bnn reproduce leaky-calibration --out {out} --quiet --profile cpu" == reported[-1]
    assert (
        typed("--profile=cpu", "--out", str(out)) == f"pyro-bnn reproduce leaky-calibration --profile=cpu --out {out}"
    )
    assert typed("--out", str(out), "--seeds", "4") == (
        f"pyro-bnn reproduce leaky-calibration --out {out} --seeds 4 --profile cpu"
    )
    assert typed("--out", str(out)) == f"pyro-bnn reproduce leaky-calibration --out {out} --profile cpu --seeds 4"
    assert (
        typed("--out", str(out), "--report-only")
        == reported[-1]
        == (f"pyro-bnn reproduce leaky-calibration --out {out} --profile cpu --seeds 4")
    )  # a report-only rebuild keeps the command as recorded
    monkeypatch.setattr(sys, "argv", ["script.py"])  # a script calling reproduce: its own command line
    api.reproduce("leaky-calibration", out=out, progress=False)
    assert json.loads((out / api.STATE).read_text())["command"].endswith(" script.py")


def test_a_data_set_alias_names_its_folder_for_every_run(tmp_path, monkeypatch, capsys):
    """``--data-dir fmnist=PATH`` was refused ("reads no data set 'fmnist'; it reads fashion-mnist, mnist"), the
    alias train takes; it is Fashion-MNIST's folder now, for every run that reads it. One set given two folders is
    refused in one line."""
    planned = []

    def fake_grid(specs, out, runner, **kwargs):
        planned.extend(specs)
        return []

    monkeypatch.setattr(api, "run_grid", fake_grid)
    monkeypatch.setattr(request, "check_data", lambda *args: None)
    monkeypatch.setattr(api, "write_report", lambda out, **kwargs: out / "report.md")
    args = ["reproduce", "leaky-calibration", "--seeds", "1", "--quiet", "--out", str(tmp_path / "grid")]
    assert main([*args, "--data-dir", "fmnist=/data/fm", "--data-dir", "MNIST=/data/m"]) == 0
    folders = {spec.config.dataset: spec.config.data_dir for spec in planned}
    assert folders == {"fashion-mnist": "/data/fm", "mnist": "/data/m"}
    assert main([*args, "--data-dir", "fmnist=/data/fm", "--data-dir", "fashion-mnist=/data/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "fmnist=/data/fm and --data-dir fashion-mnist=/data/x both name fashion-mnist's folder; give it one"
    )


def test_missing_data_is_one_line_before_any_run(tmp_path, capsys, nothing_runs):
    # the tests' data sources are empty and offline: MNIST cannot be found anywhere
    assert main(["reproduce", "leaky-calibration", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("pyro-bnn reproduce: error:") and "mnist" in err.lower()


ENSEMBLE_CASES = [
    (["--members", "0"], "members must be an int >= 1, got 0"),
    (["--guide", "flat"], "an ensemble member must be a point network (guide mle or map), got guide 'flat'"),
    (["--executor", "spark"], "unknown executor 'spark'"),
]


@pytest.mark.parametrize("args, message", ENSEMBLE_CASES, ids=[" ".join(c[0]) for c in ENSEMBLE_CASES])
def test_bad_ensembles_fail_with_one_line_before_any_run(tmp_path, capsys, nothing_runs, args, message):
    out = tmp_path / "ens"
    assert main(["ensemble", "--dataset", "moons", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pyro-bnn ensemble: error: ") and message in err and "\n" not in err
    assert not out.exists()


def test_an_ensemble_trains_its_members_and_prints_the_mixtures_metrics(tmp_path, capsys):
    import json

    out = tmp_path / "ens"
    argv = ["ensemble", "--dataset", "moons", "--model", "mlp:8", "--epochs", "1", "--members", "2", "--device",
            "cpu", "--out", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    metrics = json.loads(printed[: printed.rindex("}") + 1])
    assert metrics["members"] == 2 and 0 <= metrics["accuracy"] <= 1
    results = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/result.json"))]
    assert sorted(r["spec"]["config"]["seed"] for r in results) == [0, 0, 1]  # two members and the ensemble
    assert {r["spec"]["config"]["data_seed"] for r in results} == {0}
    # the same options with more members grow the ensemble (its members kept); other options are refused, before
    # anything runs (they left the old ensemble's runs beside the new ones)
    folders = set((out / "runs").iterdir())
    assert main([*argv[:10], "auto", *argv[11:]]) == 0  # another device: the same runs (ids leave it out)
    assert set((out / "runs").iterdir()) == folders
    assert main([*argv[:8], "3", *argv[9:]]) == 0
    grown = set((out / "runs").iterdir())
    assert folders < grown and len(grown - folders) == 2  # the third member and the 3-member ensemble
    capsys.readouterr()
    assert main([*argv[:6], "2", *argv[7:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"pyro-bnn ensemble: error: {out} holds an ensemble of other options (epochs 1, here 2); its member runs "
        "would stay beside the new ones: pass another --out"
    )


def test_ensemble_help_gives_its_own_guide_and_warns_that_num_samples_is_unused(tmp_path, capsys, monkeypatch):
    # ensemble --help gave train's --guide help ("default flat:0.01"), a guide it refuses, and --num-samples 7 was
    # dropped without a word (the mixture's metrics take each member once; the run ids leave it out)
    from dataclasses import replace

    from pyro_bnn.cli import VERBS
    from pyro_bnn.reproduce.ensembles import ensemble_specs
    from pyro_bnn.runs import RunConfig, runs

    help_text = " ".join(VERBS["ensemble"].parser().format_help().split())
    assert "--guide GUIDE the members' point network: map or mle (default map)" in help_text
    assert "flat:0.01" not in help_text
    assert "--num-samples NUM_SAMPLES unused" in help_text
    import argparse

    from pyro_bnn.commands.train import add_train_arguments

    with pytest.raises(ValueError, match=r"helps names flags that add_train_arguments does not add: \['--guid'\]"):
        add_train_arguments(argparse.ArgumentParser(), helps={"--guid": "a typo"})

    def stop(*args, **kwargs):
        raise ValueError("stopped before the data")

    monkeypatch.setattr(runs, "load_data", stop)
    argv = ["ensemble", "--dataset", "moons", "--members", "2", "--out", str(tmp_path / "ens"), "--quiet"]
    assert main([*argv, "--num-samples", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "pyro-bnn ensemble: warning: --num-samples 7 is unused: the ensemble's test metrics take each member once",
        "pyro-bnn ensemble: error: stopped before the data",
    ]
    assert main(argv) == 2
    assert "warning" not in capsys.readouterr().err
    config = RunConfig(dataset="moons", model="mlp:8", epochs=1)
    ids = [spec.run_id for spec in ensemble_specs(config, 2)]
    assert [spec.run_id for spec in ensemble_specs(replace(config, num_samples=7), 2)] == ids


def test_an_ensemble_whose_member_seeds_pass_2_to_the_32_is_refused(tmp_path, capsys):
    # member i trains under seed + i: the last one's pyro.set_rng_seed(2**32) failed after the others had trained
    from pyro_bnn.reproduce.ensembles import ensemble_specs
    from pyro_bnn.runs import RunConfig

    assert len(ensemble_specs(RunConfig(dataset="moons", model="mlp:8", seed=2**32 - 2), 2)) == 3  # seeds .. 2**32-1
    argv = ["ensemble", "--dataset", "moons", "--members", "2", "--seed", "4294967295", "--out", tmp_path / "e"]
    assert main([str(a) for a in argv]) == 2
    assert capsys.readouterr().err.strip() == (
        "pyro-bnn ensemble: error: --seed=4294967295 with members=2 gives member seeds up to 4294967296, above "
        "4294967295 (2**32 - 1, the largest seed Pyro takes); pass a seed in [0, 4294967294]"
    )
    assert not (tmp_path / "e").exists()


def test_an_ensemble_is_refused_in_the_folder_of_a_grid_that_is_none(tmp_path):
    import json

    from pyro_bnn.reproduce.ensembles import check_same_ensemble, ensemble_specs
    from pyro_bnn.runs import RunConfig

    specs = ensemble_specs(RunConfig(dataset="moons", model="mlp:8", epochs=1), 2)
    check_same_ensemble(tmp_path, specs)  # no grid yet
    (tmp_path / "grid.json").write_text(json.dumps({"runs": [{"run_id": "a", "config": {"epochs": 1}}]}))
    with pytest.raises(ValueError, match=rf"^{tmp_path} holds a grid that is no ensemble \(grid.json\); pass another"):
        check_same_ensemble(tmp_path, specs)


def test_the_recorded_command_is_the_one_typed(monkeypatch):
    """``python -m pyro_bnn reproduce ...`` was recorded as ``python /abs/path/pyro_bnn/__main__.py reproduce ...``."""
    import sys
    from pathlib import Path

    import pyro_bnn

    package = Path(pyro_bnn.__file__).resolve().parent
    args = ["reproduce", "leaky-calibration", "--out", "a folder"]
    for argv0, expected in (
        (str(package / "__main__.py"), "python -m pyro_bnn reproduce leaky-calibration --out 'a folder'"),
        ("/venv/bin/pyro-bnn", "pyro-bnn reproduce leaky-calibration --out 'a folder'"),
        (str(package / "cli.py"), "pyro-bnn reproduce leaky-calibration --out 'a folder'"),
    ):
        monkeypatch.setattr(sys, "argv", [argv0, *args])
        assert request._this_command() == expected
    monkeypatch.setattr(sys, "argv", ["/elsewhere/__main__.py", *args])  # another package's __main__.py
    assert request._this_command().endswith(" /elsewhere/__main__.py reproduce leaky-calibration --out 'a folder'")
