"""Executors under faults: a Ray task no node can hold, a RAY_ADDRESS that is not a Ray cluster, a pool worker that
dies, a run that calls sys.exit, the machine's traces in a failure's record, and settings the executors cannot use.
Ray is a stand-in module here (no cluster starts); the pool tests spawn real workers running runners that return at
once."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from pyro_bnn.cli import main
from pyro_bnn.reproduce import LocalExecutor, Status, make_executor, request, run_grid
from pyro_bnn.reproduce import ray_executor as ray_module
from pyro_bnn.reproduce.records import record_failure
from pyro_bnn.runs.config import RunConfig, resolve_device

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # the pool's spawned workers import the runners from there too
from executor_helpers import runner_spec  # noqa: E402


class FakeRay(types.ModuleType):
    """What RayExecutor uses of Ray: ``init`` (raising ``init_error`` when given), ``nodes`` (one per entry of
    ``nodes``, its resources) and ``is_initialized``; submitting a task is an error."""

    def __init__(self, nodes=({"CPU": 2.0},), init_error: Exception | None = None) -> None:
        super().__init__("ray")
        self.initialized, self.inits = False, []
        self._nodes, self.init_error = list(nodes), init_error
        self.exceptions = types.SimpleNamespace(RayTaskError=type("RayTaskError", (Exception,), {}))

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, *args, **kwargs) -> None:
        self.inits.append(kwargs)
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nodes(self) -> list[dict]:
        return [{"Alive": True, "Resources": dict(resources)} for resources in self._nodes]

    def remote(self, *args, **kwargs):
        raise AssertionError("a task was submitted")


@pytest.fixture
def fake_ray(monkeypatch):
    def install(**kwargs) -> FakeRay:
        ray = FakeRay(**kwargs)
        monkeypatch.setitem(sys.modules, "ray", ray)
        return ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_module, "_cores", lambda: 2)
    return install


# -- Ray: a task no node can hold -------------------------------------------------------------------------------------


def test_more_threads_than_this_machine_s_cores_are_refused_before_ray_starts(fake_ray):
    ray = fake_ray()
    with pytest.raises(ValueError, match=r"^--threads 3 asks each Ray task for 3 CPUs, but this machine has 2,"):
        make_executor("ray", threads=3, gpus_per_run=0)
    assert ray.inits == []  # refused without starting a local instance


def test_a_gpu_the_cluster_lacks_is_refused_naming_the_option(fake_ray):
    fake_ray(nodes=[{"CPU": 2.0}])
    with pytest.raises(ValueError, match=r"--gpus-per-run 1 asks each Ray task for 1 GPU, but the local Ray instance"):
        make_executor("ray", gpus_per_run=1)


def test_a_task_no_node_of_a_cluster_holds_now_is_warned_about(fake_ray, monkeypatch):
    # a cluster joined may start a node when tasks ask for one (an autoscaler with GPU workers): warned, not refused
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    fake_ray(nodes=[{"CPU": 2.0}, {"CPU": 2.0}])  # 4 CPUs, but 2 a node
    expected = r"^--threads 3 .* the Ray cluster has 2 on its largest node: its tasks wait until the cluster starts"
    with pytest.warns(UserWarning, match=expected):
        assert make_executor("ray", threads=3, gpus_per_run=0).cpus_per_run == 3
    assert make_executor("ray", threads=2, gpus_per_run=0).cpus_per_run == 2


def test_a_local_instance_started_earlier_still_refuses_a_task_it_cannot_hold(fake_ray):
    # the second executor found Ray initialised and took it for a cluster that might grow: a warning, then a hang
    fake_ray(nodes=[{"CPU": 2.0}])
    make_executor("ray", threads=2, gpus_per_run=0)
    with pytest.raises(ValueError, match=r"^--threads 3 asks each Ray task for 3 CPUs, but the local Ray instance"):
        make_executor("ray", threads=3, gpus_per_run=0)


def test_a_refused_ray_grid_writes_nothing_and_reads_no_data(fake_ray, tmp_path, capsys, monkeypatch):
    fake_ray(nodes=[{"CPU": 2.0}])

    def no_data(*args, **kwargs):
        raise AssertionError("data read before the executor was checked")

    monkeypatch.setattr(request, "check_data", no_data)
    out = tmp_path / "o"
    assert main(["reproduce", "leaky-calibration", "--executor", "ray", "--gpus-per-run", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--gpus-per-run 1 asks each Ray task for 1 GPU" in err, err
    assert not out.exists()


# -- Ray: RAY_ADDRESS names no Ray cluster ----------------------------------------------------------------------------


def _serve(reply: bytes | None) -> tuple[int, threading.Event]:
    """A local server that accepts connections and sends ``reply`` to each (None: nothing); its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    stop, held = threading.Event(), []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)
        server.close()
        for conn in held:
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], stop


