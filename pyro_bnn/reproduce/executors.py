"""Executors: the same list of run specs in, the same records out, however the runs are spread.

- ``local`` (:class:`LocalExecutor`): in this process one after another (``workers=1``), or a pool of ``workers``
  processes, each with ``cores // workers`` torch threads so the pool does not oversubscribe the machine.
- ``ray`` (:class:`RayExecutor`): each run a Ray task. ``ray.init()`` joins the cluster named by ``RAY_ADDRESS`` when
  it is set and starts a local instance otherwise. On a cluster, ``--out`` must be a folder every node sees (a
  shared file system), since each task writes its run folder where it runs.

The rest of the code never asks which executor ran: each yields :class:`~.spec.RunRecord` as runs finish.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from enum import Enum
from pathlib import Path
from typing import Protocol

from pyro_bnn.experiments.batched_runs import auto_batch_runs, batch_key
from pyro_bnn.reproduce.records import execute_batch, execute_run, record_failure
from pyro_bnn.reproduce.spec import RunRecord, RunSpec


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
(:func:`~pyro_bnn.experiments.batched_runs.auto_batch_runs`)."""


def group_specs(specs: list[RunSpec], batch_runs: int | str) -> list[list[RunSpec]]:
    """``specs`` in groups that train as one batch: compatible runs (equal
    :func:`~pyro_bnn.experiments.batched_runs.batch_key`) in chunks of at most ``batch_runs`` (``"auto"``: a size
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


def _execute_group(group: list[RunSpec], runs_dir, *, progress: bool, threads: int | None = None) -> list[RunRecord]:
    """The records of one group: :func:`execute_run` for a single run, :func:`execute_batch` for several."""
    if len(group) == 1:
        return [execute_run(group[0], runs_dir, progress=progress, threads=threads)]
    return execute_batch(group, runs_dir, progress=progress, threads=threads)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _check_workers(workers: int | None) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")


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


class LocalExecutor:
    """Runs in this process (``workers=1``) or in a pool of ``workers`` spawned processes; with ``batch_runs`` > 1,
    compatible runs train together in batches of up to that many (:mod:`pyro_bnn.batched`)."""

    def __init__(self, workers: int = 1, *, batch_runs: int | str = 1) -> None:
        _check_workers(workers)
        self.workers = workers
        self.batch_runs = check_batch_runs(batch_runs)

    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        """Yields each spec's record as its run finishes (in order when in-process; a pool worker that dies
        gives each run of its group a ``failed`` record)."""
        groups = group_specs(specs, self.batch_runs)
        if self.workers == 1 or len(groups) <= 1:
            for group in groups:
                yield from _execute_group(group, runs_dir, progress=progress)
            return
        threads = max(1, _cores() // self.workers)
        # spawn, not fork: a forked child inherits torch's thread pools and OpenMP state mid-flight.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
            futures = {
                pool.submit(_execute_group, group, runs_dir, progress=False, threads=threads): group for group in groups
            }
            try:
                for future in as_completed(futures):
                    try:
                        yield from future.result()
                    except Exception as err:  # the worker died (out of memory, a crash): its runs failed
                        for spec in futures[future]:
                            yield record_failure(spec, runs_dir, err)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise


def import_ray():
    """Ray, or a one-line ImportError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            "the ray executor needs Ray, which is not installed: pip install 'pyro-bnn[ray]' (or pip install ray)"
        ) from None
    return ray


class RayExecutor:
    """Each run a Ray task with ``cpus_per_run`` CPUs (its torch threads) and ``gpus_per_run`` GPUs.

    Args:
        workers: Runs in flight at once (None: as many as the cluster schedules).
        cpus_per_run: CPUs each task asks for; its torch threads are set to this.
        gpus_per_run: GPUs each task asks for (a run with ``device=auto`` then trains on it).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        cpus_per_run: int = 1,
        gpus_per_run: float = 0,
        batch_runs: int | str = 1,
    ) -> None:
        _check_workers(workers)
        batch_runs = check_batch_runs(batch_runs)
        if isinstance(cpus_per_run, bool) or not isinstance(cpus_per_run, int) or cpus_per_run < 1:
            raise ValueError(f"cpus_per_run must be an int >= 1, got {cpus_per_run!r}")
        if not (isinstance(gpus_per_run, (int, float)) and gpus_per_run >= 0):
            raise ValueError(f"gpus_per_run must be a number >= 0, got {gpus_per_run!r}")
        self.ray = import_ray()
        self.workers = workers
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run
        self.batch_runs = batch_runs

    def _init(self) -> None:
        if self.ray.is_initialized():
            return
        if os.environ.get("RAY_ADDRESS"):
            self.ray.init()  # joins the cluster RAY_ADDRESS names
        else:
            self.ray.init(include_dashboard=False, log_to_driver=False, num_cpus=_cores())

    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        if not specs:
            return
        self._init()
        # One task per group: a batch of compatible runs trains in one task (on one worker, one GPU).
        task = self.ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=0)(_execute_group)
        waiting = group_specs(specs, self.batch_runs)
        limit = self.workers or len(waiting)
        in_flight: dict = {}
        runs_dir = Path(runs_dir).resolve()  # tasks may start in another working folder, or on another node
        try:
            while waiting or in_flight:
                while waiting and len(in_flight) < limit:
                    group = waiting.pop(0)
                    ref = task.remote(group, str(runs_dir), progress=False, threads=self.cpus_per_run)
                    in_flight[ref] = group
                done, _ = self.ray.wait(list(in_flight), num_returns=1)
                group = in_flight.pop(done[0])
                try:
                    yield from self.ray.get(done[0])
                except Exception as err:  # the task's worker died: its runs failed
                    for spec in group:
                        yield record_failure(spec, runs_dir, err)
        except BaseException:
            for ref in in_flight:
                self.ray.cancel(ref, force=True)
            raise


def make_executor(
    kind: ExecutorKind | str,
    workers: int | None = None,
    gpus_per_run: float | None = None,
    batch_runs: int | str = 1,
) -> Executor:
    """The executor ``kind`` (``local`` or ``ray``) with ``workers`` runs (or batches) at once (local default 1).

    ``gpus_per_run`` (Ray only): GPUs each task asks for; None: 1 when this machine sees a GPU, else 0 (Ray hides
    every GPU from a task that asks for none, so its runs would train on the CPU). ``batch_runs``: compatible runs
    train in batches of up to this many (1: one by one; ``"auto"``: as many as fit in memory).
    """
    try:
        kind = ExecutorKind(kind)
    except ValueError:
        raise ValueError(f"unknown executor {kind!r}; expected 'local' or 'ray'") from None
    if kind is ExecutorKind.RAY:
        if gpus_per_run is None:
            import torch

            gpus_per_run = 1 if torch.cuda.is_available() else 0
        return RayExecutor(workers, gpus_per_run=gpus_per_run, batch_runs=batch_runs)
    if gpus_per_run:
        raise ValueError("gpus_per_run is a Ray setting; local runs use --device")
    return LocalExecutor(1 if workers is None else workers, batch_runs=batch_runs)
