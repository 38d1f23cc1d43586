"""The grid runner and its executors on tiny runs (two moons, tanh-small): resume after a kill without retraining
what finished, failures recorded while the grid goes on, and the same metrics from every executor."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pyro_bnn.reproduce import LocalExecutor, RayExecutor, Status, make_executor, run_grid
from pyro_bnn.reproduce import records as records_module
from pyro_bnn.reproduce.grid import GRID
from pyro_bnn.reproduce.planned import RunRecord, RunSpec
from pyro_bnn.reproduce.records import RECORD_HISTORY_ROWS, binned_history, write_record
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig

BASE = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="flat:rel=1",
    epochs=3,
    batch_size=64,
    num_samples=8,
    num_val_samples=4,
    device="cpu",
)


def tiny_specs(count: int, epochs: int = 3) -> list[RunSpec]:
    return [
        RunSpec(RunConfig(**{**BASE.__dict__, "seed": seed, "epochs": epochs}), label=f"moons-s{seed}")
        for seed in range(count)
    ]


def _metrics(records) -> list[float]:
    return [value for r in records for value in (r.metrics["accuracy"], r.metrics["nll"])]


def test_a_grid_runs_every_spec_once_and_a_rerun_trains_nothing(tmp_path, monkeypatch):
    specs = tiny_specs(3)
    records = run_grid([*specs, specs[0]], tmp_path / "grid", progress=False)
    assert [r.status for r in records] == [Status.DONE] * 3
    listed = json.loads((tmp_path / "grid" / GRID).read_text())["runs"]
    assert [r["run_id"] for r in listed] == [s.run_id for s in specs]
    for spec in specs:
        assert (tmp_path / "grid" / "runs" / spec.run_id / "checkpoint.pt").exists()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(records_module, "train_run", no_training)
    again = run_grid(specs, tmp_path / "grid", progress=False)
    assert _metrics(again) == _metrics(records)


_KILLABLE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_grid import tiny_specs
    from pyro_bnn.reproduce import run_grid
    run_grid(tiny_specs(4, epochs=12), {out!r}, progress=False)
    """
)


def test_a_killed_grid_resumes_without_retraining_finished_runs(tmp_path, monkeypatch):
    out = tmp_path / "killed"
    script = _KILLABLE.format(tests=str(Path(__file__).parent), out=str(out))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.DEVNULL)
    specs = tiny_specs(4, epochs=12)
    results = [out / "runs" / s.run_id / "result.json" for s in specs]
    deadline = time.monotonic() + 300
    third = out / "runs" / specs[2].run_id / "checkpoint.pt"

    def fixed_point() -> bool:  # two runs recorded, the third one trained part-way
        return sum(p.exists() for p in results) >= 2 and third.exists()

    while not fixed_point() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = {s.run_id for s, p in zip(specs, results, strict=True) if p.exists()}
    assert 2 <= len(finished) < 4, "the grid finished before it could be killed"

    trained = []
    original = records_module.train_run

    def counting(config, folder, **kwargs):
        trained.append(Path(folder).name)
        return original(config, folder, **kwargs)

    monkeypatch.setattr(records_module, "train_run", counting)
    resumed = run_grid(specs, out, progress=False)
    assert [r.status for r in resumed] == [Status.DONE] * 4
    assert not set(trained) & finished
    assert set(trained) == {s.run_id for s in specs} - finished

    # same final numbers as a grid that was never interrupted
    monkeypatch.setattr(records_module, "train_run", original)
    unbroken = run_grid(specs, tmp_path / "unbroken", progress=False)
    for a, b in zip(resumed, unbroken, strict=True):
        assert a.metrics["accuracy"] == pytest.approx(b.metrics["accuracy"], abs=1e-6)
        assert a.metrics["nll"] == pytest.approx(b.metrics["nll"], rel=1e-5)