@pytest.mark.parametrize(
    ("reply", "words"),
    [(None, "no answer within 1 s"), (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it answers, but not in gRPC")],
)
def test_a_service_that_is_not_ray_is_refused_in_one_line_within_the_time_limit(monkeypatch, reply, words):
    port, stop = _serve(reply)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    start = time.monotonic()
    try:
        with pytest.raises(ConnectionError) as caught:
            ray_module.check_ray_address(timeout=1.0)
    finally:
        stop.set()
    assert time.monotonic() - start < 5
    message = str(caught.value)
    assert (
        "\n" not in message and f"RAY_ADDRESS=127.0.0.1:{port} ({words}" in message and "unset RAY_ADDRESS" in message
    )


def test_a_head_serving_tls_is_checked_for_a_connection_only(monkeypatch):
    # it expects a TLS handshake first: the gRPC greeting was reset, and a TLS cluster refused as unreachable
    port, stop = _serve(b"\x15\x03\x03\x00\x02\x02\x32")  # a TLS alert, as to a client that is not TLS
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    monkeypatch.setenv("RAY_USE_TLS", "1")
    try:
        ray_module.check_ray_address(timeout=2.0)
    finally:
        stop.set()


def test_a_grpc_server_passes_the_address_check(monkeypatch):
    port, stop = _serve(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an empty SETTINGS frame, as a gRPC server sends first
    monkeypatch.setenv("RAY_ADDRESS", f"ray://127.0.0.1:{port}")
    try:
        ray_module.check_ray_address(timeout=5.0)
    finally:
        stop.set()


def test_ray_address_auto_with_no_cluster_is_one_line_before_anything_is_written(
    fake_ray, tmp_path, capsys, monkeypatch
):
    ray_message = (
        "Could not find any running Ray instance. Please specify the one to connect to by setting `--address` flag "
        "or `RAY_ADDRESS` environment variable."
    )
    ray = fake_ray(init_error=ConnectionError(ray_message))
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    monkeypatch.setattr(request, "check_data", lambda *args: None)
    out = tmp_path / "o"
    assert main(["reproduce", "leaky-calibration", "--executor", "ray", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "RAY_ADDRESS=auto, but no Ray cluster runs on this machine" in err, err
    assert "--address" not in err
    assert len(ray.inits) == 1 and not out.exists()  # no reproduce.json tying the folder to a profile


# -- the local pool ---------------------------------------------------------------------------------------------------


def test_a_dead_pool_worker_fails_only_its_run_and_the_grid_goes_on(tmp_path):
    slow = runner_spec("counts", "slow", after="dies")  # in flight in the other worker when that one dies
    dying = runner_spec("exits_hard", "dies")
    later = [runner_spec("counts", "later")]
    records = run_grid([slow, dying, *later], tmp_path, LocalExecutor(workers=2), progress=False)
    assert [r.status for r in records] == [Status.DONE, Status.FAILED, Status.DONE], [r.reason for r in records]
    assert records[1].reason == "BrokenProcessPool: its pool worker died while running it (exit status 9)"
    # the run the pool stopped with the dead worker ran again (resuming, for a training run); the others ran once
    assert [r.metrics["attempts"] for r in (records[0], records[2])] == [2, 1]


def test_a_run_s_sys_exit_fails_that_run_alone_and_ctrl_c_still_stops_the_grid(tmp_path):
    quitting, after = runner_spec("exits", "quits"), runner_spec("counts", "after")
    records = run_grid([quitting, after], tmp_path / "a", progress=False)
    assert [r.status for r in records] == [Status.FAILED, Status.DONE]
    assert records[0].reason == "SystemExit: 3"
    saved = json.loads((tmp_path / "a" / "runs" / quitting.run_id / "result.json").read_text())
    assert saved["status"] == "failed" and saved["reason"] == "SystemExit: 3"
    never = runner_spec("counts", "never")
    with pytest.raises(KeyboardInterrupt):
        run_grid([runner_spec("interrupts", "stops"), never], tmp_path / "b", progress=False)
    assert not (tmp_path / "b" / "runs" / never.run_id).exists()


# -- records, settings ------------------------------------------------------------------------------------------------


def test_a_failure_record_names_no_process_address_or_terminal_colour(tmp_path):
    spec = runner_spec("counts", "ray-bug")
    err = RuntimeError(
        '\x1b[36mray::_execute_group()\x1b[39m (pid=3198, ip=192.0.2.2)\n  File "x.py", line 1, in f\n'
        "ValueError: boom; Node IP: 192.0.2.2, node ID: 0123abcd. More"
    )
    record = record_failure(spec, tmp_path / "runs", err)
    assert record.reason == 'RuntimeError: ray::_execute_group(); File "x.py", line 1, in f; ValueError: boom; More'
    folder = tmp_path / "runs" / spec.run_id
    written = "".join(path.read_text() for path in folder.iterdir() if path.is_file())
    assert "192.0.2.2" not in written and "pid=" not in written and "\x1b" not in written


@pytest.mark.parametrize("device", ["mps", "meta", "xpu"])
def test_a_device_runs_cannot_train_on_here_is_refused_naming_the_forms(device):
    expected = "expected 'cpu', 'cuda', 'cuda:N' or 'auto'"
    with pytest.raises(ValueError, match=f"device '{device}' .*; {expected}"):
        resolve_device(device)
    # a run's config names the device it trained on and is read on machines without it (evaluate --device cpu)
    assert RunConfig(dataset="moons", device=device).device == device


def test_gpus_per_run_on_the_local_executor_names_the_option():
    with pytest.raises(ValueError, match=r"^--gpus-per-run 1 is a setting of --executor ray; local runs use --device"):
        make_executor("local", gpus_per_run=1.0)  # as the command line parses it


def test_a_batch_that_exits_trains_its_runs_alone(tmp_path, monkeypatch):
    # a sys.exit() inside the batched training escaped the grid (the batch caught Exception only)
    from pyro_bnn.reproduce import records
    from pyro_bnn.reproduce.planned import RunSpec

    calls = []

    def exits(*args, **kwargs):
        calls.append(len(args[0]))
        sys.exit(4)

    monkeypatch.setattr(records, "train_runs_batched", exits)
    base = RunConfig(dataset="moons", model="mlp:4", epochs=1, train_subset=64, val_size=0, num_samples=2)
    specs = [RunSpec(RunConfig(**{**base.__dict__, "seed": s}), label=f"s{s}") for s in (0, 1)]
    done = run_grid(specs, tmp_path, LocalExecutor(batch_runs=2), progress=False)
    assert calls == [2] and [r.status for r in done] == [Status.DONE, Status.DONE], [r.reason for r in done]
