"""Running a grid of runs: skip what finished, run the rest on an executor, one progress bar for the grid.

``OUT/grid.json`` lists every run of the grid (its id, label, tags and config); ``OUT/runs/<run id>/`` holds each
run. A run whose ``result.json`` says ``done`` is never trained again, so a killed sweep resumes where it stopped
(an interrupted run continues from its last epoch checkpoint). Failed runs are kept as failed unless
``retry_failed`` is set (a diverged run usually diverges again). A run whose ``result.json`` is damaged (cut short
by a full disk, edited by hand) is run again, resuming its checkpoint, and said so. Run folders are committed without
their checkpoints, so a done training run whose checkpoint is gone is trained again (from its seed) when a run still
to do reads it. One process at a time writes a grid's folder (:mod:`.lock`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm.auto import tqdm

from pyro_bnn._io import write_json_atomically
from pyro_bnn.reproduce.code_state import stale
from pyro_bnn.reproduce.executors import Executor, LocalExecutor
from pyro_bnn.reproduce.lock import grid_lock
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status
from pyro_bnn.reproduce.records import RESULT, RUNS, code_version, read_record, spec_to_dict, training_code
from pyro_bnn.runs.run_folder import CHECKPOINT, check_writable

GRID = "grid.json"


def unique(specs: list[RunSpec]) -> list[RunSpec]:
    """``specs`` without repeats (two parts of a plan may name the same run), in their first order."""
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        seen.setdefault(spec.run_id, spec)
    return list(seen.values())


def read_records(out: str | Path, specs: list[RunSpec]) -> list[RunRecord]:
    """The records of ``specs`` as ``out`` holds them now (missing where a run has not finished)."""
    runs_dir = Path(out) / RUNS
    return [read_record(runs_dir, spec) for spec in unique(specs)]


def _members_to_retrain(todo: list[RunSpec], records: dict[str, RunRecord], runs_dir: Path) -> list[RunSpec]:
    """The done training runs (no runner, not ensembles) that a run of ``todo`` reads but whose checkpoint is gone."""
    stale = {}
    for spec in todo:
        for member in spec.members:
            trained = not member.runner and not member.members
            done = records[member.run_id].status is Status.DONE
            if trained and done and not (runs_dir / member.run_id / CHECKPOINT).exists():
                stale[member.run_id] = member
    return list(stale.values())


def run_grid(
    specs: list[RunSpec],
    out: str | Path,
    executor: Executor | None = None,
    *,
    progress: bool = True,
    retry_failed: bool = False,
    name: str = "grid",
    command: str = "",
    retrain_stale: bool = False,
) -> list[RunRecord]:
    """Runs every spec not yet done into ``out/runs`` and returns all records, in the order of ``specs``.

    Args:
        specs: The grid (repeats are run once).
        out: The grid's folder; checked writable before anything runs.
        executor: Where the runs execute (default: one after another in this process).
        progress: One bar for the grid (runs done / total, ETA); where stderr is not a terminal (a log file), a
            line per run done instead (``NAME runs: 14/15 done, 1 failed (RUN ID, 3.2 s)``, failed runs counted
            apart, each also named on a line of its own); with the in-process executor also each run's own bars.
        retry_failed: Run failed runs again.
        name: The bar's label.
        command: What the grid's lock names as its holder (default: the bar's label).
        retrain_stale: Train again, from the start, every done or failed run whose training code differs from this
            process's (:mod:`.code_state`: other training code, a tree with uncommitted changes, or a commit this
            checkout lacks); its old ``result.json`` and checkpoint are kept beside it as ``*.stale*``.

    Returns:
        One record per unique spec: done, failed (with its reason) or, after an interruption, missing.

    Raises:
        GridBusyError: Another process writes ``out`` (one line naming it).
    """
    check_writable(out)
    _check_members(unique(specs))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    code_version(), training_code()  # read as the grid starts: what its records name, whatever the checkout holds later
    with grid_lock(out, command or f"{name} grid"):
        return _run_grid(specs, out, executor, progress, retry_failed, name, retrain_stale)


def _check_members(specs: list[RunSpec]) -> None:
    listed = {spec.run_id for spec in specs}
    for spec in specs:
        missing = [member.run_id for member in spec.members if member.run_id not in listed]
        if missing:
            raise ValueError(f"run {spec.run_id} has members that are not runs of the grid: {missing[0]}")
        nested = [member.run_id for member in spec.members if member.reads_runs]
        if nested:
            raise ValueError(f"run {spec.run_id} reads {nested[0]}, which reads other runs itself; one level only")


def _run_grid(
    specs: list[RunSpec],
    out: Path,
    executor: Executor | None,
    progress: bool,
    retry_failed: bool,
    name: str,
    retrain_stale: bool = False,
) -> list[RunRecord]:
    specs = unique(specs)
    executor = executor or LocalExecutor()
    runs_dir = out / RUNS
    runs_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(out / GRID, {"runs": [spec_to_dict(spec) for spec in specs]})
    records = {spec.run_id: read_record(runs_dir, spec) for spec in specs}
    if retrain_stale:
        current = training_code()
        for spec in specs:
            if stale(records[spec.run_id], current):
                folder = runs_dir / spec.run_id
                print(f"training {spec.run_id} again: it ran other training code than this one", file=sys.stderr)
                for kept in (RESULT, CHECKPOINT):
                    if (folder / kept).exists():
                        path = folder / kept
                        path.replace(path.with_name(f"{path.stem}.stale{path.suffix}"))
                records[spec.run_id] = read_record(runs_dir, spec)
    for record in records.values():
        if record.status is Status.DAMAGED:
            print(f"running {record.spec.run_id} again: {record.reason}", file=sys.stderr)
    todo = [
        spec
        for spec in specs
        if records[spec.run_id].status in (Status.MISSING, Status.DAMAGED)
        or (retry_failed and records[spec.run_id].status is Status.FAILED)
    ]
    for member in _members_to_retrain(todo, records, runs_dir):
        print(f"training {member.run_id} again: a run still to do reads its checkpoint, which is gone", file=sys.stderr)
        (runs_dir / member.run_id / RESULT).unlink()
        records[member.run_id] = read_record(runs_dir, member)
        todo.insert(0, member)
    terminal = sys.stderr.isatty()
    bar = tqdm(
        total=len(specs),
        initial=len(specs) - len(todo),
        desc=f"{name} runs",
        unit="run",
        disable=not (progress and terminal),
        position=0,
    )
    failed = sum(r.status is Status.FAILED for r in records.values() if not retry_failed)
    done = sum(r.status is Status.DONE for r in records.values())  # the bar counts failed runs too; the lines do not
    with bar:
        # Runs that read no other run first, then the ensembles and runners that read them (their members).
        for phase in ([s for s in todo if not s.reads_runs], [s for s in todo if s.reads_runs]):
            for record in executor.run(phase, runs_dir, progress=progress and terminal):
                records[record.spec.run_id] = record
                failed += record.status is Status.FAILED
                done += record.status is Status.DONE
                bar.update(record.status in (Status.DONE, Status.FAILED))
                if failed:
                    bar.set_postfix(failed=failed)
                if record.status is Status.FAILED:
                    bar.write(f"run {record.spec.run_id} failed: {record.reason}", file=sys.stderr)
                elif progress and not terminal and record.status is Status.DONE:  # a log file: a line per run
                    counts = f"{done}/{len(specs)} done" + (f", {failed} failed" if failed else "")
                    print(
                        f"{name} runs: {counts} ({record.spec.run_id}, {record.seconds:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    return [records[spec.run_id] for spec in specs]
