"""Runners for the executor fault tests (tests/reproduce/test_executor_faults.py): imported by the pool's spawned
workers by module and name, so they live in a module of their own rather than in a test file."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import RunResult


def counts(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Returns one metric, the number of times it was called; with the option ``after=LABEL``, the first call
    returns only once the run labelled so has started (its folder exists; a minute at most) and 0.3 s more have
    passed."""
    attempts = folder / "attempts"
    count = int(attempts.read_text()) + 1 if attempts.exists() else 1
    attempts.write_text(str(count))
    after = spec.option("after")
    if after and count == 1:
        deadline = time.monotonic() + 60
        while not any(Path(runs_dir).glob(f"{after}-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    return RunResult(folder, {"attempts": count}, prediction=None)


def exits_hard(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Ends its process at once, without clean-up (as a crash in native code would)."""
    os._exit(9)


def exits(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Calls ``sys.exit(3)``."""
    sys.exit(3)


def interrupts(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Raises KeyboardInterrupt, as Ctrl-C would."""
    raise KeyboardInterrupt


def runner_spec(runner: str, label: str, **options) -> RunSpec:
    """A spec run by ``executor_helpers:<runner>`` (``options`` part of its id)."""
    return RunSpec(
        RunConfig(dataset="moons", model="tanh-small", device="cpu"),
        label=label,
        runner=f"executor_helpers:{runner}",
        options=tuple(sorted((key, str(value)) for key, value in options.items())),
    )
