"""Run folders trained on another machine (a GPU's copy of the tree) merging into a grid: which are taken, which are
left out and why, the commit a copy without git declares, and the device script's parsing and packing."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pyro_bnn.reproduce import merge
from pyro_bnn.reproduce import records as records_module
from pyro_bnn.reproduce.merge import declared_code_problem, merge_runs
from pyro_bnn.reproduce.planned import RunRecord, Status
from pyro_bnn.reproduce.records import read_record, write_record

sys.path.insert(0, str(Path(__file__).parent))
from test_grid import tiny_specs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _write(runs: Path, spec, status=Status.DONE, code="pyro_bnn 0.1.0 at 1234567", training="fp", accuracy=0.9):
    record = RunRecord(spec, status, {"accuracy": accuracy}, reason="" if status is Status.DONE else "boom", code=code,
                       training_code=training)  # fmt: skip
    write_record(runs / spec.run_id, record)


@pytest.fixture
def committed_fp(monkeypatch):
    """Every commit's training code is ``fp`` (a checkout that holds the commit the runs name)."""
    monkeypatch.setattr(merge, "training_code_at", lambda commit: "fp")


def test_done_runs_of_the_plan_merge_and_the_rest_say_why(tmp_path, committed_fp):
    specs = tiny_specs(6)
    source, out = tmp_path / "back", tmp_path / "grid"
    _write(source / "runs", specs[0])  # merges
    _write(source / "runs", specs[1], status=Status.FAILED)  # failed there
    _write(source / "runs", specs[2])  # already done here, with another accuracy
    _write(out / "runs", specs[2], accuracy=0.5)
    _write(source / "runs", specs[5])  # already done here, the same record
    _write(out / "runs", specs[5])
    _write(source / "runs", specs[3])  # replaces a failed run here
    _write(out / "runs", specs[3], status=Status.FAILED)
    _write(source / "runs", specs[4], training="other")  # not the commit it names
    (source / "runs" / "stray-run-0123456789").mkdir()
    summary = merge_runs(source, out, specs)
    assert sorted(summary.merged) == sorted([specs[0].run_id, specs[3].run_id])
    assert summary.left_out[specs[1].run_id] == "failed there: boom"
    assert summary.left_out[specs[2].run_id] == (
        "already done here, with different results (kept this one's: accuracy 0.5 here, 0.9 there)"
    )
    assert summary.left_out[specs[5].run_id] == "already done here"  # an identical copy
    assert summary.differing == [specs[2].run_id]
    assert "whose training code is fp, but it ran other" in summary.left_out[specs[4].run_id]
    assert summary.left_out["stray-run-0123456789"] == "not a run of this grid's plan"
    runs = out / "runs"
    assert read_record(runs, specs[0]).status is Status.DONE
    assert read_record(runs, specs[2]).metrics["accuracy"] == 0.5  # a done run here is never overwritten
    assert read_record(runs, specs[3]).status is Status.DONE
    assert read_record(runs, specs[4]).status is Status.MISSING
    assert not list(runs.glob(".*merging"))
    described = summary.describe().splitlines()
    assert described[0] == "merged 2 run(s); left out 5, 1 of them done here with different results (this grid's kept)"
    assert f"  {specs[2].run_id}: already done here, with different results (kept this one's: accuracy 0.5 here" in (
        "\n".join(described)
    )


def test_copies_whose_metrics_agree_are_not_called_different_even_where_both_are_nan():
    nan = float("nan")
    assert merge.metric_difference({"accuracy": 0.9, "nll": nan}, {"nll": nan, "accuracy": 0.9}) is None
    assert merge.metric_difference({"accuracy": 0.9, "ece": 0.1}, {"accuracy": 0.8, "ece": 0.2}) == (
        "accuracy 0.9 here, 0.8 there, and 1 other metric(s)"
    )
    assert merge.metric_difference({"accuracy": 0.9}, {}) == "accuracy 0.9 here, missing there"
    # Where and how fast a copy ran is no difference in what it scored (every copy trained elsewhere differs there).
    here = {"accuracy": 0.9, "train_time_s": 135.2, "device": "cuda", "device_name": "H200", "plateau_seconds": 3.0}
    there = {"accuracy": 0.9, "train_time_s": 138.2, "device": "cpu", "batched_runs": 8, "plateau_seconds": 9.0}
    assert merge.metric_difference(here, there) is None


