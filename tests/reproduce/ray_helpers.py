"""A runner whose first attempt kills its own process, for the lost-worker test of a Ray grid (imported by Ray's
workers through ``PYTHONPATH``, so it lives in a module of its own rather than in a test file)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult


def dies_once(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Kills its worker (SIGKILL: no clean-up, as the out-of-memory killer would) on its first call; returns one
    metric, the number of calls, on the next."""
    attempts = folder / "attempts"
    count = int(attempts.read_text()) + 1 if attempts.exists() else 1
    attempts.write_text(str(count))
    if count == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return RunResult(folder, {"attempts": count}, prediction=None)


def dies_once_spec() -> RunSpec:
    return RunSpec(
        RunConfig(dataset="moons", model="tanh-small", device="cpu"), label="dies-once", runner="ray_helpers:dies_once"
    )
