"""Run folders lose nothing: --overwrite swaps only a finished run in, failed runs leave no debris, --resume says
what it does, and a run killed with SIGKILL at any point resumes to the bit-identical result."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from pyro_bnn.cli import main
from pyro_bnn.infer import NonFiniteLossError
from pyro_bnn.runs import RunConfig, train_run

TINY = RunConfig(
    dataset="moons",
    model="tanh-small",
    activation="tanh",
    guide="autonormal:0.05",
    epochs=2,
    batch_size=64,
    lr=0.02,
    num_samples=4,
    num_val_samples=2,
    device="cpu",
)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_overwrite_replaces_the_old_run_only_when_the_new_one_finished(tmp_path):
    out = tmp_path / "run"
    train_run(replace(TINY, epochs=1), out, progress=False)
    before = _files(out)
    with pytest.raises(NonFiniteLossError):
        train_run(replace(TINY, lr=1e30), out, overwrite=True, progress=False)
    assert _files(out) == before  # config.json, metrics.json, checkpoint and figure of the old run, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging folder left
    train_run(replace(TINY, epochs=3), out, overwrite=True, progress=False)
    assert json.loads((out / "config.json").read_text())["epochs"] == 3
    assert len(json.loads((out / "metrics.json").read_text())["history"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError):
        train_run(replace(TINY, lr=1e30), out, progress=False)
    assert not out.exists()
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("the user's own file")
    with pytest.raises(NonFiniteLossError):
        train_run(replace(TINY, lr=1e30), existing, progress=False)
    assert sorted(p.name for p in existing.iterdir()) == ["notes.txt"]


def test_resume_without_a_checkpoint_says_it_starts_fresh(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--dataset", "moons", "--model", "tanh-small", "--epochs", "1", "--num-samples", "2"]
    assert main([*args, "--quiet", "--device", "cpu", "--resume", "--out", str(out)]) == 0
    assert f"no checkpoint in {out}; starting a fresh run" in capsys.readouterr().err
    assert (out / "checkpoint.pt").is_file()


def test_stale_temporary_files_are_removed_by_the_next_run(tmp_path):
    out = tmp_path / "run"
    train_run(replace(TINY, epochs=1), out, progress=False)
    stale = out / ".checkpoint.pt.abc123.part"
    stale.write_bytes(b"half a checkpoint")
    train_run(replace(TINY, epochs=2), out, resume=True, progress=False)
    assert not stale.exists()


# --------------------------------------------------------------------------------------------- fault injection
# A child process trains TINY and SIGKILLs itself at a chosen point; the parent resumes the run and compares its
# metrics with an uninterrupted run's, bit for bit.

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    import pyro_bnn.infer.objectives as objectives
    from pyro_bnn.runs import RunConfig, train_run

    point, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    config = RunConfig(**{k: v for k, v in __import__("json").loads(sys.argv[4]).items()})
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)
    saves = 0
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        global saves
        is_checkpoint = isinstance(obj, dict) and obj.get("format") == "pyro_bnn.checkpoint/1"
        saves += is_checkpoint
        if is_checkpoint and saves == count:
            if point == "before-write":
                die()
            if point == "mid-write":
                real_save(obj, f, *args, **kwargs)
                size = os.path.getsize(f)
                os.truncate(f, size // 2)  # the temporary file is half written
                die()
        real_save(obj, f, *args, **kwargs)

    torch.save = save
    if point == "before-rename":
        real_replace = os.replace
        def replace(src, dst):
            if str(dst).endswith("checkpoint.pt") and saves == count:
                die()
            real_replace(src, dst)
        os.replace = replace
    if point == "step":
        real_call = objectives.TraceELBO.__call__
        calls = 0
        def call(self, *args, **kwargs):
            global calls
            calls += 1
            if calls == count:
                die()
            return real_call(self, *args, **kwargs)
        objectives.TraceELBO.__call__ = call
    train_run(config, out, progress=False)
    """
)

STEPS_PER_EPOCH = 10  # 640 moons training points in batches of 64
POINTS = [("before-write", 2), ("mid-write", 2), ("before-rename", 2)] + [
    ("step", k) for k in random.Random(7).sample(range(2, 2 * STEPS_PER_EPOCH), 3)
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight") / "run"
    return train_run(TINY, out, progress=False).metrics


def _strip(metrics):
    return {k: v for k, v in metrics.items() if k not in ("train_time_s",)} | {
        "history": [{k: v for k, v in r.items() if k != "time_s"} for r in metrics["history"]]
    }


@pytest.mark.parametrize("point, count", POINTS, ids=[f"{p}-{c}" for p, c in POINTS])
def test_a_run_killed_at_any_point_resumes_to_the_same_result(tmp_path, uninterrupted, point, count):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, point, str(count), str(out), TINY.to_json()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    resumed = train_run(TINY, out, resume=True, progress=False).metrics
    assert _strip(resumed) == _strip(uninterrupted)
    assert [p.name for p in out.iterdir() if p.name.endswith(".part")] == []
