"""Executors: the same list of run specs in, the same records out, however the runs are spread.

- ``local`` (:class:`LocalExecutor`): in this process one after another (``workers=1``), or a pool of ``workers``
  processes (at most one per core, and as many as the free memory holds), which end when this process ends.
- ``ray`` (:class:`RayExecutor`): each group of runs (a run, or a batch) a Ray task. Made, it joins the cluster named
  by ``RAY_ADDRESS`` when it is set (refused in one line within :data:`RAY_CONNECT_SECONDS` when nothing answers
  there as Ray) and starts a local instance otherwise, and refuses tasks larger than any node. On a cluster, ``--out``
  must be a folder every node sees (a shared file system), since each task writes its run folder where it runs. A
  task whose worker or node is lost is run once more.

Every executor runs each run on ``threads`` torch threads (default 1), whatever else runs beside it: the thread
count changes the order of floating-point sums, so a run's numbers would otherwise depend on ``workers``.

The rest of the code never asks which executor ran: each yields :class:`~.planned.RunRecord` as runs finish.

This module is the local executor and :func:`make_executor`; the Ray executor is :mod:`.ray_executor` and what both
share (the protocol, grouping runs into batches, one group's execution) :mod:`.executor_base`. Their names are
importable from here too.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pyro_bnn.reproduce.executor_base import AUTO as AUTO
from pyro_bnn.reproduce.executor_base import (
    Executor,
    ExecutorKind,
    _check_threads,
    _check_workers,
    _cores,
    _execute_group,
    _registries,
    check_batch_runs,
    group_specs,
)
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status
from pyro_bnn.reproduce.ray_executor import RAY_CONNECT_SECONDS as RAY_CONNECT_SECONDS
from pyro_bnn.reproduce.ray_executor import RayExecutor
from pyro_bnn.reproduce.ray_executor import check_ray_address as check_ray_address
from pyro_bnn.reproduce.ray_executor import import_ray as import_ray
from pyro_bnn.reproduce.records import Attempt, code_version, inherit_code_version, record_failure, training_code
from pyro_bnn.reproduce.registries import Registries

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


_started = None
"""In a pool worker: the queue on which it says which group it starts (:func:`_execute_in_worker`)."""


def _start_worker(parent: int, code: str, training: str, started=None) -> None:
    """A pool worker's initializer: its records name the grid's code version (:func:`inherit_code_version`), it
    keeps ``started`` (a queue) to say which group it starts, and a daemon thread ends the worker within
    :data:`WATCH_SECONDS` of its parent's death, however the parent died (``kill -9`` runs no clean-up, and a worker
    would otherwise train its queue to the end and then wait on a closed pipe forever). An orphan is re-parented, so
    its parent id changes."""
    global _started
    _started = started
    inherit_code_version(code, training)
    # Ctrl-C in a terminal reaches the whole process group: the parent stops the pool (run_grid's interrupt), while a
    # worker taking it would die part-way through whatever it was doing (an import, a record) and, as the pool
    # catches it, go on to its next run in a broken state and record that run as failed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_SECONDS)
        os._exit(1)  # no clean-up to run: the parent that would read the results is gone

    threading.Thread(target=watch, name="pyro-bnn-parent-watch", daemon=True).start()


def _execute_in_worker(index: int, group: list[RunSpec], runs_dir, **options) -> list[RunRecord]:
    """:func:`_execute_group` in a pool worker, which first says (on its ``started`` queue) that it runs group
    ``index``: the pool's own futures cannot tell a group a worker died running from one still queued."""
    if _started is not None:
        _started.put((index, os.getpid()))
    return _execute_group(group, runs_dir, **options)


