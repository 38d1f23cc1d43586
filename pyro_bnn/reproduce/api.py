""":func:`reproduce`: plan a paper's grid at a profile, run what is not done, write the report."""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from pyro_bnn._io import write_json_atomically
from pyro_bnn.checks import positive_int
from pyro_bnn.data import load_dataset
from pyro_bnn.reproduce.code_state import check_committed_training_code, counted
from pyro_bnn.reproduce.executors import Executor, check_batch_runs, make_executor
from pyro_bnn.reproduce.grid import read_records, run_grid
from pyro_bnn.reproduce.lock import check_grid_free, grid_lock
from pyro_bnn.reproduce.merge import MergeSummary, merge_runs
from pyro_bnn.reproduce.papers import EXPERIMENTS
from pyro_bnn.reproduce.report import write_report
from pyro_bnn.reproduce.rescore import RescoreSummary, rescore_grid
from pyro_bnn.reproduce.spec import Experiment, Profile, RunSpec
from pyro_bnn.runs.config import resolve_device
from pyro_bnn.runs.run_folder import check_writable

STATE = "reproduce.json"
"""``OUT/reproduce.json``: which experiment, profile and seeds the folder holds, and the last command."""


def experiment_names() -> list[str]:
    """The registered experiments' names (``pyro-bnn reproduce NAME``), sorted."""
    return sorted(EXPERIMENTS)


