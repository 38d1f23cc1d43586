"""The ``ray`` executor (:class:`RayExecutor`): each group of runs a Ray task, on a local instance or the cluster
``RAY_ADDRESS`` names. The executor joins (or starts) Ray when it is made, before a grid writes anything: a cluster
that does not answer, or answers but not as Ray, is refused in one line within :data:`RAY_CONNECT_SECONDS`, and so is
a task that asks for more CPUs or GPUs than any node has (Ray would wait for such a node forever). On a cluster,
``--out`` must be a folder every node sees (a shared file system), since each task writes its run folder where it
runs. A task whose worker or node is lost is run once more.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
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
from pyro_bnn.reproduce.records import (
    Attempt,
    code_version,
    one_line,
    record_failure,
    training_code,
    without_machine,
)


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


HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""The HTTP/2 client preface and an empty SETTINGS frame: a Ray head (its GCS, or a ``ray://`` client server) speaks
gRPC, which answers them with a SETTINGS frame of its own; a service of another kind does not."""


def _greet(endpoint: tuple[str, int], timeout: float) -> str:
    """Empty when ``endpoint`` accepts a connection and answers :data:`HTTP2_GREETING` as a gRPC server does, within
    ``timeout`` s in all; else what went wrong, in a few words."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(endpoint, timeout=timeout) as conn:
            conn.sendall(HTTP2_GREETING)
            header = b""
            while len(header) < 9:  # a frame header: length (3 bytes), type (1), flags (1), stream (4)
                conn.settimeout(max(deadline - time.monotonic(), 0.01))
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    return "it answers, but closed the connection without speaking gRPC, as a Ray head does"
                header += chunk
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as err:
        return f"{err.strerror or one_line(err)}, within {timeout:g} s"
    if header[3] != 4:  # not a SETTINGS frame
        return "it answers, but not in gRPC, as a Ray head does"
    return ""


def _connects(endpoint: tuple[str, int], timeout: float) -> str:
    """Empty when ``endpoint`` accepts a connection within ``timeout`` s; else why not, in a few words."""
    try:
        with socket.create_connection(endpoint, timeout=timeout):
            return ""
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as err:
        return f"{err.strerror or one_line(err)}, within {timeout:g} s"


def check_ray_address(timeout: float = RAY_CONNECT_SECONDS) -> None:
    """Checks that the cluster ``RAY_ADDRESS`` names (when set to a ``host:port``) accepts a connection and answers
    it as a Ray head does (in gRPC), so that a wrong address is refused in one line rather than by Ray's own retries
    (minutes). A gRPC service that is not Ray passes; :meth:`RayExecutor._init` then waits on Ray. With
    ``RAY_USE_TLS`` set the head expects a TLS handshake first, and only the connection is checked.

    Raises:
        ConnectionError: One line naming the address, what happened and the two ways on, within ``timeout`` s.
    """
    address = os.environ.get("RAY_ADDRESS", "")
    endpoint = _ray_endpoint(address) if address else None
    if endpoint is None:
        return
    if os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true"):
        # A head serving TLS expects a handshake before any gRPC: only whether it accepts a connection is checked.
        reason = _connects(endpoint, timeout)
    else:
        reason = _greet(endpoint, timeout)
    if reason:
        raise ConnectionError(
            f"cannot reach the Ray cluster at RAY_ADDRESS={address} ({reason}): start it "
            "(ray start --head) or unset RAY_ADDRESS to run on a local Ray instance"
        )


def _join_failure(address: str, err: Exception) -> str:
    """The one line for a ``ray.init()`` that could not join the cluster ``RAY_ADDRESS`` names."""
    if address == "auto" and isinstance(err, ConnectionError):  # Ray found no cluster started on this machine
        return (
            "RAY_ADDRESS=auto, but no Ray cluster runs on this machine: start one (ray start --head), name its "
            "address in RAY_ADDRESS, or unset RAY_ADDRESS to run on a local Ray instance"
        )
    return (
        f"cannot join the Ray cluster at RAY_ADDRESS={address} ({one_line(err)[:300]}): check the address, or unset "
        "RAY_ADDRESS to run on a local Ray instance"
    )


class RayExecutor:
    """Each group of runs (a run, or a batch of compatible runs) a Ray task with ``cpus_per_run`` CPUs (its torch
    threads) and ``gpus_per_run`` GPUs.

    Made, it joins the cluster ``RAY_ADDRESS`` names or starts a local instance (once per process), so that a cluster
    it cannot use is refused before a grid writes anything. A task whose worker process or node is lost (killed, out
    of memory, a node gone) is submitted once more; its runs' records say so (``retried``), and a second loss fails
    them. A run that raises fails as usual.

    Args:
        workers: Runs in flight at once (None: as many as the cluster schedules).
        cpus_per_run: CPUs each task asks for (``--threads``); its torch threads are set to this.
        gpus_per_run: GPUs each task asks for (a run with ``device=auto`` then trains on it).

    Raises:
        ConnectionError: ``RAY_ADDRESS`` names a cluster that does not answer, answers but not as Ray
            (:func:`check_ray_address`), or that Ray cannot join (``auto`` with no cluster running here).
        ValueError: A task would ask for more CPUs or GPUs than any node of the cluster has, which Ray would wait
            for forever.
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
        if isinstance(gpus_per_run, bool) or not (isinstance(gpus_per_run, (int, float)) and gpus_per_run >= 0):
            raise ValueError(f"--gpus-per-run must be a number >= 0, got {gpus_per_run!r}")
        self.ray = import_ray()
        self.workers = workers
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run
        self.batch_runs = batch_runs
        self._where = "the Ray cluster"  # what _check_fits names
        self._fits = False  # checked once: run() joins again
        self._init()

    def _init(self) -> None:
        """Joins (or starts) Ray unless this process already has, then checks that a task fits on a node."""
        address = os.environ.get("RAY_ADDRESS", "").strip()
        if not address:  # a local instance, started here or earlier in this process: it gains no node
            self._where = "the local Ray instance"
        if not self.ray.is_initialized():
            if address:
                check_ray_address()
                try:
                    self.ray.init()  # joins the cluster RAY_ADDRESS names
                except Exception as err:
                    raise ConnectionError(_join_failure(address, err)) from None
            else:
                self._check_fits([{"CPU": _cores()}], "this machine", gpus=False)  # before starting Ray on it
                self.ray.init(include_dashboard=False, log_to_driver=False, num_cpus=_cores())
        if self._fits:
            return
        nodes = [node.get("Resources", {}) for node in self.ray.nodes() if node.get("Alive", True)]
        try:
            self._check_fits(nodes, self._where)
        except ValueError as err:
            if not address:
                raise
            # A cluster joined may start nodes as tasks ask for them (an autoscaler): a task no node holds now is
            # said, not refused.
            need = str(err).split(", so ")[0].split(": no node")[0]
            warnings.warn(f"{need}: its tasks wait until the cluster starts a node that holds one", stacklevel=2)
        self._fits = True

    def _check_fits(self, nodes: list[dict[str, float]], where: str, *, gpus: bool = True) -> None:
        """Refuses, in one line, a task no node of ``nodes`` (their resources) can hold: Ray would queue it forever,
        silently."""
        need = {"CPU": self.cpus_per_run, "GPU": self.gpus_per_run if gpus else 0}
        if any(all(node.get(key, 0) >= amount for key, amount in need.items()) for node in nodes):
            return
        largest = "" if len(nodes) <= 1 else " on its largest node"
        for key, flag in (("CPU", "--threads"), ("GPU", "--gpus-per-run")):
            most = max((node.get(key, 0) for node in nodes), default=0)
            if need[key] > most:
                if key == "GPU":
                    way = f"pass {flag} {most:g} or fewer" if most else f"pass {flag} 0 to train on the CPUs"
                else:
                    way = f"pass {flag} {int(most)} or fewer" if most >= 1 else "give the cluster a node with CPUs"
                raise ValueError(
                    f"{flag} {need[key]:g} asks each Ray task for {need[key]:g} {key}{'' if need[key] == 1 else 's'}, "
                    f"but {where} has {most:g}{largest}, so the task would wait forever; {way}"
                )
        raise ValueError(
            f"--threads {need['CPU']:g} with --gpus-per-run {need['GPU']:g}: no node of {where} has that many CPUs "
            "and GPUs at once, so each task would wait forever; ask for fewer"
        )

    def run(self, specs: list[RunSpec], runs_dir: Path, *, progress: bool) -> Iterator[RunRecord]:
        if not specs:
            return
        self._init()
        # One task per group: a batch of compatible runs trains in one task (on one worker, one GPU).
        task = self.ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=0)(_execute_group)
        waiting = [(group, "") for group in group_specs(specs, self.batch_runs)]
        code = (code_version(), training_code())  # what every task's records name
        registries = _registries(specs)  # refused here, before any task, when one cannot travel
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
                        lost = f"its worker was lost ({without_machine(one_line(err))[:200]})"
                        print(f"run {group[0].run_id}: {lost}; running it once more", file=sys.stderr)
                        waiting.insert(0, (group, lost))
                        continue
                yield from records
        except BaseException:
            for ref in in_flight:
                self.ray.cancel(ref, force=True)
            raise
