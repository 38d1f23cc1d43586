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

from pyro_bnn.reproduce.records import execute_run, record_failure
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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _check_workers(workers: int | None) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")


class LocalExecutor:
    """Runs in this process (``workers=1``) or in a pool of ``workers`` spawned processes."""

    def __init__(self, workers: int = 1) -> None:
        _check_workers(workers)
        self.workers = workers

    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        """Yields each spec's record as its run finishes (in order when in-process; a pool worker that dies
        gives its run a ``failed`` record)."""
        if self.workers == 1 or len(specs) <= 1:
            for spec in specs:
                yield execute_run(spec, runs_dir, progress=progress)
            return
        threads = max(1, _cores() // self.workers)
        # spawn, not fork: a forked child inherits torch's thread pools and OpenMP state mid-flight.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=context) as pool:
            futures = {
                pool.submit(execute_run, spec, runs_dir, progress=False, threads=threads): spec for spec in specs
            }
            try:
                for future in as_completed(futures):
                    try:
                        yield future.result()
                    except Exception as err:  # the worker died (out of memory, a crash): the run failed
                        yield record_failure(futures[future], runs_dir, err)
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

    def __init__(self, workers: int | None = None, *, cpus_per_run: int = 1, gpus_per_run: float = 0) -> None:
        _check_workers(workers)
        if isinstance(cpus_per_run, bool) or not isinstance(cpus_per_run, int) or cpus_per_run < 1:
            raise ValueError(f"cpus_per_run must be an int >= 1, got {cpus_per_run!r}")
        if not (isinstance(gpus_per_run, (int, float)) and gpus_per_run >= 0):
            raise ValueError(f"gpus_per_run must be a number >= 0, got {gpus_per_run!r}")
        self.ray = import_ray()
        self.workers = workers
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run

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
        task = self.ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=0)(execute_run)
        limit = self.workers or len(specs)
        waiting = list(specs)
        in_flight: dict = {}
        runs_dir = Path(runs_dir).resolve()  # tasks may start in another working folder, or on another node
        try:
            while waiting or in_flight:
                while waiting and len(in_flight) < limit:
                    spec = waiting.pop(0)
                    ref = task.remote(spec, str(runs_dir), progress=False, threads=self.cpus_per_run)
                    in_flight[ref] = spec
                done, _ = self.ray.wait(list(in_flight), num_returns=1)
                spec = in_flight.pop(done[0])
                try:
                    yield self.ray.get(done[0])
                except Exception as err:  # the task's worker died: the run failed
                    yield record_failure(spec, runs_dir, err)
        except BaseException:
            for ref in in_flight:
                self.ray.cancel(ref, force=True)
            raise


def make_executor(kind: ExecutorKind | str, workers: int | None = None, gpus_per_run: float | None = None) -> Executor:
    """The executor ``kind`` (``local`` or ``ray``) with ``workers`` runs at once (local default 1).

    ``gpus_per_run`` (Ray only): GPUs each task asks for; None: 1 when this machine sees a GPU, else 0 (Ray hides
    every GPU from a task that asks for none, so its runs would train on the CPU).
    """
    try:
        kind = ExecutorKind(kind)
    except ValueError:
        raise ValueError(f"unknown executor {kind!r}; expected 'local' or 'ray'") from None
    if kind is ExecutorKind.RAY:
        if gpus_per_run is None:
            import torch

            gpus_per_run = 1 if torch.cuda.is_available() else 0
        return RayExecutor(workers, gpus_per_run=gpus_per_run)
    if gpus_per_run:
        raise ValueError("gpus_per_run is a Ray setting; local runs use --device")
    return LocalExecutor(1 if workers is None else workers)
