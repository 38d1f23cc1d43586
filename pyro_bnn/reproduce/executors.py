"""Executors: the same list of run specs in, the same records out, however the runs are spread.

- ``local`` (:class:`LocalExecutor`): in this process one after another (``workers=1``), or a pool of ``workers``
  processes (at most one per core, and as many as the free memory holds), which end when this process ends.
- ``ray`` (:class:`RayExecutor`): each run a Ray task. ``ray.init()`` joins the cluster named by ``RAY_ADDRESS`` when
  it is set (refused in one line within :data:`RAY_CONNECT_SECONDS` when nothing answers there) and starts a local
  instance otherwise. On a cluster, ``--out`` must be a folder every node sees (a shared file system), since each
  task writes its run folder where it runs. A task whose worker or node is lost is run once more.

Every executor runs each run on ``threads`` torch threads (default 1), whatever else runs beside it: the thread
count changes the order of floating-point sums, so a run's numbers would otherwise depend on ``workers``.

The rest of the code never asks which executor ran: each yields :class:`~.spec.RunRecord` as runs finish.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from enum import Enum
from pathlib import Path
from typing import Protocol

from pyro_bnn.checks import positive_int
from pyro_bnn.reproduce.records import (
    Attempt,
    code_version,
    execute_batch,
    execute_run,
    inherit_code_version,
    one_line,
    record_failure,
    training_code,
)
from pyro_bnn.reproduce.registries import Registries, adopt_registries, parent_registries
from pyro_bnn.reproduce.spec import RunRecord, RunSpec
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
    measurements, runners, and guides and objectives registered from outside pyro_bnn, :func:`_registries`, which a
    worker process registers before it runs the group)."""
    if code[0]:
        inherit_code_version(*code)
    if registries is not None:
        adopt_registries(*registries)
    if len(group) == 1:
        return [execute_run(group[0], runs_dir, progress=progress, threads=threads, retried=retried)]
    return execute_batch(group, runs_dir, progress=progress, threads=threads, retried=retried)


def _registries() -> Registries:
    """This process's registrations a worker (a spawned process or a Ray task) lacks
    (:mod:`pyro_bnn.reproduce.registries`): their functions travel by module and name."""
    return parent_registries()


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


WORKER_MEMORY_BYTES = 2 << 30
"""Memory a pool worker is allowed for when capping ``workers``: a spawned process holding torch, Pyro and a full
image data set measured about 1.1 GB resident while training a 3FC on Fashion-MNIST, plus room for its run."""


