"""One run of a grid, executed and recorded: ``OUT/runs/<run id>/`` is the folder ``pyro-bnn train`` writes, plus
``result.json`` (how the run ended, its metrics and measurements, the code version that produced it).

``execute_run`` is what every executor calls, in this process, a pool worker or a Ray task. It resumes a run that
was interrupted (from its last epoch checkpoint), returns a finished run's record without training, and turns any
exception of a run into a ``failed`` record with a one-line reason, so one bad run never stops a grid. A spec is
one of three kinds, dispatched here and nowhere else: a training run of its config, a deep ensemble of its members,
or a runner (``spec.runner``, :func:`~pyro_bnn.reproduce.runners.resolve_runner`) that produces the run its own way
once its members are done.

How a record is written and read back is :mod:`pyro_bnn.reproduce.record_files` (its names are importable from
here too).
"""

from __future__ import annotations

import functools
import math
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import pyro_bnn
from pyro_bnn._io import write_json_atomically
from pyro_bnn.predict import Prediction
from pyro_bnn.reproduce.code_state import current_training_code, training_code_at
from pyro_bnn.reproduce.measures import take_measure
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status
from pyro_bnn.reproduce.record_files import RECORD_HISTORY_ROWS as RECORD_HISTORY_ROWS
from pyro_bnn.reproduce.record_files import RESULT as RESULT
from pyro_bnn.reproduce.record_files import RUNS as RUNS
from pyro_bnn.reproduce.record_files import (
    binned_history,
    grid_relative,
    one_line,
    portable_traceback,
    read_record,
    write_record,
)
from pyro_bnn.reproduce.record_files import portable_path as portable_path
from pyro_bnn.reproduce.record_files import spec_to_dict as spec_to_dict
from pyro_bnn.reproduce.runners import resolve_runner
from pyro_bnn.runs.batched_runs import train_runs_batched
from pyro_bnn.runs.config import resolve_device
from pyro_bnn.runs.run_folder import CHECKPOINT, RunFolderBusyError
from pyro_bnn.runs.runs import RunResult, load_data, score, train_run

_inherited_code = ("", "")
"""The code version and training code a pool worker was given by the grid that spawned it
(:func:`inherit_code_version`)."""


def inherit_code_version(code: str, training: str = "") -> None:
    """Makes :func:`code_version` return ``code`` (and :func:`training_code` ``training``) in this process: a pool
    worker names the code its grid read when it started, not what the checkout holds by the time the worker
    finishes its first run."""
    global _inherited_code
    _inherited_code = (code, training)
    code_version.cache_clear()


def training_code() -> str:
    """The fingerprint of the training code this process runs (:mod:`pyro_bnn.reproduce.code_state`), inherited
    like :func:`code_version`."""
    return _inherited_code[1] or current_training_code()


DECLARED_COMMIT_ENV = "PYRO_BNN_COMMIT"
"""Names the commit of a tree copied to another machine (``bench/device_grid.sh`` sets it on the GPU machine, from
``.devcommit``): there, git (if the copy has a git folder at all) may name another commit. Set, it wins over git."""


