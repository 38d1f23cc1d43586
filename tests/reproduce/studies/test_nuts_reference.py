"""The NUTS-reference study's command line: a bad count is one line before any VI or NUTS runs (the study itself is
smoke-tested in tests/diagnostics/test_nuts.py)."""

from __future__ import annotations

import pytest

from pyro_bnn.reproduce.studies.nuts_reference import reference


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-chains", "0"], "argument --num-chains: expected an int >= 1, got '0'"),
        (["--vi-draws", "0"], "argument --vi-draws: expected an int >= 1, got '0'"),
        (["--num-samples", "-5"], "argument --num-samples: expected an int >= 1, got '-5'"),
        (["--vi-epochs", "0"], "argument --vi-epochs: expected an int >= 1, got '0'"),
        (["--warmup", "-1"], "argument --warmup: expected an int >= 0, got '-1'"),
        (["--seed", "-1"], "argument --seed: expected an int >= 0, got '-1'"),
        (["--out", "{tmp}/afile"], "--out {tmp}/afile exists and is not a folder"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2_before_any_work(args, message, monkeypatch, refused):
    def no_work(*args, **kwargs):
        raise AssertionError("the comparison ran")

    monkeypatch.setattr(reference, "run", no_work)
    refused(reference.main, args, message)