def available_memory_bytes() -> int:
    """The memory new processes can take without swapping: ``MemAvailable`` on Linux (free plus reclaimable
    caches), else the free pages."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def capped_workers(requested: int, threads: int = 1) -> tuple[int, str]:
    """``(workers, note)``: ``requested`` capped at the cores (``cores // threads``) and at the workers the available
    memory holds (:data:`WORKER_MEMORY_BYTES` each), with a one-line note naming the limit that binds when it was
    capped."""
    cores = _cores()
    memory = available_memory_bytes()
    by_cores = max(1, cores // threads)
    by_memory = max(1, memory // WORKER_MEMORY_BYTES)
    workers = min(requested, by_cores, by_memory)
    if workers == requested:
        return workers, ""
    reasons = []  # the limits that bind
    if by_cores == workers:
        reasons.append(f"{cores} cores" + (f" at {threads} threads a run" if threads > 1 else ""))
    if by_memory == workers:
        reasons.append(f"{memory / 2**30:.1f} GiB available at {WORKER_MEMORY_BYTES / 2**30:.0f} GiB a worker")
    return workers, f"note: --workers {requested} capped at {workers} ({'; '.join(reasons)})"


WATCH_SECONDS = 0.5
"""How often a pool worker checks that the process that started it is still alive."""


def _start_worker(parent: int, code: str, training: str) -> None:
    """A pool worker's initializer: its records name the grid's code version (:func:`inherit_code_version`), and a
    daemon thread ends the worker within :data:`WATCH_SECONDS` of its parent's death, however the parent died
    (``kill -9`` runs no clean-up, and a worker would otherwise train its queue to the end and then wait on a closed
    pipe forever). An orphan is re-parented, so its parent id changes."""
    inherit_code_version(code, training)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_SECONDS)
        os._exit(1)  # no clean-up to run: the parent that would read the results is gone

    threading.Thread(target=watch, name="pyro-bnn-parent-watch", daemon=True).start()


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
    compatible runs train together in batches of up to that many (:mod:`pyro_bnn.batched`).

    Args:
        workers: Runs (or batches) at once; capped at the cores and the available memory
            (:func:`capped_workers`), with a note on stderr when that lowers it.
        batch_runs: Compatible runs per batch (1: each alone; ``"auto"``: as many as fit in memory).
        threads: torch threads of each run, in this process or a worker alike (restored after an in-process run).
    """

    def __init__(self, workers: int = 1, *, batch_runs: int | str = 1, threads: int = 1) -> None:
        _check_workers(workers)
        _check_threads(threads)
        self.workers = workers
        self.batch_runs = check_batch_runs(batch_runs)
        self.threads = threads
        self._noted = False

    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        """Yields each spec's record as its run finishes (in order when in-process; a pool worker that dies
        gives each run of its group a ``failed`` record)."""
        groups = group_specs(specs, self.batch_runs)
        workers, note = capped_workers(self.workers, self.threads) if self.workers > 1 else (1, "")
        if note and not self._noted:
            print(note, file=sys.stderr)
            self._noted = True
        workers = min(workers, len(groups))
        if workers <= 1:
            for group in groups:
                yield from _execute_group(group, runs_dir, progress=progress, threads=self.threads)
            return
        registries = _registries()
        # spawn, not fork: a forked child inherits torch's thread pools and OpenMP state mid-flight.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(os.getpid(), code_version(), training_code()),
        ) as pool:
            futures = {
                pool.submit(
                    _execute_group, group, runs_dir, progress=False, threads=self.threads, registries=registries
                ): group
                for group in groups
            }
            try:
                for future in as_completed(futures):
                    try:
                        yield from future.result()
                    except Exception as err:  # the worker died (out of memory, a crash): its runs failed
                        for spec in futures[future]:
                            yield record_failure(spec, runs_dir, err, attempt=Attempt(self.threads))
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


RAY_CONNECT_SECONDS = 10.0
"""How long :class:`RayExecutor` waits for the cluster that ``RAY_ADDRESS`` names to accept a connection before it
gives up in one line (Ray itself retries for minutes, printing its own time-outs)."""