def test_a_failing_run_is_recorded_and_the_grid_goes_on(tmp_path, capsys):
    good = tiny_specs(2)
    missing_data = RunSpec(
        RunConfig(**{**BASE.__dict__, "dataset": "mnist", "model": "3fc", "data_dir": str(tmp_path / "nowhere")}),
        label="mnist-missing",
    )
    records = run_grid([good[0], missing_data, good[1]], tmp_path / "grid", progress=False)
    assert [r.status for r in records] == [Status.DONE, Status.FAILED, Status.DONE]
    failed = records[1]
    assert "\n" not in failed.reason and "nowhere" in failed.reason
    saved = json.loads((tmp_path / "grid" / "runs" / missing_data.run_id / "result.json").read_text())
    assert saved["status"] == "failed" and "Traceback" in saved["traceback"]
    assert f"run {missing_data.run_id} failed" in capsys.readouterr().err
    # a rerun keeps it failed without running it again, unless asked to retry
    again = run_grid([good[0], missing_data, good[1]], tmp_path / "grid", progress=False)
    assert again[1].status is Status.FAILED and again[1].seconds == failed.seconds
    retried = run_grid([missing_data], tmp_path / "grid", progress=False, retry_failed=True)
    assert retried[0].status is Status.FAILED and retried[0].seconds != failed.seconds


def test_a_diverging_run_is_recorded_as_failed(tmp_path):
    diverging = RunSpec(RunConfig(**{**BASE.__dict__, "lr": 1e6, "epochs": 5}), label="diverges")
    (record,) = run_grid([diverging], tmp_path / "grid", progress=False)
    assert record.status is Status.FAILED
    assert "NonFiniteLossError" in record.reason or "non-finite" in record.reason.lower()


def test_the_process_pool_gives_the_in_process_metrics(tmp_path):
    specs = tiny_specs(2)
    local = run_grid(specs, tmp_path / "local", progress=False)
    pooled = run_grid(specs, tmp_path / "pool", LocalExecutor(workers=2), progress=False)
    assert _metrics(pooled) == pytest.approx(_metrics(local))


# Ray against local: tests/reproduce/test_implicit_bnn.py (an ensemble's two members and their mixture), so
# that the suite starts Ray once.


def test_a_missing_ray_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'pyro-bnn\[ray\]'"):
        RayExecutor()


def test_bad_executor_settings_are_refused():
    with pytest.raises(ValueError, match="unknown executor 'slurm'"):
        make_executor("slurm")
    with pytest.raises(ValueError, match="workers must be an int >= 1, got 0"):
        make_executor("local", workers=0)