def test_a_folder_of_run_folders_merges_as_a_grid_folder_does(tmp_path, committed_fp):
    specs = tiny_specs(1)
    _write(tmp_path / "flat", specs[0])
    assert merge_runs(tmp_path / "flat", tmp_path / "grid", specs).merged == [specs[0].run_id]
    with pytest.raises(ValueError, match="not a folder"):
        merge_runs(tmp_path / "nowhere", tmp_path / "grid", specs)


def test_declared_code_is_checked_only_where_this_checkout_holds_the_commit(monkeypatch):
    spec = tiny_specs(1)[0]
    record = RunRecord(spec, Status.DONE, code="pyro_bnn 0.1.0 at 1234567", training_code="mine")
    monkeypatch.setattr(merge, "training_code_at", lambda commit: None)  # a commit this checkout lacks
    assert declared_code_problem(record) is None
    monkeypatch.setattr(merge, "training_code_at", lambda commit: "mine")
    assert declared_code_problem(record) is None
    monkeypatch.setattr(merge, "training_code_at", lambda commit: "theirs")
    assert "1234567" in declared_code_problem(record)
    dirty = RunRecord(spec, Status.DONE, code="pyro_bnn 0.1.0 at 1234567+dirty", training_code="mine")
    assert declared_code_problem(dirty) is None  # a dirty run is counted by nothing anyway (code_state.counted)


def test_a_copy_names_the_commit_it_declares_even_where_git_names_another(monkeypatch):
    monkeypatch.setattr(records_module, "_inherited_code", ("", ""))
    monkeypatch.setenv(records_module.DECLARED_COMMIT_ENV, "0123456789abcdef0123")
    records_module.code_version.cache_clear()
    try:
        assert records_module.code_version().endswith(" at 0123456789ab")  # this test runs in a git checkout
    finally:
        records_module.code_version.cache_clear()


def test_a_copy_without_git_names_the_commit_it_declares(tmp_path, monkeypatch):
    monkeypatch.setattr(records_module, "_inherited_code", ("", ""))
    monkeypatch.setattr(records_module.pyro_bnn, "__file__", str(tmp_path / "pyro_bnn" / "__init__.py"))
    for declared, expected in (("", "(not a git checkout)"), ("not-a-sha", "(not a git checkout)"),
                               ("0123456789abcdef0123", "at 0123456789ab")):  # fmt: skip
        monkeypatch.setenv(records_module.DECLARED_COMMIT_ENV, declared)
        records_module.code_version.cache_clear()
        assert records_module.code_version().endswith(expected)
    records_module.code_version.cache_clear()


def test_a_declared_commit_is_dirty_where_this_checkout_holds_it_and_the_files_differ(monkeypatch):
    monkeypatch.setattr(records_module, "_inherited_code", ("", ""))
    monkeypatch.setenv(records_module.DECLARED_COMMIT_ENV, "0123456789abcdef0123")
    monkeypatch.setattr(records_module, "current_training_code", lambda: "files")
    for committed, suffix in (("files", ""), ("other", "+dirty"), (None, "")):  # None: a commit this checkout lacks
        monkeypatch.setattr(records_module, "training_code_at", lambda commit, value=committed: value)
        records_module.code_version.cache_clear()
        assert records_module.code_version().endswith(f" at 0123456789ab{suffix}"), committed
    records_module.code_version.cache_clear()


def test_the_merge_command_creates_the_grid_from_the_copied_state_and_writes_its_report(tmp_path, committed_fp):
    from pyro_bnn.reproduce.api import merge as merge_command

    grid = tmp_path / "back" / "leaky-calibration-quick"
    specs = _quick_specs()
    _write(grid / "runs", specs[0])
    command = "pyro-bnn reproduce leaky-calibration --profile quick --out /tmp/device-grids/x --device cuda"
    (grid / "reproduce.json").write_text(
        json.dumps({"experiment": "leaky-calibration", "profile": "quick", "seeds": 1, "command": command})
    )
    out = tmp_path / "results" / "leaky"
    summary, report = merge_command("leaky-calibration", grid, out=out)
    assert summary.merged == [specs[0].run_id]
    state = json.loads((out / "reproduce.json").read_text())
    assert state["profile"] == "quick" and f"--out {out}" in state["command"] and "--device cuda" in state["command"]
    text = report.read_text()
    assert "Runs: 1 done" in text and "Devices of the runs done: not recorded: 1" in text
    with pytest.raises(ValueError, match="not 'implicit-bnn'"):
        merge_command("implicit-bnn", grid, out=tmp_path / "other")


