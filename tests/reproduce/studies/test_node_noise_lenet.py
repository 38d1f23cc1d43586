"""The node-noise LeNet study's command line: a bad value is one line before the sweep trains."""

from __future__ import annotations

import pytest

from pyro_bnn.reproduce.studies import node_noise_lenet


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "0"], "argument --seeds: expected an int >= 1, got '0'"),
        (["--seeds", "-2"], "argument --seeds: expected an int >= 1, got '-2'"),
        (["--out", "{tmp}/afile"], "--out {tmp}/afile exists and is not a folder"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2_before_the_sweep(args, message, monkeypatch, refused):
    def no_sweep(*args, **kwargs):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(node_noise_lenet, "sweep", no_sweep)
    refused(node_noise_lenet.main, args, message)