def _as_finished(futures) -> Iterator[Future]:
    """Each of ``futures`` as it finishes, as :func:`concurrent.futures.as_completed` yields them, but waiting at
    most :data:`WATCH_SECONDS` at a time. The kernel may hand a Ctrl-C to any thread that does not block it, the
    pool's own threads included, and Python raises KeyboardInterrupt in the main thread only when that thread next
    runs: an untimed wait held an interrupted grid until one of its runs finished (a stack dump of the interrupt
    test's grid showed its main thread still in ``as_completed`` 30 s after the SIGINT)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=WATCH_SECONDS, return_when=FIRST_COMPLETED)
        yield from done


STOP_SECONDS = 5.0
"""How long a terminated pool worker may take to end before it is killed (:func:`_reap`)."""


def _reap(workers) -> None:
    """Waits for the terminated pool ``workers`` (:class:`multiprocessing.Process`) to end, killing any still alive
    after :data:`STOP_SECONDS` in all. The pool's exit and the interpreter's (``multiprocessing`` joins every live
    child at exit) wait for each of them, so one that outlived its SIGTERM would keep the interrupted grid alive for
    as long as its run trains."""
    deadline = time.monotonic() + STOP_SECONDS
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.is_alive():
            worker.kill()
            worker.join()


def _worker_death(exitcode: int | None) -> str:
    """How a pool worker ended, in a few words (``exitcode`` as :class:`multiprocessing.Process` gives it)."""
    if exitcode is None:
        return "how, unknown"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}" + (": out of memory, or kill -9" if exitcode == -signal.SIGKILL else "")
    return f"exit status {exitcode}"


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
        """Yields each spec's record as its run finishes (in order when in-process).

        In a pool, a pool worker that dies (killed, out of memory, ``os._exit``) gives each run of the group it was
        running a ``failed`` record saying so. The pool stops its other workers then; their groups run again, from
        their checkpoints, in a new pool, with the groups not started yet."""
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
        # What the runs use of this process's registrations, checked to travel before any run starts.
        registries = _registries(specs)
        todo = list(range(len(groups)))  # the groups not recorded yet
        while todo:
            stopped = yield from self._pool_round(groups, todo, runs_dir, workers, registries)
            if stopped is None:
                return
            if stopped:  # the pool broke before any of its groups finished: no new pool would fare better
                print(
                    f"the process pool broke before any run finished; {sum(len(groups[i]) for i in todo)} run(s) "
                    "left to a rerun",
                    file=sys.stderr,
                )
                for index in todo:
                    for spec in groups[index]:
                        yield RunRecord(spec, Status.MISSING, reason="its process pool broke before it finished")
                return

    def _pool_round(
        self, groups: list[list[RunSpec]], todo: list[int], runs_dir: Path, workers: int, registries: Registries
    ):
        """Runs the groups ``todo`` (indexes into ``groups``) in a new pool, each given ``registries``, yielding their
        records and removing each recorded group from ``todo``. Returns None when the pool ended whole, else whether it
        broke without any group recorded (the groups it was running in its other workers, and those it had not
        started, stay in ``todo``)."""
        # spawn, not fork: a forked child inherits torch's thread pools and OpenMP state mid-flight.
        context = multiprocessing.get_context("spawn")
        started = context.SimpleQueue()  # (group, worker pid) as each group starts
        children_before = set(multiprocessing.active_children())
        broken: list[int] = []
        recorded = 0
        with ProcessPoolExecutor(
            max_workers=min(workers, len(todo)),
            mp_context=context,
            initializer=_start_worker,
            initargs=(os.getpid(), code_version(), training_code(), started),
        ) as pool:
            futures = {
                pool.submit(
                    _execute_in_worker,
                    index,
                    groups[index],
                    runs_dir,
                    progress=False,
                    threads=self.threads,
                    registries=registries,
                ): index
                for index in todo
            }
            pool_workers = set(multiprocessing.active_children()) - children_before  # started by the first submit
            try:
                for future in _as_finished(futures):
                    index = futures[future]
                    try:
                        records = future.result()
                    except BrokenProcessPool:  # a worker died: sorted out below, once the pool has stopped
                        broken.append(index)
                        continue
                    except (Exception, SystemExit) as err:  # the group's own error outside its runs' (a result
                        attempt = Attempt(self.threads)  # that could not travel back): its runs failed
                        records = [record_failure(spec, runs_dir, err, attempt=attempt) for spec in groups[index]]
                    todo.remove(index)
                    recorded += 1
                    yield from records
            except BaseException:  # Ctrl-C, or the caller stopped reading: stop the workers now
                pool.shutdown(wait=False, cancel_futures=True)
                # Their runs resume from their last checkpoints; waiting for them to finish (the pool's own exit)
                # took seconds and could hang on a worker blocked reading its queue. The pool has no public way to
                # stop its processes, so they are found as this process's children started with it.
                stopping = set(multiprocessing.active_children()) - children_before
                for child in stopping:
                    child.terminate()
                _reap(stopping)
                raise
        if not broken:
            return None
        running = {}  # group -> the pid of the worker that started it
        while not started.empty():
            index, pid = started.get()
            running[index] = pid
        exitcodes = {process.pid: process.exitcode for process in pool_workers}
        for index in broken:
            if index not in running:
                continue  # not started: it runs in the next pool
            exitcode = exitcodes.get(running[index])
            if exitcode == -signal.SIGTERM:
                continue  # stopped by the pool (it terminates its other workers when one dies): it runs again
            died = BrokenProcessPool(f"its pool worker died while running it ({_worker_death(exitcode)})")
            attempt = Attempt(self.threads)
            todo.remove(index)
            recorded += 1
            for spec in groups[index]:
                yield record_failure(spec, runs_dir, died, attempt=attempt)
        return recorded == 0


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
        shown = f"{gpus_per_run:g}" if isinstance(gpus_per_run, (int, float)) else repr(gpus_per_run)
        raise ValueError(f"--gpus-per-run {shown} is a setting of --executor ray; local runs use --device")
    return LocalExecutor(1 if workers is None else workers, batch_runs=batch_runs, threads=threads)
