"""The grid machinery under misuse, with real processes and bounded waits: one writer per grid folder, pool workers
that die with their parent, a run's numbers independent of the pool, an unreachable Ray cluster, a lost Ray worker,
non-finite metrics and damaged records (issue 38)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from pyro_bnn.cli import main
from pyro_bnn.reproduce import LocalExecutor, Status, run_grid
from pyro_bnn.reproduce import executors as executors_module
from pyro_bnn.reproduce import records as records_module
from pyro_bnn.reproduce.grid import read_records
from pyro_bnn.reproduce.lock import LOCK, GridBusyError, grid_lock
from pyro_bnn.reproduce.planned import Analysis, Profile, RunSpec
from pyro_bnn.reproduce.report import write_report
from pyro_bnn.runs.config import RunConfig

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from test_grid import tiny_specs  # noqa: E402

WAIT = 120.0
"""The longest any wait below lasts (a process start, a few epochs); each ends as soon as its condition holds."""


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}


def _wait_for(condition, what: str, process: subprocess.Popen | None = None, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended (status {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.05)


def _holder_pid(out: Path) -> int | None:
    try:
        return json.loads((out / LOCK).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


_GRID_SCRIPT = textwrap.dedent(
    """
    import faulthandler, signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that waits in vain asks where it hangs
    from test_grid import tiny_specs
    from pyro_bnn.reproduce import LocalExecutor, run_grid
    run_grid(tiny_specs({count}, epochs=400), {out!r}, LocalExecutor(workers={workers}), progress=False)
    """
)


def _start_grid(out: Path, count: int, workers: int) -> subprocess.Popen:
    script = _GRID_SCRIPT.format(count=count, out=str(out), workers=workers)
    return subprocess.Popen([sys.executable, "-c", script], env=_environment(), stderr=subprocess.DEVNULL)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


# -- one writer per grid folder ---------------------------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holder_s_lock_is_taken_over(tmp_path, capsys):
    out = tmp_path / "grid"
    holder = _start_grid(out, count=2, workers=1)
    try:
        _wait_for(lambda: _holder_pid(out) == holder.pid, "lock naming the grid's process", holder)
        for extra in ([], ["--report-only"], ["--rescore"]):
            assert main(["reproduce", "leaky-calibration", "--out", str(out), "--quiet", *extra]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "Traceback" not in err, err
            assert f"is in use by pid {holder.pid} on " in err and "leaky" not in err.split("in use by")[1], err
        with pytest.raises(GridBusyError, match=f"pid {holder.pid}"):
            run_grid(tiny_specs(1), out, progress=False)
    finally:
        _kill(holder)
    # killed with -9, it ran no clean-up: its lock (and its stale text) is simply taken over
    assert _holder_pid(out) == holder.pid
    with grid_lock(out, "the next grid"):
        assert _holder_pid(out) == os.getpid()
        with grid_lock(out, "nested"):  # re-entrant within a process
            pass
        assert _holder_pid(out) == os.getpid()
    records = run_grid(tiny_specs(1), out, progress=False)
    assert records[0].status is Status.DONE


# -- pool workers die with their parent -------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    """The command line of process ``pid``; empty once it has ended (a short-lived child, such as the grid's
    ``git`` call naming its commit, can end between being listed and being read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent (here init, maybe a lazy one) has not reaped it


def _wait_for_two_workers_training(parent: subprocess.Popen, out: Path) -> None:
    """Until both of the grid's pool workers have started and a run has written its first epoch."""

    def training() -> bool:
        workers = [p for p in _children(parent.pid) if b"spawn_main" in _cmdline(p)]
        return len(workers) >= 2 and any((out / "runs").glob("*/checkpoint.pt"))

    _wait_for(training, "two workers training", parent)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process parents from /proc (Linux)")
def test_pool_workers_end_within_seconds_of_their_parent_s_kill(tmp_path, monkeypatch):
    out = tmp_path / "grid"
    parent = _start_grid(out, count=4, workers=2)
    try:
        _wait_for_two_workers_training(parent, out)
        children = _children(parent.pid)
    finally:
        _kill(parent)
    killed = time.monotonic()
    _wait_for(lambda: not any(_alive(p) for p in children), "end of the orphaned workers", timeout=15)
    assert time.monotonic() - killed < 3 * executors_module.WATCH_SECONDS + 5


def _deaf_to_sigterm(ready) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(60)


def test_an_interrupted_pool_kills_a_worker_that_outlives_its_sigterm(monkeypatch):
    # the grid's process (and the pool's exit) waits for every live child: one that does not end on SIGTERM would
    # keep an interrupted grid alive for as long as its run trains
    monkeypatch.setattr(executors_module, "STOP_SECONDS", 0.5)
    context = multiprocessing.get_context("fork")  # the target is this module's: nothing to import in the child
    ready = context.Event()
    deaf, quick = (
        context.Process(target=_deaf_to_sigterm, args=(ready,)),
        context.Process(target=time.sleep, args=(60,)),
    )
    for worker in (deaf, quick):
        worker.start()
    assert ready.wait(WAIT)
    for worker in (deaf, quick):
        worker.terminate()
    started = time.monotonic()
    executors_module._reap([deaf, quick])
    assert time.monotonic() - started < 5
    assert (deaf.exitcode, quick.exitcode) == (-signal.SIGKILL, -signal.SIGTERM)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process parents from /proc (Linux)")
def test_ctrl_c_to_a_two_worker_grid_stops_it_at_once_and_fails_no_run(tmp_path):
    """Ctrl-C reaches the whole process group. The workers took it too (one died inside an import and recorded its
    next run as failed), and the parent waited for the runs in flight to finish (seconds; once it hung)."""
    out = tmp_path / "grid"
    script = _GRID_SCRIPT.format(count=4, out=str(out), workers=2)
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as sink:
        parent = subprocess.Popen(
            [sys.executable, "-c", script], env=_environment(), stderr=sink, start_new_session=True
        )
    try:
        _wait_for_two_workers_training(parent, out)
        children = _children(parent.pid)
        os.killpg(parent.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the parent and its workers alike
        interrupted = time.monotonic()
        try:
            parent.wait(timeout=30)
        except subprocess.TimeoutExpired:  # seen once in a whole-suite run, not reproduced: say where it waits
            alive = [(p, _cmdline(p)[:80]) for p in _children(parent.pid) if _alive(p)]
            os.kill(parent.pid, signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(
                f"the grid did not end; children alive {alive}; its stderr:\n{stderr.read_text()}"
            ) from None
        assert time.monotonic() - interrupted < 10  # runs of 400 epochs were in flight
        _wait_for(lambda: not any(_alive(p) for p in children), "end of the workers", timeout=10)
    finally:
        _kill(parent)
    assert parent.returncode != 0
    records = read_records(out, tiny_specs(4, epochs=400))
    assert not [r for r in records if r.status is Status.FAILED], [r.reason for r in records]


_POKED_GRID_SCRIPT = textwrap.dedent(
    """
    import glob, signal, threading, time
    from test_grid import tiny_specs
    from pyro_bnn.reproduce import LocalExecutor, run_grid
    def poke():
        while not glob.glob({out!r} + "/runs/*/checkpoint.pt"):
            time.sleep(0.05)
        open({poked!r}, "w").write(repr(time.time()))
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not the main one
    threading.Thread(target=poke, daemon=True).start()
    run_grid(tiny_specs(4, epochs=4000), {out!r}, LocalExecutor(workers=2), progress=False)
    """
)


def test_a_ctrl_c_the_kernel_hands_to_another_thread_stops_the_grid_at_once(tmp_path):
    """The kernel may deliver a Ctrl-C to any thread of the grid's process; Python raises it in the main thread when
    that thread next runs, which an untimed wait for the pool's results put off until a run finished (a stack dump
    showed the main thread still in ``as_completed`` 30 s after the SIGINT). Here the SIGINT goes to a thread of the
    grid's own, once a run has written a checkpoint: the grid ends within seconds, with no run failed (the old
    code: 9 s at 400 epochs, when the first run finished; these runs are 4 000)."""
    out, poked = tmp_path / "grid", tmp_path / "poked"
    script = _POKED_GRID_SCRIPT.format(out=str(out), poked=str(poked))
    parent = subprocess.Popen([sys.executable, "-c", script], env=_environment(), stderr=subprocess.DEVNULL)
    try:
        _wait_for(poked.exists, "the poke", parent)
        parent.wait(timeout=30)
        assert time.time() - float(poked.read_text()) < 10
    finally:
        _kill(parent)
    assert parent.returncode != 0
    records = read_records(out, tiny_specs(4, epochs=4000))
    assert not [r for r in records if r.status is Status.FAILED], [r.reason for r in records]


def test_workers_are_capped_by_cores_and_memory_with_a_note(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(executors_module, "_cores", lambda: 2)
    monkeypatch.setattr(executors_module, "available_memory_bytes", lambda: 22 << 30)
    assert executors_module.capped_workers(2) == (2, "")
    workers, note = executors_module.capped_workers(1000)
    assert workers == 2 and note == "note: --workers 1000 capped at 2 (2 cores)"
    assert executors_module.capped_workers(2, threads=2)[0] == 1
    monkeypatch.setattr(executors_module, "available_memory_bytes", lambda: 5 << 30)
    monkeypatch.setattr(executors_module, "_cores", lambda: 64)
    workers, note = executors_module.capped_workers(1000)
    assert workers == 2 and note == "note: --workers 1000 capped at 2 (5.0 GiB available at 2 GiB a worker)"
    # a pool capped down to one runs in this process (nothing spawned), saying so once
    monkeypatch.setattr(executors_module, "_cores", lambda: 1)
    records = run_grid(tiny_specs(2, epochs=1), tmp_path / "grid", LocalExecutor(workers=1000), progress=False)
    assert [r.status for r in records] == [Status.DONE] * 2
    assert capsys.readouterr().err.count("note: --workers 1000 capped at 1 (1 cores)") == 1


# -- a run's numbers do not depend on the pool ------------------------------------------------------------------------


TIMES = ("train_time_s", "time_s", "seconds")
"""Wall times: the only values of a record that may differ between two executions of the same run."""


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _record_files(out: Path) -> dict[str, dict]:
    values = {}
    for path in sorted((out / "runs").glob("*/result.json")):
        record = json.loads(path.read_text())
        values[path.parent.name] = _without_times({k: record[k] for k in ("status", "metrics", "history", "threads")})
    return values


def test_records_are_bit_for_bit_the_same_at_one_and_two_workers(tmp_path, make_tiny):
    # A net whose sums are split across threads (64 hidden units on 784 pixels: its NLL differs in the 9th digit
    # between 1 and 2 threads), so that a run on another thread count than its twin would show.
    data = make_tiny(300, 100).write(tmp_path / "data")
    config = RunConfig(
        dataset="mnist", data_dir=str(data), model="mlp:64", epochs=2, batch_size=100, num_samples=4,
        num_val_samples=2, val_size=50, device="cpu",
    )  # fmt: skip
    specs = [RunSpec(dataclasses.replace(config, seed=seed), label=f"mnist-s{seed}") for seed in range(3)]
    torch.set_num_threads(2)  # this process's own count must not leak into its in-process runs
    alone = run_grid(specs, tmp_path / "one", LocalExecutor(workers=1), progress=False)
    assert torch.get_num_threads() == 2  # and a run gives it back
    records_module.inherit_code_version("pyro_bnn at the grid's start")  # as if the checkout moved on since
    try:
        beside = run_grid(specs, tmp_path / "two", LocalExecutor(workers=2), progress=False)
    finally:
        records_module.inherit_code_version("")
    assert {r.code for r in beside} == {"pyro_bnn at the grid's start"}  # the workers name the grid's code
    assert [r.status for r in alone] == [r.status for r in beside] == [Status.DONE] * 3
    one, two = _record_files(tmp_path / "one"), _record_files(tmp_path / "two")
    assert one == two  # every metric and every history value but the wall times, as written
    assert {values["threads"] for values in one.values()} == {1}
    for spec in specs:
        ours, theirs = (
            torch.load(tmp_path / side / "runs" / spec.run_id / "checkpoint.pt", weights_only=True)["model"]
            for side in ("one", "two")
        )
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


# -- Ray ---------------------------------------------------------------------------------------------------------------


def test_an_unreachable_ray_cluster_is_one_line_within_seconds(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'pyro-bnn[ray]')")
    env = {**_environment(), "RAY_ADDRESS": "127.0.0.1:1"}
    command = [sys.executable, "-m", "pyro_bnn.cli", "reproduce", "leaky-calibration", "--executor", "ray"]
    start = time.monotonic()
    done = subprocess.run([*command, "--out", str(tmp_path / "o")], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "cannot reach the Ray cluster at RAY_ADDRESS=127.0.0.1:1" in err and "unset RAY_ADDRESS" in err
    assert time.monotonic() - start < 60


def test_a_lost_ray_worker_costs_only_its_run_which_runs_once_more(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pyro-bnn[ray]')")
    from ray_helpers import dies_once_spec

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", _environment()["PYTHONPATH"])  # Ray's workers import the runner from tests/
    dying, ordinary = dies_once_spec(), tiny_specs(1)[0]
    try:
        records = run_grid([dying, ordinary], tmp_path, executors_module.make_executor("ray"), progress=False)
    finally:
        ray.shutdown()
    assert [r.status for r in records] == [Status.DONE, Status.DONE]
    assert records[0].metrics["attempts"] == 2  # it was killed once, mid-run, and ran again
    assert records[0].retried.startswith("its worker was lost (") and not records[1].retried
    saved = json.loads((tmp_path / "runs" / dying.run_id / "result.json").read_text())
    assert saved["retried"] == records[0].retried
    profile = Profile("quick", "a test", 1, {})
    report = write_report(
        tmp_path, title="t", experiment="e", profile=profile, seeds=1, command="c", records=records,
        analysis=Analysis([], []),
    )  # fmt: skip
    text = report.read_text()
    assert "1 ran twice, their first worker lost" in text
    assert f"- `{dying.run_id}` (done): its worker was lost (" in text


# -- nothing dropped silently ------------------------------------------------------------------------------------------


def test_a_run_with_non_finite_metrics_fails_naming_them_and_a_retry_trains_it_from_the_start(tmp_path, monkeypatch):
    spec = tiny_specs(1)[0]
    original = records_module.train_run

    def nan_ece(config, folder, **kwargs):
        result = original(config, folder, **kwargs)
        result.metrics["ece"] = float("nan")
        return result

    monkeypatch.setattr(records_module, "train_run", nan_ece)
    (record,) = run_grid([spec], tmp_path, progress=False)
    assert record.status is Status.FAILED
    assert "non-finite metrics: ece=nan" in record.reason and "--retry-failed" in record.reason
    folder = tmp_path / "runs" / spec.run_id
    assert (folder / records_module.NON_FINITE_CHECKPOINT).exists() and not (folder / "checkpoint.pt").exists()
    assert run_grid([spec], tmp_path, progress=False)[0].status is Status.FAILED  # kept failed without the flag

    trained_from = []

    def counting(config, folder, **kwargs):
        trained_from.append((Path(folder) / "checkpoint.pt").exists())
        return original(config, folder, **kwargs)

    monkeypatch.setattr(records_module, "train_run", counting)
    (retried,) = run_grid([spec], tmp_path, progress=False, retry_failed=True)
    assert retried.status is Status.DONE and trained_from == [False]
    assert [row["epoch"] for row in retried.history] == [1, 2, 3]


def test_only_top_level_metrics_fail_a_run_not_nan_meant_inside_lists_and_dicts():
    metrics = {"ece": float("inf"), "plateau_fraction": {"fc1": float("nan")}, "bins": [float("nan")], "n": 3}
    assert records_module.non_finite_metrics(metrics) == ["ece=inf"]


def test_a_non_finite_measure_fails_the_run_but_keeps_its_network_for_measuring_again(tmp_path, monkeypatch):
    spec = tiny_specs(1)[0]
    spec = dataclasses.replace(spec, measures=("broken",))
    monkeypatch.setattr(records_module, "take_measure", lambda *args: {"broken": float("nan")})
    (record,) = run_grid([spec], tmp_path, progress=False)
    assert record.status is Status.FAILED and record.reason.endswith("broken=nan (--retry-failed measures it again)")
    assert (tmp_path / "runs" / spec.run_id / "checkpoint.pt").exists()


def test_a_failure_record_keeps_the_threads_and_the_retry_it_happened_on(tmp_path):
    spec = tiny_specs(1)[0]
    attempt = records_module.Attempt(threads=3, retried="its worker was lost (x)")
    record = records_module.record_failure(spec, tmp_path, RuntimeError("lost again"), attempt=attempt)
    saved = records_module.read_record(tmp_path, spec)
    assert (record.threads, record.retried) == (saved.threads, saved.retried) == (3, "its worker was lost (x)")


def test_a_busy_grid_found_after_the_checks_is_one_line(tmp_path, capsys, monkeypatch):
    from pyro_bnn.reproduce import api

    def taken(*args, **kwargs):
        raise GridBusyError(f"{tmp_path} is in use by pid 1 on h since t (c); wait for it to finish")

    monkeypatch.setattr(api, "reproduce", taken)
    monkeypatch.setattr(api, "check_request", lambda *args, **kwargs: None)
    assert main(["reproduce", "leaky-calibration", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"pyro-bnn reproduce: error: {tmp_path} is in use by pid 1 on h since t (c); wait for it to finish"


def test_a_damaged_record_is_reported_as_damaged_and_run_again(tmp_path, capsys):
    specs = tiny_specs(2)
    done = run_grid(specs, tmp_path, progress=False)
    path = tmp_path / "runs" / specs[1].run_id / "result.json"
    invalid_utf8 = path.read_bytes()[:50] + b"\xff\xfe"
    for damage, words in (
        (path.read_text()[:100], "is not a run record"),
        (invalid_utf8, "is not a run record"),
        ("", "is empty"),
    ):
        path.write_bytes(damage if isinstance(damage, bytes) else damage.encode())
        records = read_records(tmp_path, specs)
        assert [r.status for r in records] == [Status.DONE, Status.DAMAGED]
        assert records[1].reason.startswith(f"{path} {words}")
        report = write_report(
            tmp_path, title="t", experiment="e", profile=Profile("quick", "a test", 1, {}), seeds=1, command="c",
            records=records, analysis=Analysis([], []),
        ).read_text()  # fmt: skip
        assert "1 missing" not in report and "0 missing and 1 damaged of 2" in report
        assert f"- `{specs[1].run_id}`: {path} {words}" in report and "Not run yet" not in report
    capsys.readouterr()
    again = run_grid(specs, tmp_path, progress=False)
    assert f"running {specs[1].run_id} again: {path} is empty" in capsys.readouterr().err
    assert again[1].status is Status.DONE and again[1].metrics["accuracy"] == done[1].metrics["accuracy"]


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("metrics", None, "its 'metrics' is null"),
        ("metrics", {}, "a done run without metrics"),
        ("metrics", [1, 2], "its 'metrics' is list, not dict"),
        ("seconds", "abc", "its 'seconds' is str, not int or float"),
        ("history", [1, 2], "its 'history' holds an entry that is no epoch record"),
    ],
)
def test_a_record_whose_fields_a_report_cannot_read_is_damaged_and_run_again(tmp_path, field, value, words):
    """Parsed JSON with a field of the wrong type used to count as done: every later report stopped with a
    traceback (KeyError, TypeError) and the run was never run again."""
    specs = tiny_specs(1)
    run_grid(specs, tmp_path, progress=False)
    path = tmp_path / "runs" / specs[0].run_id / "result.json"
    values = json.loads(path.read_text())
    values[field] = value
    path.write_text(json.dumps(values))
    (record,) = read_records(tmp_path, specs)
    assert record.status is Status.DAMAGED and record.reason == f"{path} is not a run record ({words})"
    (again,) = run_grid(specs, tmp_path, progress=False)
    assert again.status is Status.DONE and again.metrics