@functools.cache
def code_version() -> str:
    """``pyro_bnn <version>`` and, in a git checkout, the commit (``+dirty`` when ``pyro_bnn/`` has uncommitted
    changes), so a report names the code that produced each run.

    Read once per process (a grid reads it when it starts; a pool worker inherits the grid's): a grid runs the code
    it loaded, so a commit made, or a file edited, while it runs must not change what its later records name."""
    if _inherited_code[0]:
        return _inherited_code[0]
    root = Path(pyro_bnn.__file__).resolve().parent.parent
    version = f"pyro_bnn {pyro_bnn.__version__}"
    declared = os.environ.get(DECLARED_COMMIT_ENV, "").strip()
    if re.fullmatch(r"[0-9a-f]{7,40}", declared):
        # A copy of a commit's tree sent to another machine (a GPU's), whose git folder, if it has one, is not the
        # tree's: the commit it was sent at. Merging its runs back checks the claim (pyro_bnn.reproduce.merge: the
        # runs' training-code fingerprint, computed from the files they ran, must equal that commit's).
        # Where this checkout holds that commit (a developer's shell with the variable left set), files that differ
        # from it are uncommitted changes, as git would say.
        committed = training_code_at(declared)
        dirty = committed is not None and committed != current_training_code()
        return f"{version} at {declared[:12]}{'+dirty' if dirty else ''}"
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "pyro_bnn"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{version} (not a git checkout)"
    return f"{version} at {commit}{'+dirty' if dirty else ''}"


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Runs the block on ``threads`` torch intra-op threads and restores the previous count (None: as they are)."""
    if not threads:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def non_finite_metrics(metrics: dict[str, Any]) -> list[str]:
    """``name=value`` of every top-level number in ``metrics`` that is NaN or infinite. What the metrics hold inside
    lists and dicts is not searched: there NaN can be meant (a reliability diagram's empty bins, the plateau
    fraction of a layer none of whose weights was sampled)."""
    return [f"{key}={value}" for key, value in metrics.items() if isinstance(value, float) and not math.isfinite(value)]


class NonFiniteMetricsError(ValueError):
    """A run finished but some of its metrics are NaN or infinite."""


def execute_run(
    spec: RunSpec, runs_dir: str | Path, *, progress: bool = False, threads: int | None = None, retried: str = ""
) -> RunRecord:
    """Trains, scores and measures one run into ``runs_dir/<run id>`` and writes its ``result.json``.

    Args:
        spec: The run.
        runs_dir: The grid's ``runs`` folder.
        progress: Show the run's own progress bars.
        threads: torch intra-op threads for this run (restored afterwards); None leaves them as they are.
        retried: Why this is the run's second attempt (its first worker was lost), kept in its record.

    Returns:
        The run's record: ``done`` with its metrics, ``failed`` with a one-line reason (never raises for a failing
        run; a KeyboardInterrupt still stops it, and the run resumes from its last checkpoint next time), or
        ``missing`` without writing anything when another process holds the run's folder. A run whose metrics hold
        a NaN or an infinity fails, naming them; retried, it trains again from the start.
    """
    with torch_threads(threads):
        return _execute_run(spec, Path(runs_dir), progress, Attempt(threads or 0, retried))


@dataclass(frozen=True)
class Attempt:
    """How a run was executed this time, kept in its record: its torch threads (0: left as they were) and why it is
    a second attempt (empty for a first)."""

    threads: int = 0
    retried: str = ""


NON_FINITE_CHECKPOINT = "checkpoint.non-finite.pt"
"""Where a run whose metrics came out non-finite keeps its trained network (out of the way of ``--retry-failed``,
which then trains the run from the start, and still there to inspect)."""


def _execute_run(spec: RunSpec, runs_dir: Path, progress: bool, attempt: Attempt) -> RunRecord:
    folder = runs_dir / spec.run_id
    existing = read_record(runs_dir, spec)
    if existing.status is Status.DONE:
        return existing
    start = time.perf_counter()
    try:
        if spec.reads_runs and not _members_done(spec, runs_dir):
            return RunRecord(spec, Status.MISSING, reason="its members have not all finished")
        if spec.runner:
            result = _call_runner(spec, runs_dir, folder)
        elif spec.is_ensemble:
            result = _combine_members(spec, runs_dir, folder)
        else:
            # no per-run figures in a grid: its report draws its own (`pyro-bnn evaluate RUN` draws one run's)
            result = train_run(spec.config, folder, resume=True, progress=progress, figures=False)
    except RunFolderBusyError:
        return RunRecord(spec, Status.MISSING, reason="another process is running it")  # theirs to record
    except (Exception, SystemExit) as err:  # recorded below with the other failures; a run's sys.exit() is its own
        return _record_failure(spec, folder, err, time.perf_counter() - start, attempt)  # (Ctrl-C still stops all)
    return _record_result(spec, folder, result, start, attempt=attempt)


def _device_name(device: object) -> dict[str, str]:
    """``{"device_name": the GPU's name}`` for a run on a CUDA device (the report names the card), else empty."""
    if not isinstance(device, str) or not device.startswith("cuda") or not torch.cuda.is_available():
        return {}
    return {"device_name": torch.cuda.get_device_name(torch.device(device))}


def _record_result(
    spec: RunSpec, folder: Path, result: RunResult, start: float, shared: float = 0.0, attempt: Attempt = Attempt()
) -> RunRecord:
    """Takes ``spec``'s measures of a trained run and writes its ``done`` record (or its ``failed`` one when a
    measure fails or a metric is not finite). ``start``: when the run's own work began; ``shared``: seconds of work
    it shared with others (its part of a batch's training), added to its time."""
    try:
        metrics = {k: v for k, v in result.metrics.items() if k != "history"}
        for measure in spec.measures:
            metrics.update(take_measure(measure, result, folder, spec.config, dict(spec.other_data)))
        bad = non_finite_metrics(metrics)
        if bad:
            shown = f"non-finite metrics: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}"
            checkpoint = folder / CHECKPOINT
            if not non_finite_metrics(result.metrics) or not checkpoint.exists():  # a measure's: measured again
                raise NonFiniteMetricsError(f"{shown} (--retry-failed measures it again)")
            checkpoint.replace(folder / NON_FINITE_CHECKPOINT)  # the trained network's own: trained again
            raise NonFiniteMetricsError(
                f"{shown} (its network is kept as {NON_FINITE_CHECKPOINT}; --retry-failed trains it again from the "
                "start)"
            )
        metrics.update(_device_name(metrics.get("device")))
        record = RunRecord(spec, Status.DONE, metrics, binned_history(result.metrics.get("history", [])))
    except (Exception, SystemExit) as err:  # a measure's sys.exit() fails its run, as in _execute_run
        return _record_failure(spec, folder, err, shared + time.perf_counter() - start, attempt)
    record.seconds = shared + time.perf_counter() - start
    record.code, record.training_code = code_version(), training_code()
    record.threads, record.retried = attempt.threads, attempt.retried
    write_record(folder, record)
    return record


def execute_batch(
    specs: list[RunSpec],
    runs_dir: str | Path,
    *,
    progress: bool = False,
    threads: int | None = None,
    retried: str = "",
) -> list[RunRecord]:
    """Trains compatible runs as one batch (:func:`~pyro_bnn.runs.batched_runs.train_runs_batched`), then
    measures and records each as :func:`execute_run` does; the records in the order of ``specs``.

    Runs already done are returned as they are; when the batch is refused (its runs turn out incompatible once
    built) every run trains alone instead. A run that diverges fails alone; one whose folder another process
    holds comes back ``missing``. ``threads`` and ``retried`` as for :func:`execute_run`.
    """
    with torch_threads(threads):
        return _execute_batch(specs, Path(runs_dir), progress, Attempt(threads or 0, retried))


def _execute_batch(specs: list[RunSpec], runs_dir: Path, progress: bool, attempt: Attempt) -> list[RunRecord]:
    records = {spec.run_id: read_record(runs_dir, spec) for spec in specs}
    todo = [spec for spec in specs if records[spec.run_id].status is not Status.DONE]
    if len(todo) == 1:
        records[todo[0].run_id] = _execute_run(todo[0], runs_dir, progress, attempt)
    elif todo:
        start = time.perf_counter()
        try:
            results = train_runs_batched(
                [s.config for s in todo], [runs_dir / s.run_id for s in todo], progress=progress, figures=False
            )
        except (Exception, SystemExit) as err:  # refused (not batchable after all) or failed as a batch (out of
            results = None  # memory, a sys.exit()): each run alone, resuming any checkpoint the batch wrote,
            # recording its own failure if it fails; said on stderr, as alone a run draws other noise than batched
            print(_alone_note(todo, err), file=sys.stderr)
        if results is None:
            for spec in todo:
                records[spec.run_id] = _execute_run(spec, runs_dir, progress, attempt)
        else:
            shared = (time.perf_counter() - start) / len(todo)
            for spec, result in zip(todo, results, strict=True):
                folder = runs_dir / spec.run_id
                if isinstance(result, RunFolderBusyError):
                    records[spec.run_id] = RunRecord(spec, Status.MISSING, reason="another process is running it")
                elif isinstance(result, BaseException):
                    records[spec.run_id] = _record_failure(spec, folder, result, shared, attempt)
                else:
                    records[spec.run_id] = _record_result(spec, folder, result, time.perf_counter(), shared, attempt)
    return [records[spec.run_id] for spec in specs]


def _alone_note(specs: list[RunSpec], err: BaseException) -> str:
    """The line saying that a batch of ``specs`` trains its runs alone, and why (``err``, on one line)."""
    return f"training the {len(specs)} runs of a batch alone ({specs[0].run_id}, ...): {without_machine(one_line(err))}"


def _members_done(spec: RunSpec, runs_dir: Path) -> bool:
    """Whether every member of ``spec`` is done (False while one is missing).

    Raises:
        RuntimeError: a member failed (the run fails with it, naming the member).
    """
    for member in spec.members:
        record = read_record(runs_dir, member)
        if record.status is Status.FAILED:
            raise RuntimeError(f"member {member.run_id} failed: {record.reason}")
        if record.status in (Status.MISSING, Status.DAMAGED):
            return False
    return True


def _call_runner(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """What ``spec``'s runner returns for it, its folder created and its ``metrics.json`` written."""
    folder.mkdir(parents=True, exist_ok=True)
    result = resolve_runner(spec.runner)(spec, runs_dir, folder)
    if not isinstance(result, RunResult):
        raise TypeError(f"runner {spec.runner} returned {type(result).__name__}, not a RunResult")
    # A runner that does not say where it ran ran where its config resolves (as the runners of the built-in papers
    # do: resolve_device(config.device)); the report counts runs per device.
    result.metrics.setdefault("device", str(resolve_device(spec.config.device)))
    write_json_atomically(folder / "metrics.json", {k: v for k, v in result.metrics.items() if k != "history"})
    return result


def score_members(spec: RunSpec, runs_dir: Path) -> tuple[dict[str, Any], Prediction, Any, Any]:
    """``(metrics, prediction, bnn, ensemble)``: the deep ensemble of ``spec``'s members (all done, their
    checkpoints in ``runs_dir``) scored on its test set (:func:`~pyro_bnn.runs.runs.score`)."""
    from pyro_bnn.runs.ensemble import load_ensemble

    config = spec.config
    bnn, ensemble = load_ensemble(
        [runs_dir / member.run_id for member in spec.members],
        device=config.device,
        data_dirs={config.dataset: config.data_dir} if config.data_dir is not None else None,
    )
    test = load_data(config).test
    metrics, prediction = score(bnn, ensemble, test.x, test.y, config)
    return metrics, prediction, bnn, ensemble


def _combine_members(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """The deep ensemble of ``spec``'s members (all done), scored on its test set."""
    metrics, prediction, bnn, ensemble = score_members(spec, runs_dir)
    metrics["members"] = len(spec.members)
    metrics.setdefault("device", str(resolve_device(spec.config.device)))  # where it was scored (the report counts)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomically(folder / "metrics.json", metrics)
    return RunResult(folder, metrics, prediction, bnn=bnn, guide=ensemble)


def record_failure(
    spec: RunSpec, runs_dir: str | Path, err: BaseException, seconds: float = 0.0, attempt: Attempt = Attempt()
) -> RunRecord:
    """Writes and returns the ``failed`` record of ``spec``, for a worker that died running it or a pool that broke
    before it ran (``attempt``: the threads it was given and why it was a second attempt); a run whose folder already
    holds a ``done`` record (finished before the pool broke, or by another process on the same folder) keeps it and
    gets it back."""
    existing = read_record(Path(runs_dir), spec)
    if existing.status is Status.DONE:
        return existing
    return _record_failure(spec, Path(runs_dir) / spec.run_id, err, seconds, attempt)


def _record_failure(
    spec: RunSpec, folder: Path, err: BaseException, seconds: float, attempt: Attempt = Attempt()
) -> RunRecord:
    # A failing run is recorded and the grid goes on; the traceback is kept for a bug report. Both name paths under
    # the grid's folder relative to it, and the traceback its source files from their package down, as a committed
    # record must not name the machine that ran it.
    root = folder.parent.parent
    record = RunRecord(
        spec,
        Status.FAILED,
        reason=grid_relative(without_machine(one_line(err)), root),
        seconds=seconds,
        code=code_version(),
        threads=attempt.threads,
        retried=attempt.retried,
        training_code=training_code(),
    )
    trace = without_machine("".join(traceback.format_exception(err)))
    write_record(folder, record, traceback=portable_traceback(trace, root))
    return record


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RAY_MACHINE = re.compile(r" ?\(pid=\d+, ip=[^)]*\)| ?Node IP: [^,\s]+, node ID: [0-9a-f]+\.?")


def without_machine(text: str) -> str:
    """``text`` without terminal colour codes, the ``(pid=..., ip=...)`` Ray writes after a task's name
    (``ray::_execute_group() (pid=3198, ip=192.0.2.2)``) and the ``Node IP: ..., node ID: ...`` of a lost node: a
    record says what failed, not the machine it failed on."""
    return _RAY_MACHINE.sub("", _TERMINAL_CODES.sub("", text))
