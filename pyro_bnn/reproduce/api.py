""":func:`reproduce`: plan a paper's grid at a profile, run what is not done, write the report; :func:`merge` and
:func:`rescore` rewrite the report of a grid without training. The request's checks (the experiment, profile,
folder state, data sets and plan) are :mod:`pyro_bnn.reproduce.request`, whose names are importable from here too.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from pyro_bnn._io import write_json_atomically
from pyro_bnn.reproduce.code_state import counted
from pyro_bnn.reproduce.executors import Executor, make_executor
from pyro_bnn.reproduce.grid import read_records, run_grid
from pyro_bnn.reproduce.lock import grid_lock
from pyro_bnn.reproduce.merge import MergeSummary, check_fits, merge_runs, seeds_covering
from pyro_bnn.reproduce.planned import Profile
from pyro_bnn.reproduce.report import write_report
from pyro_bnn.reproduce.request import STATE as STATE
from pyro_bnn.reproduce.request import (
    _check_state,
    _checked_request,
    _read_state,
    _this_command,
    batch_runs_of,
    canonical_data_dirs,
    get_experiment,
    plan,
)
from pyro_bnn.reproduce.request import check_data as check_data
from pyro_bnn.reproduce.request import check_data_dirs as check_data_dirs
from pyro_bnn.reproduce.request import check_request as check_request
from pyro_bnn.reproduce.request import experiment_names as experiment_names
from pyro_bnn.reproduce.request import grid_datasets as grid_datasets
from pyro_bnn.reproduce.request import listing as listing
from pyro_bnn.reproduce.rescore import RescoreSummary, rescore_grid
from pyro_bnn.runs.run_folder import check_writable


def reproduce(
    name: str,
    *,
    profile: str | None = None,
    seeds: int | None = None,
    out: str | os.PathLike,
    executor: str | Executor = "local",
    workers: int | None = None,
    report_only: bool = False,
    data_dirs: dict[str, str] | None = None,
    device: str | None = None,
    gpus_per_run: float | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    command: str | None = None,
    batch_runs: int | str | None = None,
    threads: int = 1,
    retrain_stale: bool = False,
) -> Path:
    """Runs the experiment ``name`` at ``profile`` into ``out`` (resuming what is there) and writes its report.

    Args:
        name: A registered experiment (:func:`listing`), e.g. ``"leaky-calibration"``.
        profile: ``quick`` (a smoke run of about a minute), ``cpu`` (hours on 2 cores) or ``paper`` (a GPU); None:
            the profile ``out`` already holds, or ``quick`` for a new folder.
        seeds: Seeds per cell (default: the ones ``out`` holds, else the profile's); refused with ``report_only``,
            whose report is of the seeds ``out`` holds.
        out: The grid's folder: ``runs/<run id>/`` per run, ``report.md``, its CSV files and figures.
        executor: ``local``, ``ray``, or an :class:`~pyro_bnn.reproduce.executors.Executor`.
        workers: Runs at once (local: a process pool when > 1; ray: tasks in flight).
        report_only: Rebuild the report from the run folders without running anything.
        data_dirs: Data folder per data set name (``{"mnist": "path"}``; aliases such as ``fmnist`` name their set),
            for sets not found in the usual places.
        device: Device of every run (default ``auto``: CUDA where available).
        gpus_per_run: Ray only: GPUs each run's task asks for (default 1 where this machine sees a GPU, else 0).
        retry_failed: Run failed runs again.
        progress: Progress bars (quiet when stderr is not a terminal).
        command: The command line to print in the report (default: this process's; a ``reproduce`` command line
            resuming a grid without ``--profile`` or ``--seeds`` gets the grid's added, :func:`_naming_the_grid`).
        batch_runs: Compatible runs train together in batches of up to this many (:mod:`pyro_bnn.batched`);
            ``"auto"``: as many as fit in memory; None: the experiment's default (``auto`` for ``priors`` and
            ``leaky-calibration``, 1 for the others). The report says which runs were batched.
        threads: torch threads of each run (default 1), the same however many run at once, so that a run's numbers
            do not depend on ``workers``. Each record keeps it.
        retrain_stale: Train again every run whose training code differs from this checkout's
            (:mod:`pyro_bnn.reproduce.code_state`), so that the grid comes from one training code state. Runs from a
            tree with uncommitted changes are never counted by a report (:func:`~.code_state.counted`).

    Returns:
        The path of ``report.md``.

    Raises:
        ValueError: A bad name, profile, seed count, device, ``--data-dir`` key or ``out`` (one line, before any
            run), or, with ``report_only``, an ``out`` that holds no grid or a ``seeds`` given.
        GridBusyError: Another process writes ``out`` (one line naming it; a ``FileExistsError``).
        ImportError: ``executor="ray"`` without Ray installed (naming the extra).
        ConnectionError: ``executor="ray"`` and ``RAY_ADDRESS`` names a cluster that does not answer.
    """
    data_dirs = canonical_data_dirs(data_dirs)
    experiment, chosen, state = _checked_request(
        name,
        profile,
        seeds,
        out,
        executor,
        workers,
        report_only,
        device,
        gpus_per_run,
        data_dirs,
        batch_runs,
        threads=threads,
        retrain_stale=retrain_stale,
    )
    out = Path(out)
    typed = command is None
    command = command or _this_command()
    with grid_lock(out, command):  # one writer: the state, the runs and the report
        if report_only:
            state = _read_state(out)  # as it is now that this process holds the folder
            command, seeds = state["command"], state["seeds"]  # the report is of the grid the folder holds
        elif typed and state is not None:
            command = _naming_the_grid(command, chosen, state["seeds"] if seeds is None else seeds)
        # a rerun without --seeds resumes the grid the folder holds, not the profile's default
        seeds = seeds or (state["seeds"] if state else chosen.seeds)
        specs = plan(experiment, chosen, seeds, data_dirs or {}, device)
        if report_only:
            records = read_records(out, specs)
        else:
            batching = batch_runs_of(experiment, batch_runs)
            runner = (
                make_executor(executor, workers, gpus_per_run, batching, threads)
                if isinstance(executor, str)
                else executor
            )
            write_json_atomically(
                out / STATE, {"experiment": experiment.name, "profile": chosen.name, "seeds": seeds, "command": command}
            )
            records = run_grid(
                specs,
                out,
                runner,
                progress=progress,
                retry_failed=retry_failed,
                name=experiment.name,
                command=command,
                retrain_stale=retrain_stale,
            )
        records = counted(records)  # a run from an uncommitted tree counts in no report
        analysis = experiment.analyse(records, chosen, out)
        return write_report(
            out,
            title=experiment.title,
            experiment=experiment.name,
            profile=chosen,
            seeds=seeds,
            command=command,
            records=records,
            analysis=analysis,
        )


def merge(
    name: str,
    source: str | os.PathLike,
    *,
    out: str | os.PathLike,
    profile: str | None = None,
    data_dirs: dict[str, str] | None = None,
) -> tuple[MergeSummary, Path]:
    """Merges the done runs of ``source`` (a grid's folder copied back from another machine, e.g. a GPU's) into the
    grid ``out`` and rewrites its report; trains nothing (:mod:`pyro_bnn.reproduce.merge`).

    A new ``out`` takes its state (experiment, profile, seeds, command) from ``source``'s ``reproduce.json``, with
    the command's ``--out`` naming ``out``. Where ``source`` holds runs of seeds ``out`` does not plan (a copy of the
    same grid run with more seeds), ``out`` plans those seeds from now on (its state and command say so) and takes
    them.

    Args:
        name: The experiment.
        source: The folder copied back (a grid's folder, or a folder of run folders).
        out: The grid's folder (created when new).
        profile: The profile (None: ``out``'s, else ``source``'s).
        data_dirs: Data folders, as for :func:`reproduce` (the report's figures may read data).

    Returns:
        What was merged and left out, and the path of the rewritten ``report.md``.

    Raises:
        ValueError: A bad name or profile, a ``source`` that is no folder, a new ``out`` with no profile named
            and no state in ``source``, a data folder for a set the grid does not read, or a ``source`` whose done
            runs the grid plans none of, or a grid of another profile with a done run the grid does not plan
            (:func:`~pyro_bnn.reproduce.merge.check_fits`; one line, before anything is copied or created).
    """
    experiment = get_experiment(name)
    data_dirs = canonical_data_dirs(data_dirs)
    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise ValueError(f"--merge {source}: not a folder")
    theirs = _read_state(source)
    if theirs is not None and theirs["experiment"] != experiment.name:
        raise ValueError(f"--merge {source} holds a grid of {theirs['experiment']!r}, not {experiment.name!r}")
    if profile is None and _read_state(out) is None:
        if theirs is None:
            raise ValueError(f"--merge {source} holds no {STATE}: name the --profile")
        profile = theirs["profile"]
    check_writable(out)
    chosen, state = _check_state(out, experiment, profile)
    check_data_dirs(experiment, chosen, data_dirs or {})  # before anything is copied
    same = theirs is not None and theirs["profile"] == chosen.name
    seeds = state["seeds"] if state else theirs["seeds"] if same else chosen.seeds

    def plan_for(count: int) -> list:
        return plan(experiment, chosen, count, data_dirs or {}, None)

    # before the folder is written: a source this grid can take nothing of (another profile's) is refused
    planned = {spec.run_id for spec in plan_for(seeds_covering(source, seeds, plan_for))}
    other = check_fits(source, planned, chosen.name, theirs["profile"] if theirs else None)
    with grid_lock(out, _this_command()):
        if state is None:
            command = (
                _with_out(theirs["command"], out)
                if same
                else shlex.join(["pyro-bnn", "reproduce", experiment.name, "--profile", chosen.name, "--out", str(out)])
            )
            state = {"experiment": experiment.name, "profile": chosen.name, "seeds": seeds, "command": command}
            write_json_atomically(out / STATE, state)
        seeds = seeds_covering(source, state["seeds"], plan_for)
        grown = None
        if seeds > state["seeds"]:  # the copy holds runs of later seeds: the grid takes them, and plans them from now
            grown = (state["seeds"], seeds)
            state = {**state, "seeds": seeds, "command": _with_seeds(state["command"], seeds)}
            write_json_atomically(out / STATE, state)
        specs = plan(experiment, chosen, state["seeds"], data_dirs or {}, None)
        summary = merge_runs(source, out, specs)
        summary.seeds, summary.other_profile = grown, theirs["profile"] if other else None
    report = reproduce(name, profile=chosen.name, out=out, report_only=True, data_dirs=data_dirs)
    return summary, report


def _with_option(command: str, flag: str, value: object, *, add: bool) -> str:
    """``command`` with every value of ``flag`` (``--flag V`` or ``--flag=V``) set to ``value``; where it has none,
    the flag is appended when ``add``, else left out."""
    words, found = shlex.split(command), False
    for index, word in enumerate(words):
        if word == flag and index + 1 < len(words):
            words[index + 1], found = str(value), True
        elif word.startswith(f"{flag}="):
            words[index], found = f"{flag}={value}", True
    if not found and add:
        words += [flag, str(value)]
    return shlex.join(words)


def _naming_the_grid(command: str, profile: Profile, seeds: int) -> str:
    """``command``, a ``reproduce`` command line as typed to resume a grid, with ``--profile`` added where it names
    none, and ``--seeds`` where it names none and the grid's ``seeds`` are not the profile's own: a resume may leave
    both out (the folder's are taken), but the recorded command must run the same grid into a new folder, where
    they would default to ``quick`` and its seeds. Other flags stay as typed; any other command line (a script
    calling :func:`reproduce`) is kept as it is."""
    words = shlex.split(command)
    if words[:2] != ["pyro-bnn", "reproduce"] and words[:4] != ["python", "-m", "pyro_bnn", "reproduce"]:
        return command
    command = _with_option(command, "--profile", profile.name, add=True)  # one typed is this profile already
    return _with_option(command, "--seeds", seeds, add=seeds != profile.seeds)


def _with_seeds(command: str, seeds: int) -> str:
    """``command`` with ``--seeds`` set to ``seeds`` (added where it had none)."""
    return _with_option(command, "--seeds", seeds, add=True)


def _with_out(command: str, out: Path) -> str:
    """``command`` with its ``--out`` value replaced by ``out``."""
    return _with_option(command, "--out", out, add=False)


def rescore(
    name: str,
    *,
    out: str | os.PathLike,
    profile: str | None = None,
    data_dirs: dict[str, str] | None = None,
    device: str | None = None,
    progress: bool = True,
) -> tuple[RescoreSummary, Path]:
    """Adds the metrics that test scoring gained since the grid in ``out`` ran (the conformal coverage and mean set
    size at alpha 0.1) to every done classifier run that still has its checkpoint, then rewrites the report; trains
    nothing (:mod:`pyro_bnn.reproduce.rescore`).

    Args:
        name: The experiment ``out`` holds.
        out: The grid's folder.
        profile: The profile ``out`` holds (None: read from it).
        data_dirs: Data folder per data set name, for sets not where the runs' configs say.
        device: Where the runs are restored and predicted (default: their configs', ``auto``).
        progress: A progress bar over the runs re-scored.

    Returns:
        What was re-scored, and the path of the rewritten ``report.md``.

    Raises:
        ValueError: A bad name, profile or device, or an ``out`` that holds no grid of ``name`` (one line).
        FileNotFoundError: A data set the grid reads cannot be found.
    """
    data_dirs = canonical_data_dirs(data_dirs)
    experiment, chosen, state = _checked_request(
        name, profile, None, out, "local", None, False, device, None, data_dirs, rescore=True
    )
    specs = plan(experiment, chosen, state["seeds"], data_dirs or {}, device)
    with grid_lock(out, _this_command()):
        summary = rescore_grid(specs, Path(out), progress=progress, name=experiment.name)
        report = reproduce(
            name, profile=chosen.name, out=out, report_only=True, data_dirs=data_dirs, device=device, progress=progress
        )
    return summary, report