def test_no_data_is_loaded_for_a_grid_that_cannot_write_its_folder(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("data loaded")

    monkeypatch.setattr(runs, "load_data", refuse)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        run_grid(tiny_specs(1), blocker / "grid", progress=False)


def test_run_ids_are_pinned():
    """A run's id names its folder across sessions: a change of the id scheme or of a default would make every
    grid retrain from scratch, so it has to be deliberate (and come with a migration of the run folders)."""
    from pyro_bnn.reproduce.planned import RUN_ID_BASE

    spec = tiny_specs(1)[0]
    assert spec.run_id == "moons-s0-edcb2e3081"
    current = {k: v for k, v in json.loads(RunConfig().to_json()).items() if k not in ("device", "data_dir")}
    # The sample counts default to None, which a run resolves (and its id hashes) as 100 and 16 for every guide
    # that took those before (a mixture of K is rounded up to a multiple of K; 100 and 16 were refused for it); the
    # activation to None, the model's own, which is relu for every model but tanh-small and tanh-cnn.
    resolved = RunConfig().resolved()
    assert (current["num_samples"], current["num_val_samples"], current["activation"]) == (None, None, None)
    current.update(
        num_samples=resolved.num_samples, num_val_samples=resolved.num_val_samples, activation=resolved.activation
    )
    assert {k: current[k] for k in RUN_ID_BASE} == RUN_ID_BASE, "a RunConfig default changed: ids change too"
    # fields added since leave the ids of runs at their defaults as they were
    assert {k: v for k, v in current.items() if k not in RUN_ID_BASE} == {
        "data_seed": None,
        "data_noise": None,
        "data_samples": None,
        "temperature": 1.0,
        "clip_norm": None,
    }
    assert RunSpec(dataclasses.replace(spec.config, data_seed=None), label="moons-s0").run_id == spec.run_id
    assert RunSpec(dataclasses.replace(spec.config, temperature=1.0), label="moons-s0").run_id == spec.run_id
    assert RunSpec(dataclasses.replace(spec.config, temperature=0.1), label="moons-s0").run_id != spec.run_id


def test_a_record_keeps_a_long_history_binned_to_a_hundred_rows():
    # 250 epochs -> 100 bins of 2 or 3 epochs (the edges round(i * 250 / 100)): every number is its bin's mean over
    # the epochs that have it, `epoch` the bin's last epoch, anything else its last value.
    history = [
        {"epoch": i + 1, "loss": float(i), "device": f"d{i}", **({"val_accuracy": float(i)} if i % 2 else {})}
        for i in range(250)
    ]
    binned = binned_history(history)
    assert len(binned) == RECORD_HISTORY_ROWS == 100
    assert binned[0] == {"epoch": 2, "loss": 0.5, "device": "d1", "val_accuracy": 1.0, "epochs": 2}
    assert binned[1] == {"epoch": 5, "loss": 3.0, "device": "d4", "val_accuracy": 3.0, "epochs": 3}
    assert sum(row["epochs"] for row in binned) == 250 and binned[-1]["epoch"] == 250
    assert sum(row["loss"] * row["epochs"] for row in binned) == pytest.approx(sum(range(250)))
    short = history[:RECORD_HISTORY_ROWS]
    assert binned_history(short) == short  # a history of 100 epochs or fewer is kept as it is


def test_the_code_version_is_read_once_per_process(monkeypatch):
    """A commit or an edit while a grid runs must not change what its later records name: the version is read at
    the first record and kept."""
    records_module.inherit_code_version("")  # the git checkout's own, not the suite's stand-in
    records_module.code_version.cache_clear()
    first = records_module.code_version()
    assert first.startswith("pyro_bnn ")

    def no_git(*args, **kwargs):
        raise AssertionError("git was asked again")

    monkeypatch.setattr(records_module.subprocess, "run", no_git)
    assert records_module.code_version() == first


def test_a_broken_pool_does_not_overwrite_a_run_that_finished(tmp_path):
    """A pool whose worker died fails every run it still held; one whose folder already holds a done record (its
    worker finished it first, or another process on the same folder did) keeps that record."""
    from pyro_bnn.reproduce.records import RunRecord, read_record, record_failure, write_record

    done, pending = (RunSpec(dataclasses.replace(BASE, seed=seed), label=f"moons-s{seed}") for seed in (0, 1))
    write_record(tmp_path / done.run_id, RunRecord(done, Status.DONE, {"accuracy": 0.9}))
    died = RuntimeError("A process in the process pool was terminated abruptly")
    kept = record_failure(done, tmp_path, died)
    assert kept.status is Status.DONE and kept.metrics == {"accuracy": 0.9}
    assert read_record(tmp_path, done).status is Status.DONE
    failed = record_failure(pending, tmp_path, died)
    assert failed.status is Status.FAILED and "terminated abruptly" in failed.reason
    assert read_record(tmp_path, pending).status is Status.FAILED


def test_a_failed_record_names_paths_under_the_grid_relative_to_it(tmp_path):
    """A failure message that names a file of the run (a last good checkpoint) is kept relative to the grid's folder,
    so a committed record does not name the machine that ran it."""
    import json

    from pyro_bnn.reproduce.records import read_record, record_failure

    runs = tmp_path / "grid" / "runs"
    spec = RunSpec(BASE, label="moons-s0")
    checkpoint = runs / spec.run_id / "checkpoint.pt"
    try:  # raised, so that the traceback names source files (this test's and none of the package's)
        raise RuntimeError(f"NaN; the last good checkpoint is {checkpoint.absolute()}.")
    except RuntimeError as err:
        failed = record_failure(spec, runs, err)
    assert failed.reason == f"RuntimeError: NaN; the last good checkpoint is runs/{spec.run_id}/checkpoint.pt."
    assert read_record(runs, spec).reason == failed.reason
    stored = json.loads((runs / spec.run_id / "result.json").read_text())
    assert str(tmp_path) not in stored["traceback"] and f"runs/{spec.run_id}/checkpoint.pt" in stored["traceback"]
    frames = re.findall(r'^  File "(.+?)", line', stored["traceback"], flags=re.MULTILINE)
    assert frames and all(not os.path.isabs(path) for path in frames), frames
    assert frames[-1].endswith("test_grid.py")


def test_a_traceback_names_source_files_from_their_package_down(tmp_path):
    from pyro_bnn.reproduce.record_files import portable_traceback

    text = (
        'Traceback (most recent call last):\n  File "/home/u/pyro_bnn/pyro_bnn/infer/trainer.py", line 3, in fit\n'
        '  File "/home/u/pyro_bnn/.venv/lib/python3.11/site-packages/pyro/infer/svi.py", line 9, in step\n'
        '  File "/usr/lib/python3.11/multiprocessing/pool.py", line 1, in f\n'
        '  File "/usr/lib/python3/dist-packages/numpy/core.py", line 2, in g\n'
        '  File "C:\\Users\\u\\env\\Lib\\site-packages\\torch\\nn.py", line 4, in h\n'
        '  File "/home/u/notebook.py", line 5, in k\n'
        f'RuntimeError: File "/home/u/data.csv" is bad; see {tmp_path}/runs/a-0123456789/checkpoint.pt\n'
    )
    assert portable_traceback(text, tmp_path) == (
        'Traceback (most recent call last):\n  File "pyro_bnn/infer/trainer.py", line 3, in fit\n'
        '  File "site-packages/pyro/infer/svi.py", line 9, in step\n'
        '  File "python3.11/multiprocessing/pool.py", line 1, in f\n'
        '  File "dist-packages/numpy/core.py", line 2, in g\n'
        '  File "site-packages\\torch\\nn.py", line 4, in h\n'
        '  File "notebook.py", line 5, in k\n'
        'RuntimeError: File "/home/u/data.csv" is bad; see runs/a-0123456789/checkpoint.pt\n'
    )


def test_an_old_record_s_absolute_run_path_is_read_back_relative_and_left_on_disk(tmp_path):
    """A record written before failure reasons were made relative names the machine's grid folder; reading it (as a
    report does) cuts that to ``runs/<id>/...``, and the file itself is not rewritten."""
    from pyro_bnn.reproduce.record_files import portable_reason, write_record
    from pyro_bnn.reproduce.records import read_record

    runs = tmp_path / "grid" / "runs"
    spec = RunSpec(BASE, label="moons-s0")
    old = f"NonFiniteLossError: NaN; the last good checkpoint is /work/main/results/x/runs/{spec.run_id}/checkpoint.pt."
    write_record(runs / spec.run_id, RunRecord(spec, Status.FAILED, reason=old))
    read = read_record(runs, spec)
    assert read.reason == f"NonFiniteLossError: NaN; the last good checkpoint is runs/{spec.run_id}/checkpoint.pt."
    assert "/work/main" in (runs / spec.run_id / "result.json").read_text()
    # only a path into a run folder is cut: other absolute paths, and relative ones, stay as they were
    for kept in ("no file /data/runs/notes.txt here", f"already runs/{spec.run_id}/checkpoint.pt", "OSError: /tmp/x"):
        assert portable_reason(kept) == kept


def test_a_member_whose_checkpoint_is_gone_is_trained_again_for_a_run_that_reads_it(tmp_path, capsys):
    # Committed run folders have no checkpoints: resuming an ensemble on a fresh clone must retrain its members
    # rather than fail with "no checkpoint", and must leave members with checkpoints alone.
    members = [
        dataclasses.replace(spec, config=dataclasses.replace(spec.config, guide="map")) for spec in tiny_specs(2)
    ]
    ensemble = RunSpec(members[0].config, label="ensemble", members=tuple(members))
    out = tmp_path / "grid"
    run_grid(members, out, progress=False)
    first = {r.spec.run_id: r.metrics["nll"] for r in run_grid(members, out, progress=False)}
    kept = out / "runs" / members[1].run_id / "checkpoint.pt"
    kept_time = kept.stat().st_mtime_ns
    (out / "runs" / members[0].run_id / "checkpoint.pt").unlink()
    records = run_grid([ensemble, *members], out, progress=False)
    assert [r.status for r in records] == [Status.DONE] * 3
    assert (out / "runs" / members[0].run_id / "checkpoint.pt").exists()
    assert kept.stat().st_mtime_ns == kept_time
    assert records[1].metrics["nll"] == pytest.approx(first[members[0].run_id], rel=1e-6)
    assert f"training {members[0].run_id} again" in capsys.readouterr().err


def test_no_paper_plan_depends_on_the_library_s_default_guide(monkeypatch):
    """A grid names its guides: changing the default guide (issue 41) changes no paper's method or run ids."""
    from pyro_bnn.reproduce.api import get_experiment, listing
    from pyro_bnn.runs import config as config_module

    names = [line.split()[0] for line in listing().splitlines()]

    def ids() -> dict[str, list[str]]:
        found = {}
        for name in names:
            experiment = get_experiment(name)
            found[name] = [
                spec.run_id
                for profile in experiment.profiles.values()
                for spec in experiment.plan(profile, profile.seeds, {})
            ]
        return found

    before = ids()
    monkeypatch.setattr(config_module, "DEFAULT_GUIDE", "autonormal:0.123")
    assert ids() == before


def test_a_grid_logging_to_a_file_writes_a_line_per_run(tmp_path, capsys):
    """Where stderr is not a terminal (here: captured) the bars would be redrawn in place; lines stand instead."""
    specs = tiny_specs(2, epochs=2)
    run_grid(specs, tmp_path / "grid", progress=True, name="tiny")
    lines = capsys.readouterr().err.splitlines()
    runs = [line for line in lines if line.startswith("tiny runs: ")]
    assert [line.split(" (")[0] for line in runs] == ["tiny runs: 1/2 done", "tiny runs: 2/2 done"]
    assert runs[0].split(" (")[1].startswith(specs[0].run_id + ", ") and runs[0].endswith(" s)")
    assert len(lines) == 2  # the runs themselves stay quiet
    assert not any("\r" in line or "%|" in line for line in lines)  # no bar


def test_the_log_lines_count_failed_runs_apart_from_the_done(tmp_path, capsys):
    """With a failed record kept (and another run failing now) the lines per run said "tiny runs: 2/4 done", then
    "tiny runs: 4/4 done" of a grid of 2 done and 2 failed runs: done and failed were counted together."""
    good = tiny_specs(2, epochs=1)
    kept = RunSpec(RunConfig(**{**BASE.__dict__, "seed": 7, "epochs": 1}), label="moons-kept")
    write_record(tmp_path / "grid" / "runs" / kept.run_id, RunRecord(kept, Status.FAILED, reason="boom"))
    missing_data = RunSpec(
        RunConfig(**{**BASE.__dict__, "dataset": "mnist", "model": "3fc", "data_dir": str(tmp_path / "nowhere")}),
        label="mnist-missing",
    )
    run_grid([kept, good[0], missing_data, good[1]], tmp_path / "grid", progress=True, name="tiny")
    runs = [line.split(" (")[0] for line in capsys.readouterr().err.splitlines() if line.startswith("tiny runs: ")]
    assert runs == ["tiny runs: 1/4 done, 1 failed", "tiny runs: 2/4 done, 2 failed"]
