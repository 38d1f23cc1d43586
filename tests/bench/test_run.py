"""bench/run.py: the training-step table's timing and report text."""

import json
import re
import sys
import warnings

import pytest
import run as bench_run
import steps as bench_steps
import torch

import pyro_bnn.data
from pyro_bnn.data import load_dataset
from pyro_bnn.data.sources import DataContentWarning

CPU = torch.device("cpu")


def _fixed(seconds_per_step: float):
    """A builder whose ``run(batches)`` reports ``seconds_per_step`` per batch (and takes no time)."""
    return lambda x, y, num_data: lambda batches: seconds_per_step * len(batches)


def test_a_rows_time_per_step_is_what_its_run_reports_over_the_batches():
    batches = [(torch.zeros(2, 1), torch.zeros(2))] * 4
    builders = {bench_steps.DETERMINISTIC: _fixed(0.020), "other": _fixed(0.050)}
    rows = bench_run.time_variants(builders, batches, 3, CPU)
    # 0.050 s per step over 0.020 s per step, in every round.
    assert rows["other"]["ms_per_step"] == 50.0 and rows[bench_steps.DETERMINISTIC]["ms_per_step"] == 20.0
    assert rows["other"]["ratio"] == 2.5 and rows["other"]["ratio_range"] == [2.5, 2.5]


def test_the_report_says_what_the_pyro_bnn_rows_time(tmp_path):
    committed = json.loads((bench_run.HERE / "results-cpu.json").read_text())
    # A file written before the rows timed the epoch's steps (a63097a timed the whole fit() call: ~30-40 ms of
    # per-fit checks in every 10-step round) has no `pyro_bnn_step_time` and one epoch time.
    before = {key: value for key, value in committed.items() if key != "pyro_bnn_step_time"}
    before["epoch"] = {"num_train": 60000, "bnn_s": 19.05, "deterministic_s": 8.67, "ratio": 2.2, "cuda_graph": False}
    old = "\n".join(bench_run.render_device(before))
    assert (
        "pyro_bnn's rows of this run were timed around a whole `Trainer.fit` call per round, so they include the "
        "checks that fit makes once (the parameters' finiteness after the epoch, its set-up checks) spread over the "
        "round's 10 steps." in old
    )
    assert "pyro_bnn's default BNN (`Trainer.fit`) **19.05 s**; the deterministic network 8.67 s" in old
    new = dict(before, pyro_bnn_step_time=bench_run.STEP_TIMING)
    new["epoch"] = dict(before["epoch"], bnn_s=19.25, bnn_steps_s=19.05)
    text = "\n".join(bench_run.render_device(new))
    assert "timed around a whole" not in text
    assert "pyro_bnn's rows: the `time_s` of the `Trainer.fit` epoch that takes a round's steps" in text
    assert (
        "pyro_bnn's default BNN: the wall time of the `Trainer.fit` call that trains the second epoch, its "
        "once-per-fit checks included, **19.25 s** (its loop of steps, the epoch's `time_s`: 19.05 s)" in text
    )


@pytest.fixture
def ten_images(make_tiny, tmp_path, monkeypatch):
    """Fashion-MNIST replaced by 10 training images; returns their pixels / 255, ``(10, 1, 28, 28)``."""
    folder = make_tiny(n_train=10, n_test=3).write(tmp_path / "fashion-mnist")

    def tiny_dataset(name, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataContentWarning)  # the stand-in is not the published data, knowingly
            return load_dataset(name, data_dir=folder, **kwargs)

    monkeypatch.setattr(pyro_bnn.data, "load_dataset", tiny_dataset)
    return tiny_dataset("fashion-mnist", val_size=0).train.x


def test_load_batches_gives_full_batches_of_the_data(ten_images):
    batches, source = bench_run.load_batches(4, 2, CPU)
    assert source == "Fashion-MNIST training images"
    assert [tuple(x.shape) for x, _ in batches] == [(4, 1, 28, 28), (4, 1, 28, 28)]
    assert torch.equal(torch.cat([x for x, _ in batches]), ten_images[:8])


def test_load_batches_refuses_more_steps_than_the_data_holds(ten_images):
    # It returned 3 batches, the last of 2 images, where the report said 3 steps of 4.
    message = (
        "--steps 3 at batch size 4 needs 12 training images but Fashion-MNIST has 10; expected --steps <= 2 at that "
        "batch size"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        bench_run.load_batches(4, 3, CPU)


def test_run_refuses_more_steps_than_the_data_holds_before_timing_anything(ten_images, monkeypatch, capsys):
    monkeypatch.setattr(bench_run, "time_variants", lambda *args: pytest.fail("timed before refusing"))
    argv = ["bench/run.py", "--skip-competitors", "--batch-sizes", "2", "4", "--steps", "3", "--out", "unused"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        bench_run.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "run.py: error: --steps 3 at batch size 4 needs 12 training images but Fashion-MNIST has 10; expected "
        "--steps <= 2 at that batch size"
    )


def test_the_machine_line_names_the_gpu_where_there_is_one(monkeypatch):
    # the cuda bench files said "Intel(R) Xeon(R) Processor, 16 cores" and nothing of the card their rows ran on
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "GPU" not in bench_run.machine()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H200")
    assert bench_run.machine().endswith(", GPU NVIDIA H200")