def _quick_specs():
    from pyro_bnn.reproduce.api import get_experiment

    experiment = get_experiment("leaky-calibration")
    return experiment.plan(experiment.profiles["quick"], 1, {})


def _device_grid():
    spec = importlib.util.spec_from_file_location("device_grid", ROOT / "bench" / "device_grid.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_device_script_reads_parts_and_packs_no_checkpoint(tmp_path):
    device_grid = _device_grid()
    assert device_grid.parse_part("leaky-calibration:gpu:8") == ("leaky-calibration", "gpu", 8)
    assert device_grid.parse_part("priors:gpu") == ("priors", "gpu", 1)
    for bad, why in (("leaky-calibration", "expected EXPERIMENT"), ("a:b:c", "WORKERS must be an int"),
                     ("a:b:0", "WORKERS must be >= 1"), (":gpu", "expected EXPERIMENT")):  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            device_grid.parse_part(bad)
    grid = tmp_path / "leaky-calibration-gpu"
    spec = _quick_specs()[0]
    _write(grid / "runs", spec)
    for name in ("checkpoint.pt", "reliability.png", "weight_stats.json", "history.json"):
        (grid / "runs" / spec.run_id / name).write_text("x")
    (grid / ".grid.lock").write_text("")
    assert device_grid.pack(grid, tmp_path / "g.tar.gz") == 2
    with tarfile.open(tmp_path / "g.tar.gz") as tar:
        names = sorted(tar.getnames())
    assert names == [f"leaky-calibration-gpu/runs/{spec.run_id}/{f}" for f in ("history.json", "result.json")]
    rows = device_grid.run_times(grid)
    assert rows == [(spec.label, "done", 0.0, None, 0.9)]
    # Runs stopped part-way (no record) are listed too, with the epochs they finished and those epochs' seconds.
    cut = grid / "runs" / "lenet4-vi-s2-1938218f17"
    cut.mkdir()
    (cut / "history.json").write_text(json.dumps([{"epoch": 1, "time_s": 4.5}, {"epoch": 2, "time_s": 5.25}]))
    (grid / "runs" / "lenet8-vi-s0-0123456789").mkdir()  # started, no epoch finished
    assert device_grid.run_times(grid) == [
        (spec.label, "done", 0.0, None, 0.9),
        ("lenet4-vi-s2", "cut off", 9.75, 2, None),
        ("lenet8-vi-s0", "cut off", 0.0, None, None),
    ]
    tiny = tmp_path / "data"
    (tiny / "mnist").mkdir(parents=True)
    assert device_grid.data_dirs_for("leaky-calibration", "gpu", tiny) == ["--data-dir", f"mnist={tiny / 'mnist'}"]
    assert device_grid.data_dirs_for("leaky-calibration", "gpu", tmp_path / "none") == []
    # inside the repository the folder is given relative to its root (the runs record no machine's absolute path)
    assert device_grid.data_folder(str(ROOT / ".devdata")) == Path(".devdata")
    assert device_grid.data_folder(str(tmp_path)) == tmp_path and device_grid.data_folder("") is None


def test_the_device_script_refuses_a_limit_that_leaves_no_time_to_pack():
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "device_grid.py"), "--limit-s", "10", "leaky-calibration:gpu"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "--limit-s must exceed 25" in result.stderr