def get_experiment(name: str) -> Experiment:
    """The registered experiment ``name``, or a one-line ValueError listing the names."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; expected one of {', '.join(experiment_names())}")
    return EXPERIMENTS[name]


def listing() -> str:
    """One line per experiment: its name, what it reproduces and its profiles."""
    width = max(len(name) for name in EXPERIMENTS)
    return "\n".join(
        f"{name:<{width}}  {EXPERIMENTS[name].summary} (profiles: {', '.join(EXPERIMENTS[name].profiles)})"
        for name in experiment_names()
    )


def _profile(experiment: Experiment, name: str) -> Profile:
    if name not in experiment.profiles:
        raise ValueError(
            f"unknown profile {name!r} for {experiment.name}; expected one of {', '.join(experiment.profiles)}"
        )
    return experiment.profiles[name]


def _check_seeds(seeds: int | None) -> None:
    if seeds is not None:
        positive_int(seeds, "seeds")


def _read_state(out: Path) -> dict | None:
    path = out / STATE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
        state["experiment"], state["profile"], state["seeds"], state["command"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{path} is not a reproduction's state file; pick another --out") from None
    return state


def _check_state(out: Path, experiment: Experiment, profile_name: str | None) -> tuple[Profile, dict | None]:
    """The profile to run (``profile_name``, or the one ``out`` holds, else ``quick``) and ``out``'s state, read
    once; refuses an ``out`` that holds another experiment or profile."""
    state = _read_state(out)
    if profile_name is None:
        profile_name = state["profile"] if state and state["experiment"] == experiment.name else "quick"
    profile = _profile(experiment, profile_name)
    if state is not None:
        held = (state["experiment"], state["profile"])
        if held != (experiment.name, profile.name):
            raise ValueError(
                f"{out} holds the {held[1]!r} profile of {held[0]!r}, not {profile.name!r} of {experiment.name!r}; "
                "pick another --out"
            )
    return profile, state


def _this_command() -> str:
    """This process's command line, as ``pyro-bnn ...`` when it is the CLI (``pyro-bnn`` or ``python -m
    pyro_bnn.cli``)."""
    if Path(sys.argv[0]).name in ("pyro-bnn", "cli.py"):
        return shlex.join(["pyro-bnn", *sys.argv[1:]])
    return shlex.join([Path(sys.executable).name, *sys.argv])


def plan(
    experiment: Experiment, profile: Profile, seeds: int, data_dirs: dict[str, str], device: str | None
) -> list[RunSpec]:
    """The grid's run specs, with the data folders and device filled in (neither changes a run's id)."""
    specs = experiment.plan(profile, seeds, data_dirs)
    if device is not None:
        specs = [replace(s, config=replace(s.config, device=device)) for s in specs]
    return specs


def check_request(
    name: str,
    *,
    profile: str | None,
    seeds: int | None,
    out: str | os.PathLike,
    executor: str | Executor = "local",
    workers: int | None = None,
    report_only: bool = False,
    device: str | None = None,
    gpus_per_run: float | None = None,
    data_dirs: dict[str, str] | None = None,
    batch_runs: int | str | None = None,
    rescore: bool = False,
    threads: int = 1,
    retrain_stale: bool = False,
) -> None:
    """Raises the one-line error :func:`reproduce` (with ``rescore``: :func:`rescore`) would raise for these
    arguments, without running anything (the CLI calls it first, so that an error after it is a bug with its
    traceback, not an option problem).

    Unless ``report_only``, every data set of the grid is also found (and read) once here, so that a missing one
    is one error naming the places looked, not a failed record for every run that needs it.
    """
    _checked_request(
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
        rescore,
        threads,
        retrain_stale,
    )


def batch_runs_of(experiment: Experiment, batch_runs: int | str | None) -> int | str:
    """The batch size a grid's runs train with: ``batch_runs`` when given, else the experiment's own default
    (``"auto"`` for the grids of many small compatible runs, 1 for the others)."""
    return check_batch_runs(batch_runs if batch_runs is not None else getattr(experiment, "batch_runs", 1))


def _checked_request(
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
    batch_runs=None,
    rescore=False,
    threads=1,
    retrain_stale=False,
) -> tuple[Experiment, Profile, dict | None]:
    """:func:`check_request`'s checks; returns the experiment, the chosen profile and ``out``'s state."""
    experiment = get_experiment(name)
    if retrain_stale:
        check_committed_training_code()
    check_writable(out)  # the string as given: Path("") would be the current folder
    check_grid_free(out)
    chosen, state = _check_state(Path(out), experiment, profile)
    _check_seeds(seeds)
    check_data_dirs(experiment, chosen, data_dirs or {})
    if device is not None:
        resolve_device(device)
    if report_only and state is None:
        raise ValueError(f"{out} holds no {experiment.name} grid to report on (no {STATE})")
    if rescore and state is None:
        raise ValueError(f"{out} holds no {experiment.name} grid to re-score (no {STATE})")
    if not report_only and not rescore and isinstance(executor, str):
        make_executor(executor, workers, gpus_per_run, batch_runs_of(experiment, batch_runs), threads)
    if not report_only:
        check_data(experiment, chosen, data_dirs or {})
    return experiment, chosen, state


def grid_datasets(experiment: Experiment, profile: Profile) -> set[str]:
    """The names of the data sets the grid at ``profile`` reads (its runs' own and their measures')."""
    datasets = set()
    for spec in experiment.plan(profile, 1, {}):
        datasets |= {spec.config.dataset, *(name for name, _ in spec.other_data)}
    return datasets


def check_data_dirs(experiment: Experiment, profile: Profile, data_dirs: dict[str, str]) -> None:
    """Refuses a ``--data-dir`` for a data set the grid does not read (a typo would otherwise be ignored while the
    grid reads that set from the usual places), in one line naming the ones it reads."""
    known = grid_datasets(experiment, profile)
    for key in data_dirs:
        if key not in known:
            raise ValueError(
                f"--data-dir {key}=...: {experiment.name} ({profile.name}) reads no data set {key!r}; "
                f"it reads {', '.join(sorted(known))}"
            )


def check_data(experiment: Experiment, profile: Profile, data_dirs: dict[str, str]) -> None:
    """Loads every data set the grid at ``profile`` uses once (from ``data_dirs`` where given, else the usual
    places; an online user's first call downloads MNIST here).

    Raises:
        FileNotFoundError: A data set cannot be found (listing every place looked and the fixes).
        ValueError: A data file is corrupt.
    """
    for dataset in sorted(grid_datasets(experiment, profile)):
        load_dataset(dataset, data_dir=data_dirs.get(dataset), val_size=0)  # presence and format only


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
        seeds: Seeds per cell (default: the profile's).
        out: The grid's folder: ``runs/<run id>/`` per run, ``report.md``, its CSV files and figures.
        executor: ``local``, ``ray``, or an :class:`~pyro_bnn.reproduce.executors.Executor`.
        workers: Runs at once (local: a process pool when > 1; ray: tasks in flight).
        report_only: Rebuild the report from the run folders without running anything.
        data_dirs: Data folder per data set name (``{"mnist": "path"}``), for sets not found in the usual places.
        device: Device of every run (default ``auto``: CUDA where available).
        gpus_per_run: Ray only: GPUs each run's task asks for (default 1 where this machine sees a GPU, else 0).
        retry_failed: Run failed runs again.
        progress: Progress bars (quiet when stderr is not a terminal).
        command: The command line to print in the report (default: this process's).
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
            run), or, with ``report_only``, an ``out`` that holds no grid.
        GridBusyError: Another process writes ``out`` (one line naming it; a ``FileExistsError``).
        ImportError: ``executor="ray"`` without Ray installed (naming the extra).
        ConnectionError: ``executor="ray"`` and ``RAY_ADDRESS`` names a cluster that does not answer.
    """
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
    command = command or _this_command()
    with grid_lock(out, command):  # one writer: the state, the runs and the report
        if report_only:
            state = _read_state(out)  # as it is now that this process holds the folder
            command = state["command"]
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
    the command's ``--out`` naming ``out``.

    Args:
        name: The experiment.
        source: The folder copied back (a grid's folder, or a folder of run folders).
        out: The grid's folder (created when new).
        profile: The profile (None: ``out``'s, else ``source``'s).
        data_dirs: Data folders, as for :func:`reproduce` (the report's figures may read data).

    Returns:
        What was merged and left out, and the path of the rewritten ``report.md``.

    Raises:
        ValueError: A bad name or profile, a ``source`` that is no folder, or a new ``out`` with no profile named
            and no state in ``source`` (one line).
    """
    experiment = get_experiment(name)
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
    with grid_lock(out, _this_command()):
        if state is None:
            same = theirs is not None and theirs["profile"] == chosen.name
            seeds = theirs["seeds"] if same else chosen.seeds
            command = (
                _with_out(theirs["command"], out)
                if same
                else shlex.join(["pyro-bnn", "reproduce", experiment.name, "--profile", chosen.name, "--out", str(out)])
            )
            state = {"experiment": experiment.name, "profile": chosen.name, "seeds": seeds, "command": command}
            write_json_atomically(out / STATE, state)
        specs = plan(experiment, chosen, state["seeds"], data_dirs or {}, None)
        summary = merge_runs(source, out, specs)
    report = reproduce(name, profile=chosen.name, out=out, report_only=True, data_dirs=data_dirs)
    return summary, report


def _with_out(command: str, out: Path) -> str:
    """``command`` with its ``--out`` value replaced by ``out``."""
    words = shlex.split(command)
    for index, word in enumerate(words):
        if word == "--out" and index + 1 < len(words):
            words[index + 1] = str(out)
        elif word.startswith("--out="):
            words[index] = f"--out={out}"
    return shlex.join(words)


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