def _ray_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``RAY_ADDRESS`` (``host:port`` or ``ray://host:port``); None for ``auto``/``local``
    and anything else Ray resolves itself."""
    text = address.strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme != "ray":
            return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def check_ray_address(timeout: float = RAY_CONNECT_SECONDS) -> None:
    """Checks that the cluster ``RAY_ADDRESS`` names (when set to a ``host:port``) accepts a connection.

    Raises:
        ConnectionError: One line naming the address, what happened and the two ways on, within ``timeout`` s.
    """
    address = os.environ.get("RAY_ADDRESS", "")
    endpoint = _ray_endpoint(address) if address else None
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=timeout).close()
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or one_line(err))
        raise ConnectionError(
            f"cannot reach the Ray cluster at RAY_ADDRESS={address} ({reason}, within {timeout:g} s): start it "
            "(ray start --head) or unset RAY_ADDRESS to run on a local Ray instance"
        ) from None


class RayExecutor:
    """Each run a Ray task with ``cpus_per_run`` CPUs (its torch threads) and ``gpus_per_run`` GPUs.

    A task whose worker process or node is lost (killed, out of memory, a node gone) is submitted once more; its
    runs' records say so (``retried``), and a second loss fails them. A run that raises fails as usual.

    Args:
        workers: Runs in flight at once (None: as many as the cluster schedules).
        cpus_per_run: CPUs each task asks for; its torch threads are set to this.
        gpus_per_run: GPUs each task asks for (a run with ``device=auto`` then trains on it).

    Raises:
        ConnectionError: ``RAY_ADDRESS`` names a cluster that does not answer (:func:`check_ray_address`).
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
        positive_int(cpus_per_run, "cpus_per_run")
        if not (isinstance(gpus_per_run, (int, float)) and gpus_per_run >= 0):
            raise ValueError(f"gpus_per_run must be a number >= 0, got {gpus_per_run!r}")
        self.ray = import_ray()
        check_ray_address()
        self.workers = workers
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run
        self.batch_runs = batch_runs

    def _init(self) -> None:
        if self.ray.is_initialized():
            return
        if os.environ.get("RAY_ADDRESS"):
            check_ray_address()  # again: the cluster may have gone since the executor was made
            self.ray.init()  # joins the cluster RAY_ADDRESS names
        else:
            self.ray.init(include_dashboard=False, log_to_driver=False, num_cpus=_cores())

    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        if not specs:
            return
        self._init()
        # One task per group: a batch of compatible runs trains in one task (on one worker, one GPU).
        task = self.ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=0)(_execute_group)
        waiting = [(group, "") for group in group_specs(specs, self.batch_runs)]
        code = (code_version(), training_code())  # what every task's records name
        registries = _registries()
        limit = self.workers or len(waiting)
        in_flight: dict = {}
        runs_dir = Path(runs_dir).resolve()  # tasks may start in another working folder, or on another node
        try:
            while waiting or in_flight:
                while waiting and len(in_flight) < limit:
                    group, retried = waiting.pop(0)
                    ref = task.remote(
                        group,
                        str(runs_dir),
                        progress=False,
                        threads=self.cpus_per_run,
                        retried=retried,
                        code=code,
                        registries=registries,
                    )
                    in_flight[ref] = (group, retried)
                done, _ = self.ray.wait(list(in_flight), num_returns=1)
                group, retried = in_flight.pop(done[0])
                try:
                    records = self.ray.get(done[0])
                except self.ray.exceptions.RayTaskError as err:  # raised by our own code: a bug, not a lost worker
                    attempt = Attempt(self.cpus_per_run, retried)
                    records = [record_failure(spec, runs_dir, err, attempt=attempt) for spec in group]
                except Exception as err:  # the worker or its node was lost
                    if retried:
                        attempt = Attempt(self.cpus_per_run, retried)
                        records = [record_failure(spec, runs_dir, err, attempt=attempt) for spec in group]
                    else:
                        lost = f"its worker was lost ({one_line(err)[:200]})"
                        print(f"run {group[0].run_id}: {lost}; running it once more", file=sys.stderr)
                        waiting.insert(0, (group, lost))
                        continue
                yield from records
        except BaseException:
            for ref in in_flight:
                self.ray.cancel(ref, force=True)
            raise


def make_executor(
    kind: ExecutorKind | str,
    workers: int | None = None,
    gpus_per_run: float | None = None,
    batch_runs: int | str = 1,
    threads: int = 1,
) -> Executor:
    """The executor ``kind`` (``local`` or ``ray``) with ``workers`` runs (or batches) at once (local default 1),
    each on ``threads`` torch threads (Ray: the CPUs each task asks for).

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
        _check_threads(threads)
        return RayExecutor(workers, cpus_per_run=threads, gpus_per_run=gpus_per_run, batch_runs=batch_runs)
    if gpus_per_run:
        raise ValueError("gpus_per_run is a Ray setting; local runs use --device")
    return LocalExecutor(1 if workers is None else workers, batch_runs=batch_runs, threads=threads)
