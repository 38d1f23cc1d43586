"""One code state per comparison (issue 39 item 3): the training-code fingerprint from a tree and from a commit,
runs from an uncommitted tree counted nowhere, --retrain-stale, mixed states named in the report, and records that
name no machine's absolute data path."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyro_bnn.reproduce import code_state
from pyro_bnn.reproduce import records as records_module
from pyro_bnn.reproduce.code_state import commit_fingerprint, counted, is_training_file, tree_fingerprint
from pyro_bnn.reproduce.grid import run_grid
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, Status, run_tags
from pyro_bnn.reproduce.records import RESULT, read_record, spec_to_dict, write_record
from pyro_bnn.reproduce.report import write_report

sys.path.insert(0, str(Path(__file__).parent))
from test_grid import BASE, tiny_specs  # noqa: E402


@pytest.mark.parametrize(
    "path, training",
    [
        ("pyro_bnn/infer/trainer.py", True),
        ("pyro_bnn/bnn.py", True),
        ("pyro_bnn/reproduce/measures.py", True),
        ("pyro_bnn/reproduce/shift_measures.py", True),
        ("pyro_bnn/reproduce/papers/posterior_families_runs.py", True),
        ("pyro_bnn/reproduce/report.py", False),
        ("pyro_bnn/reproduce/papers/priors_analysis.py", False),
        ("pyro_bnn/reproduce/papers/leaky_calibration.py", False),
        ("pyro_bnn/reproduce/papers/implicit_bnn/measures.py", True),
        ("pyro_bnn/reproduce/papers/posterior_families/runs.py", True),
        ("pyro_bnn/reproduce/papers/posterior_families/scoring.py", True),
        ("pyro_bnn/reproduce/papers/priors/analysis.py", False),
        ("pyro_bnn/reproduce/papers/priors/figures.py", False),
        ("pyro_bnn/reproduce/papers/priors/plan.py", False),
        ("pyro_bnn/reproduce/papers/priors/__init__.py", False),
        ("pyro_bnn/cli.py", False),
        ("pyro_bnn/errors.py", False),
        ("pyro_bnn/plots/reliability.py", False),
        ("pyro_bnn/infer/README.md", False),
    ],
)
def test_which_files_are_training_code(path, training):
    assert is_training_file(path) is training


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env).stdout


def test_the_fingerprint_of_a_tree_equals_its_commit_s_and_ignores_report_code(tmp_path):
    package = tmp_path / "pyro_bnn"
    (package / "reproduce").mkdir(parents=True)
    (package / "trainer.py").write_text("LR = 1e-3\n")
    (package / "reproduce" / "report.py").write_text("TITLE = 'a'\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "one")
    first = tree_fingerprint(package)
    assert commit_fingerprint(tmp_path, "HEAD") == first
    (package / "reproduce" / "report.py").write_text("TITLE = 'b'\n")  # a report changes: the same training code
    assert tree_fingerprint(package) == first
    (package / "trainer.py").write_text("LR = 1e-2\n")  # the trainer changes: another state
    assert tree_fingerprint(package) != first
    _git(tmp_path, "commit", "-qam", "two")
    assert commit_fingerprint(tmp_path, "HEAD") == tree_fingerprint(package) != commit_fingerprint(tmp_path, "HEAD~1")
    assert commit_fingerprint(tmp_path, "0" * 40) is None


def _done(spec, code: str, training: str = "", accuracy: float = 0.9) -> RunRecord:
    return RunRecord(spec, Status.DONE, {"accuracy": accuracy}, code=code, training_code=training)


def test_runs_from_an_uncommitted_tree_count_nowhere_and_the_report_says_so(tmp_path):
    clean, dirty = tiny_specs(2)
    records = counted([_done(clean, "pyro_bnn 0.1.0 at abc", "f1"), _done(dirty, "pyro_bnn 0.1.0 at abc+dirty")])
    assert [r.status for r in records] == [Status.DONE, Status.UNCOUNTED]
    assert "uncommitted" in records[1].reason and records[1].metrics == {"accuracy": 0.9}
    text = _report_text(tmp_path, records)
    assert "1 done" in text and "(and 1 done but not counted: trained from an uncommitted tree)" in text
    assert f"- `{dirty.run_id}` (pyro_bnn 0.1.0 at abc, with uncommitted changes)" in text and "--retrain-stale" in text
    assert "+dirty" not in text


def test_a_run_from_a_dirty_tree_counts_when_its_training_code_is_its_commit_s(monkeypatch):
    spec = tiny_specs(1)[0]
    monkeypatch.setattr(code_state, "training_code_at", lambda commit: "committed")
    report_edited = _done(spec, "pyro_bnn 0.1.0 at abc1234+dirty", "committed")  # the uncommitted change: a report
    trainer_edited = _done(spec, "pyro_bnn 0.1.0 at abc1234+dirty", "edited")
    assert code_state.training_code_of(report_edited) == "committed" and not code_state.uncommitted(report_edited)
    assert code_state.training_code_of(trainer_edited) is None and code_state.uncommitted(trainer_edited)
    assert [r.status for r in counted([report_edited, trainer_edited])] == [Status.DONE, Status.UNCOUNTED]
    assert not code_state.stale(report_edited, "committed") and code_state.stale(trainer_edited, "committed")


def test_retrain_stale_is_refused_while_the_training_code_is_uncommitted(monkeypatch):
    monkeypatch.setattr(code_state, "training_code_at", lambda commit: "head")
    monkeypatch.setattr(code_state, "current_training_code", lambda: "edited")
    with pytest.raises(ValueError, match="commit them first"):
        code_state.check_committed_training_code()
    monkeypatch.setattr(code_state, "current_training_code", lambda: "head")
    code_state.check_committed_training_code()


def _report_text(folder: Path, records: list[RunRecord]) -> str:
    """The report of experiment ``e`` over ``records``, as written to ``folder``."""
    profile = Profile("quick", "q", 1, {})
    return write_report(
        folder, title="t", experiment="e", profile=profile, seeds=1, command="c", records=records,
        analysis=Analysis([], []),
    ).read_text()  # fmt: skip


def test_a_report_names_every_training_code_state_and_the_runs_behind_it(tmp_path):
    a, b, c = tiny_specs(3)
    one = [_done(a, "pyro_bnn 0.1.0 at 111", "f1"), _done(b, "pyro_bnn 0.1.0 at 111", "f1")]
    text = _report_text(tmp_path, one)
    assert "- Training code: one state (f1) for all 2 runs done" in text
    mixed = [*one, _done(c, "pyro_bnn 0.1.0 at 222", "f2")]
    text = _report_text(tmp_path, mixed)
    assert "**2 states**" in text and "pyro-bnn reproduce e --retrain-stale" in text
    assert "  - f1: 2 runs (commits 111): `moons`" in text and "  - f2: 1 runs (commits 222): `moons`" in text


def test_retrain_stale_trains_exactly_the_runs_of_other_training_code(tmp_path, monkeypatch):
    specs = tiny_specs(3)
    first = run_grid(specs, tmp_path, progress=False)
    current = records_module.training_code()
    assert {r.training_code for r in first} == {current}
    folder = tmp_path / "runs" / specs[1].run_id
    saved = json.loads((folder / RESULT).read_text())
    saved["training_code"] = "000000000000"  # as if trained by other training code
    (folder / RESULT).write_text(json.dumps(saved))

    trained = []
    original = records_module.train_run

    def counting(config, out, **kwargs):
        trained.append(Path(out).name)
        return original(config, out, **kwargs)

    monkeypatch.setattr(records_module, "train_run", counting)
    run_grid(specs, tmp_path, progress=False)  # without the flag: nothing trains
    assert trained == []
    again = run_grid(specs, tmp_path, progress=False, retrain_stale=True)
    assert trained == [specs[1].run_id]  # only the stale run, from the start
    assert (folder / "result.stale.json").exists() and (folder / "checkpoint.stale.pt").exists()
    assert again[1].training_code == current and again[1].metrics["accuracy"] == first[1].metrics["accuracy"]


def test_training_code_of_old_records_comes_from_their_commit(monkeypatch):
    spec = tiny_specs(1)[0]
    monkeypatch.setattr(code_state, "training_code_at", lambda commit: f"at-{commit}")
    assert code_state.training_code_of(_done(spec, "pyro_bnn 0.1.0 at 1234567")) == "at-1234567"
    assert code_state.training_code_of(_done(spec, "pyro_bnn 0.1.0 at 1234567+dirty")) is None
    assert code_state.training_code_of(_done(spec, "pyro_bnn 0.1.0 (not a git checkout)")) is None
    assert code_state.training_code_of(_done(spec, "pyro_bnn 0.1.0 at 1234567", "own")) == "at-1234567"
    monkeypatch.setattr(code_state, "training_code_at", lambda commit: None)  # a commit this checkout lacks
    assert code_state.training_code_of(_done(spec, "pyro_bnn 0.1.0 at 1234567", "own")) == "own"


def test_records_hold_no_absolute_data_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data" / "mnist"
    spec = tiny_specs(1)[0]
    spec = type(spec)(BASE.__class__(**{**BASE.__dict__, "data_dir": str(data)}), label="x",
                      other_data=(("mnist", str(data)),))  # fmt: skip
    values = spec_to_dict(spec)
    assert values["config"]["data_dir"] == os.path.join("data", "mnist")
    assert values["other_data"] == {"mnist": os.path.join("data", "mnist")}
    write_record(tmp_path / "r", RunRecord(spec, Status.DONE, {"accuracy": 1.0}))
    assert str(tmp_path) not in (tmp_path / "r" / RESULT).read_text()
    assert read_record(tmp_path, spec).status is Status.MISSING  # its own folder is tmp_path/<run id>, not r


def test_a_cell_whose_runs_ran_different_training_code_says_so_in_its_row(monkeypatch):
    from pyro_bnn.reproduce.comparability import check_cell

    monkeypatch.setattr(code_state, "training_code_at", lambda commit: None)  # commits this checkout lacks
    a, b = tiny_specs(2)
    history = [{"epoch": i + 1, "val_accuracy": 0.9} for i in range(6)]
    same = [_done(a, "pyro_bnn 0.1.0 at 111", "f1"), _done(b, "pyro_bnn 0.1.0 at 111", "f1")]
    mixed = [same[0], _done(b, "pyro_bnn 0.1.0 at 222", "f2")]
    assert code_state.cell_code_states(same) == "one state (f1)"
    assert code_state.cell_code_states(mixed) == "**2 states** (f1, f2)"
    assert code_state.cell_code_states([_done(a, "pyro_bnn 0.1.0 at 333")]) == "one state (unknown)"
    for runs in (same, mixed):
        for run in runs:
            run.history = history
    assert "training code" not in check_cell(same, None, 0.0).summary
    assert check_cell(mixed, None, 0.0).summary.endswith(", training code **2 states** (f1, f2)")
    assert "training code" not in check_cell(mixed, None, 0.0, name_code=False).summary


def test_posterior_families_names_a_family_s_mixed_training_code_once(monkeypatch):
    from pyro_bnn.reproduce.papers.posterior_families.verdicts import cell_state

    monkeypatch.setattr(code_state, "training_code_at", lambda commit: None)
    tags = run_tags(dataset="moons", family="mean-field")
    a, b = (dataclasses.replace(spec, tags=tags) for spec in tiny_specs(2))
    runs = [_done(a, "pyro_bnn 0.1.0 at 111", "f1"), _done(b, "pyro_bnn 0.1.0 at 222", "f2")]
    for run in runs:
        run.history = [{"epoch": i + 1, "val_accuracy": 0.9} for i in range(6)]
    text = cell_state(runs, "moons", ("mean-field",))
    assert text.count("**2 states**") == 1, text


def test_a_report_names_the_fingerprints_records_store_under_an_older_definition(tmp_path, monkeypatch):
    monkeypatch.setattr(code_state, "training_code_at", lambda commit: "now")  # the commit's files, defined today
    a, b = tiny_specs(2)
    records = [_done(a, "pyro_bnn 0.1.0 at 1111111", "then"), _done(b, "pyro_bnn 0.1.0 at 1111111", "now")]
    text = _report_text(tmp_path, records)
    assert "- Training code: one state (now) for all 2 runs done\n  - (the records store then: " in text
    agreeing = [_done(a, "pyro_bnn 0.1.0 at 1111111", "now")]
    text = _report_text(tmp_path, agreeing)
    assert "records store" not in text
