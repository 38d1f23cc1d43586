"""The ``ray`` executor (:class:`RayExecutor`): each group of runs a Ray task, on a local instance or the cluster
``RAY_ADDRESS`` names (refused in one line within :data:`RAY_CONNECT_SECONDS` when nothing answers there). On a
cluster, ``--out`` must be a folder every node sees (a shared file system), since each task writes its run folder
where it runs. A task whose worker or node is lost is run once more.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from pyro_bnn.checks import positive_int
from pyro_bnn.reproduce.executor_base import (
    _check_workers,
    _cores,
    _execute_group,
    _registries,
    check_batch_runs,
    group_specs,
)
from pyro_bnn.reproduce.planned import RunRecord, RunSpec
from pyro_bnn.reproduce.records import Attempt, code_version, one_line, record_failure, training_code


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