def test_a_record_of_a_cuda_run_names_the_card_and_the_report_counts_runs_per_device(monkeypatch, tmp_path):
    monkeypatch.setattr(records_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(records_module.torch.cuda, "get_device_name", lambda device: f"Card of {device}")
    assert records_module._device_name("cuda") == {"device_name": "Card of cuda"}
    assert records_module._device_name("cpu") == {} and records_module._device_name(None) == {}
    from pyro_bnn.reproduce.report import _devices_line

    specs = tiny_specs(3)
    done = [
        RunRecord(specs[0], Status.DONE, {"device": "cuda", "device_name": "H"}),
        RunRecord(specs[1], Status.DONE, {"device": "cuda", "device_name": "H"}),
        RunRecord(specs[2], Status.DONE, {"device": "cpu"}),
    ]
    assert _devices_line(done) == "cpu: 1, cuda (H): 2"


def test_merge_refuses_training_options_and_is_not_taken_for_rescore(tmp_path, capsys):
    from pyro_bnn.cli import main

    for extra, flag in ((["--workers", "0"], "--workers"), (["--rescore"], "--rescore"), (["--seeds", "2"], "--seeds")):
        code = main(["reproduce", "leaky-calibration", "--out", str(tmp_path / "g"), "--merge", str(tmp_path), *extra])
        assert code != 0
        assert f"leave out {flag}" in capsys.readouterr().err


def test_a_merge_into_a_new_grid_at_another_profile_writes_that_profile_s_command(tmp_path, committed_fp):
    from pyro_bnn.reproduce.api import _with_out
    from pyro_bnn.reproduce.api import merge as merge_command

    grid = tmp_path / "back"
    (grid / "runs").mkdir(parents=True)
    (grid / "reproduce.json").write_text(
        json.dumps({"experiment": "leaky-calibration", "profile": "gpu", "seeds": 3, "command": "pyro-bnn x"})
    )
    out = tmp_path / "quick"
    merge_command("leaky-calibration", grid, out=out, profile="quick")
    state = json.loads((out / "reproduce.json").read_text())
    assert (
        state["seeds"] == 1 and state["command"] == f"pyro-bnn reproduce leaky-calibration --profile quick --out {out}"
    )
    assert _with_out("pyro-bnn reproduce x --out=/a --seeds 2", Path("b")) == "pyro-bnn reproduce x --out=b --seeds 2"


def test_runs_of_more_seeds_than_the_grid_plans_are_taken_and_the_grid_plans_them_from_then_on(
    tmp_path, committed_fp, monkeypatch
):
    """A grid at 1 seed and a copy of the same grid run at 3: the merge took seed 0 and left seeds 1 and 2 out as
    'not a run of this grid's plan' (and --seeds was refused with --merge)."""
    from pyro_bnn.reproduce import api
    from pyro_bnn.reproduce.api import _with_seeds, get_experiment
    from pyro_bnn.reproduce.api import merge as merge_command

    monkeypatch.setattr(
        api, "reproduce", lambda *args, **kwargs: tmp_path / "report.md"
    )  # the records hold no measures

    experiment = get_experiment("leaky-calibration")
    three = experiment.plan(experiment.profiles["quick"], 3, {})
    source = tmp_path / "back"
    for spec in three:
        _write(source / "runs", spec)
    out = tmp_path / "grid"
    out.mkdir()
    command = f"pyro-bnn reproduce leaky-calibration --profile quick --out {out}"
    (out / "reproduce.json").write_text(
        json.dumps({"experiment": "leaky-calibration", "profile": "quick", "seeds": 1, "command": command})
    )
    summary, _ = merge_command("leaky-calibration", source, out=out)
    assert set(summary.merged) == {spec.run_id for spec in three} and not summary.left_out
    assert summary.seeds == (1, 3) and "the grid now plans 3 seeds per cell (it planned 1)" in summary.describe()
    state = json.loads((out / "reproduce.json").read_text())
    assert state["seeds"] == 3 and state["command"] == f"{command} --seeds 3"
    assert _with_seeds("pyro-bnn reproduce x --seeds 2 --out o", 5) == "pyro-bnn reproduce x --seeds 5 --out o"


def test_runs_not_done_there_do_not_make_the_grid_plan_more_seeds(tmp_path, committed_fp, monkeypatch):
    """A failed or part-way run of seed 1 in the copy merges nothing, so the 1-seed grid stays at 1 seed (it grew
    to 2 and queued 14 runs to train, and --seeds 1 was then refused)."""
    from pyro_bnn.reproduce import api
    from pyro_bnn.reproduce.api import get_experiment
    from pyro_bnn.reproduce.api import merge as merge_command

    monkeypatch.setattr(api, "reproduce", lambda *args, **kwargs: tmp_path / "report.md")
    experiment = get_experiment("leaky-calibration")
    one = experiment.plan(experiment.profiles["quick"], 1, {})
    later = [s for s in experiment.plan(experiment.profiles["quick"], 2, {}) if s.run_id not in {o.run_id for o in one}]
    source = tmp_path / "back"
    _write(source / "runs", one[0])
    _write(source / "runs", later[0], status=Status.FAILED)
    (source / "runs" / later[1].run_id).mkdir(parents=True)  # part-way: a checkpoint, no record
    (source / "runs" / later[1].run_id / "checkpoint.pt").write_text("x")
    out = tmp_path / "grid"
    summary, _ = merge_command("leaky-calibration", source, out=out, profile="quick")
    assert summary.seeds is None and summary.merged == [one[0].run_id]
    assert json.loads((out / "reproduce.json").read_text())["seeds"] == 1


def test_a_data_folder_the_grid_does_not_read_is_refused_before_anything_is_copied(tmp_path, committed_fp):
    from pyro_bnn.reproduce.api import merge as merge_command

    source = tmp_path / "back"
    _write(source / "runs", _quick_specs()[0])
    out = tmp_path / "grid"
    with pytest.raises(ValueError, match="cifar"):
        merge_command("leaky-calibration", source, out=out, profile="quick", data_dirs={"cifar": str(tmp_path)})
    assert not (out / "runs").exists() and not (out / "reproduce.json").exists()


def _profile_specs(profile: str, seeds: int = 1):
    from pyro_bnn.reproduce.api import get_experiment

    experiment = get_experiment("leaky-calibration")
    return experiment.plan(experiment.profiles[profile], seeds, {})


def _grid_of(folder: Path, profile: str, specs) -> Path:
    for spec in specs:
        _write(folder / "runs", spec)
    state = {"experiment": "leaky-calibration", "profile": profile, "seeds": 1, "command": f"pyro-bnn x {profile}"}
    (folder / "reproduce.json").write_text(json.dumps(state))
    return folder


def test_a_grid_of_another_profile_is_refused_unless_this_grid_plans_every_done_run_of_it(
    tmp_path, committed_fp, monkeypatch
):
    """A gpu grid merged into a quick one exited 0 ("merged 0 run(s); left out 24", each "not a run of this grid's
    plan") and rewrote its report; --profile cpu with a quick grid created a cpu grid folder merging 0 of 15. A grid
    of another profile whose done runs this grid all plans (full-3fc-authors' 3FC runs in gpu-authors) merges."""
    from pyro_bnn.reproduce import api
    from pyro_bnn.reproduce.api import merge as merge_command

    monkeypatch.setattr(api, "reproduce", lambda *args, **kwargs: tmp_path / "report.md")  # no measures recorded
    gpu = _grid_of(tmp_path / "gpu", "gpu", _profile_specs("gpu")[:3])
    quick = _grid_of(tmp_path / "quick", "quick", _quick_specs()[:2])
    before = (quick / "reproduce.json").read_text()
    with pytest.raises(ValueError) as refused:
        merge_command("leaky-calibration", gpu, out=quick)
    assert str(refused.value) == (
        f"--merge {gpu} holds a grid of the 'gpu' profile, not 'quick': 3 of its 3 done runs are not runs of this "
        "grid's plan (a grid of another profile merges only when this grid plans every done run of it)"
    )
    assert (quick / "reproduce.json").read_text() == before and len(list((quick / "runs").iterdir())) == 2
    with pytest.raises(ValueError, match="holds a grid of the 'quick' profile, not 'cpu': 2 of its 2 done runs"):
        merge_command("leaky-calibration", quick, out=tmp_path / "new", profile="cpu")
    assert not (tmp_path / "new").exists()

    authors = _profile_specs("full-3fc-authors")
    source = _grid_of(tmp_path / "authors", "full-3fc-authors", authors)
    assert {s.run_id for s in authors} < {s.run_id for s in _profile_specs("gpu-authors")}  # shared run ids
    summary, _ = merge_command("leaky-calibration", source, out=tmp_path / "gpu-authors", profile="gpu-authors")
    assert sorted(summary.merged) == sorted(s.run_id for s in authors) and not summary.left_out
    assert summary.describe().splitlines()[0] == (
        f"merged {len(authors)} run(s); left out 0; the source is a grid of the 'full-3fc-authors' profile, every "
        "done run of it planned here"
    )
    wider = _grid_of(tmp_path / "wider", "gpu-authors", _profile_specs("gpu-authors"))  # its CONV runs too
    with pytest.raises(ValueError, match=f"not 'full-3fc-authors': {len(authors)} of its {2 * len(authors)} done"):
        merge_command("leaky-calibration", wider, out=tmp_path / "full", profile="full-3fc-authors")


def test_a_folder_of_runs_none_of_which_this_grid_plans_is_refused(tmp_path, committed_fp):
    """A folder without reproduce.json whose done runs are all of another plan merged nothing and rewrote the
    report; it is refused in one line now. Failed runs alone merge nothing and are listed, as before."""
    from pyro_bnn.reproduce.api import merge as merge_command

    source = tmp_path / "back"
    for spec in _profile_specs("gpu")[:2]:
        _write(source, spec)
    with pytest.raises(ValueError) as refused:
        merge_command("leaky-calibration", source, out=tmp_path / "grid", profile="quick")
    assert (
        str(refused.value)
        == f"--merge {source}: none of its 2 done runs is a run of this grid's plan ('quick' profile)"
    )
    assert not (tmp_path / "grid").exists()
