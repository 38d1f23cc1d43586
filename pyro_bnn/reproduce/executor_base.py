"""What every executor shares: the :class:`Executor` protocol and :class:`ExecutorKind`, the grouping of a grid's
specs into batches of compatible runs (:func:`group_specs`), the execution of one group wherever it lands (this
process, a pool worker or a Ray task), and the checks of the executors' settings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Protocol

from pyro_bnn.checks import positive_int
from pyro_bnn.reproduce.planned import RunRecord, RunSpec
from pyro_bnn.reproduce.records import execute_batch, execute_run, inherit_code_version
from pyro_bnn.reproduce.registries import Registries, adopt_registries, parent_registries
from pyro_bnn.runs.batched_runs import auto_batch_runs, batch_key


class ExecutorKind(str, Enum):
    """Where the runs of a grid execute."""

    LOCAL = "local"
    """This machine: in-process, or a process pool with ``workers`` > 1."""
    RAY = "ray"
    """Ray tasks, on a local instance or the cluster at ``RAY_ADDRESS`` (``pip install 'pyro-bnn[ray]'``)."""


class Executor(Protocol):
    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        """Executes ``specs`` into ``runs_dir`` and yields each record as its run finishes (``progress``: the
        runs' own bars, where they can be shown)."""
        ...


AUTO = "auto"
"""``batch_runs="auto"``: as many compatible runs per batch as fit in memory
(:func:`~pyro_bnn.runs.batched_runs.auto_batch_runs`)."""


def group_specs(specs: list[RunSpec], batch_runs: int | str) -> list[list[RunSpec]]:
    """``specs`` in groups that train as one batch: compatible runs (equal
    :func:`~pyro_bnn.runs.batched_runs.batch_key`) in chunks of at most ``batch_runs`` (``"auto"``: a size
    per kind of run from its memory estimate), in the order their first run appears; ensembles, runners and runs
    that train alone in groups of one."""
    if batch_runs == 1:
        return [[spec] for spec in specs]
    groups: dict[object, list[list[RunSpec]]] = {}
    sizes: dict[object, int] = {}
    order: list[list[RunSpec]] = []
    for spec in specs:
        key = batch_key(spec.config) if spec.trains else None
        if key is None:
            order.append([spec])
            continue
        if key not in sizes:
            sizes[key] = auto_batch_runs(spec.config) if batch_runs == AUTO else batch_runs
        chunks = groups.setdefault(key, [])
        if not chunks or len(chunks[-1]) >= sizes[key]:
            chunks.append([])
            order.append(chunks[-1])
        chunks[-1].append(spec)
    return order


def _execute_group(
    group: list[RunSpec],
    runs_dir,
    *,
    progress: bool,
    threads: int | None = None,
    retried: str = "",
    code: tuple[str, str] = ("", ""),
    registries: Registries | None = None,
) -> list[RunRecord]:
    """The records of one group: :func:`execute_run` for a single run, :func:`execute_batch` for several
    (``retried``: why this is the group's second attempt, kept in each record; ``code``: the grid's code version
    and training code, which a Ray task names instead of reading its own checkout; ``registries``: the parent's
    measurements, runners, objectives and guides registered from outside pyro_bnn that the grid's runs use
    (:func:`_registries`), which a worker process registers before it runs the group)."""
    if code[0]:
        inherit_code_version(*code)
    if registries is not None:
        adopt_registries(*registries)
    if len(group) == 1:
        return [execute_run(group[0], runs_dir, progress=progress, threads=threads, retried=retried)]
    return execute_batch(group, runs_dir, progress=progress, threads=threads, retried=retried)


def _registries(specs: list[RunSpec]) -> Registries:
    """This process's registrations that ``specs`` use and a worker (a spawned process or a Ray task) lacks
    (:mod:`pyro_bnn.reproduce.registries`): their functions travel by module and name.

    Raises:
        ValueError: One of them cannot travel (a lambda), before any run starts (one line naming it).
    """
    return parent_registries(specs)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _check_workers(workers: int | None) -> None:
    if workers is not None:
        positive_int(workers, "workers")


def _check_threads(threads: int) -> None:
    positive_int(threads, "threads")


def check_batch_runs(batch_runs: int | str) -> int | str:
    """``batch_runs`` as an int >= 1 or ``"auto"`` (a string of digits is read as the int).

    Raises:
        ValueError: Anything else, in one line.
    """
    if isinstance(batch_runs, str) and batch_runs.strip().isdigit():
        batch_runs = int(batch_runs)
    if batch_runs == AUTO:
        return batch_runs
    if isinstance(batch_runs, bool) or not isinstance(batch_runs, int) or batch_runs < 1:
        raise ValueError(f"batch_runs must be an int >= 1 or 'auto', got {batch_runs!r}")
    return batch_runs
