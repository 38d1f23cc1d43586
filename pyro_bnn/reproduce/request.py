"""A reproduce request, checked before anything runs: the experiment and profile it names (:func:`get_experiment`,
:func:`listing`), the grid folder's state file (``reproduce.json``: which experiment, profile and seeds it holds),
the data sets the grid reads, and its plan with the data folders and device filled in (:func:`plan`).

:mod:`pyro_bnn.reproduce.api` runs what is checked here; its names are importable from there too.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from pyro_bnn.checks import positive_int
from pyro_bnn.data import DatasetName, load_dataset
from pyro_bnn.reproduce.code_state import check_committed_training_code
from pyro_bnn.reproduce.executors import Executor, check_batch_runs, make_executor
from pyro_bnn.reproduce.lock import check_grid_free
from pyro_bnn.reproduce.papers import EXPERIMENTS
from pyro_bnn.reproduce.planned import Experiment, Profile, RunSpec
from pyro_bnn.runs.config import resolve_device
from pyro_bnn.runs.evaluate import DataDirs
from pyro_bnn.runs.evaluate import check_data_dirs as data_dir_entries
from pyro_bnn.runs.run_folder import check_not_a_run, check_writable

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


def _check_seeds(seeds: int | None, state: dict | None = None, out: object = None) -> None:
    """``seeds`` an int >= 1 where given, and not fewer than the grid in ``out`` already plans (its report would
    leave the later seeds' finished runs out without a word)."""
    if seeds is None:
        return
    positive_int(seeds, "seeds")
    if state is not None and seeds < state["seeds"]:
        raise ValueError(
            f"--seeds {seeds}: {out} holds a grid of {state['seeds']} seeds per cell, whose report would leave the "
            f"runs of the others out; leave out --seeds (or pass {state['seeds']} or more), or give a new --out"
        )


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


PACKAGE_MAIN = Path(__file__).resolve().parents[1] / "__main__.py"
"""``pyro_bnn/__main__.py``: ``sys.argv[0]`` under ``python -m pyro_bnn``."""


def _this_command() -> str:
    """This process's command line, as typed: ``pyro-bnn ...`` for the console script (or ``python -m
    pyro_bnn.cli``), ``python -m pyro_bnn ...`` for the package (whose ``sys.argv[0]`` is the absolute path of its
    ``__main__.py``), otherwise the interpreter's name and ``sys.argv``."""
    script = Path(sys.argv[0])
    if script.name in ("pyro-bnn", "cli.py"):
        return shlex.join(["pyro-bnn", *sys.argv[1:]])
    if script.name == "__main__.py" and script.resolve() == PACKAGE_MAIN:
        return shlex.join(["python", "-m", "pyro_bnn", *sys.argv[1:]])
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
    data_dirs = canonical_data_dirs(data_dirs)
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
    check_not_a_run(Path(out))
    check_grid_free(out)
    chosen, state = _check_state(Path(out), experiment, profile)
    if report_only and seeds is not None and state is not None:
        # the report covers the grid the folder holds; another seed count would report phantom missing runs
        raise ValueError(
            f"--report-only runs nothing: leave out --seeds {seeds} (the report covers the {state['seeds']} seed(s) "
            f"per cell {out} holds)"
        )
    _check_seeds(seeds, state, out)
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


def canonical_data_dirs(data_dirs: DataDirs | None) -> dict[str, str]:
    """``--data-dir`` entries (a mapping, or the command line's ``(name, path)`` pairs) keyed by the data sets'
    canonical names, as the grids' configs name them: ``fmnist=PATH`` is Fashion-MNIST's folder. Refuses, in one
    line, a name that is no data set read from files, or one data set given two folders."""
    if isinstance(data_dirs, (str, bytes, os.PathLike)):
        data_dir_entries(data_dirs)  # refused: a mapping or pairs is expected
    known, unknown = [], {}
    for entry in data_dirs.items() if isinstance(data_dirs, Mapping) else data_dirs or ():
        if isinstance(entry, (tuple, list)) and len(entry) == 2 and not _names_a_data_set(entry[0]):
            unknown[str(entry[0])] = os.fspath(entry[1])  # check_data_dirs names the sets the grid reads instead
        else:
            known.append(entry)
    return {**unknown, **{name: os.fspath(path) for name, path in data_dir_entries(known).items()}}


def _names_a_data_set(name: object) -> bool:
    try:
        DatasetName(name)
    except ValueError:
        return False
    return True


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
