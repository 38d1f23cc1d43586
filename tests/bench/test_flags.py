"""bench/flags.py and the bench scripts' count flags: a count out of range is refused in one line when the flags are
read (``bench/run.py --rounds 0`` failed with ``StatisticsError`` after building every variant, ``--steps 0`` and
``--batch-sizes 0`` deep in Pyro)."""

import argparse
import importlib
import runpy
import sys
from pathlib import Path

import flags
import pytest


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (flags.positive_int, "0", "must be an int >= 1, got 0"),
        (flags.positive_int, "-3", "must be an int >= 1, got -3"),
        (flags.positive_int, "2.5", "must be an int >= 1, got '2.5'"),
        (flags.non_negative_int, "-1", "must be an int >= 0, got -1"),
        (flags.positive_ints, "1,0,8", "every entry must be an int >= 1, got 0 (in '1,0,8')"),
        (flags.positive_ints, "1,,8", "every entry must be an int >= 1, got '' (in '1,,8')"),
    ],
)
def test_a_count_out_of_range_is_refused_with_the_value_and_what_was_expected(kind, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        kind(text)
    assert str(err.value) == message


def test_counts_in_range_are_read_as_ints():
    assert flags.positive_int("1") == 1 and flags.non_negative_int("0") == 0
    assert flags.positive_ints("1,8,32") == (1, 8, 32)


SCRIPTS = [
    ("run", ["--skip-competitors", "--batch-sizes", "8", "--rounds", "0"], "--rounds", ">= 1, got 0"),
    ("run", ["--skip-competitors", "--batch-sizes", "8", "--steps", "0"], "--steps", ">= 1, got 0"),
    ("run", ["--skip-competitors", "--batch-sizes", "8", "0"], "--batch-sizes", ">= 1, got 0"),
    ("node_noise", ["--steps", "0"], "--steps", ">= 1, got 0"),
    ("node_noise_large", ["--rounds", "0"], "--rounds", ">= 1, got 0"),
    ("batched", ["--runs", "1,0"], "--runs", "every entry must be an int >= 1, got 0 (in '1,0')"),
    ("batched", ["--particles", "0"], "--particles", ">= 1, got 0"),
    ("batched", ["--long-steps", "-1"], "--long-steps", ">= 0, got -1"),
    ("profile_batched", ["--steps", "0"], "--steps", ">= 1, got 0"),
    ("predictive", ["--samples", "0"], "--samples", ">= 1, got 0"),
    ("scale_mixture", ["--repeats", "0"], "--repeats", ">= 1, got 0"),
    ("slice_timing", ["--threads", "0"], "--threads", ">= 1, got 0"),
    ("convergence", ["--seeds", "0", "-1"], "--seeds", ">= 0, got -1"),
    ("regression_table", ["--hidden", "0"], "--hidden", ">= 1, got 0"),
    ("laplace_glm", ["--reference-inputs", "0"], "--reference-inputs", ">= 1, got 0"),
    ("run_probe", ["leaky-calibration", "quick", "x", "--epochs", "0"], "--epochs", ">= 1, got 0"),
]


@pytest.mark.parametrize(("script", "argv", "flag", "expected"), SCRIPTS)
def test_each_bench_script_refuses_a_bad_count_before_it_starts(script, argv, flag, expected, monkeypatch, capsys):
    module = importlib.import_module(script)
    monkeypatch.setattr(sys, "argv", [f"bench/{script}.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        module.main(argv) if script == "run_probe" else module.main()
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    must = "" if expected.startswith("every") else "must be an int "
    assert error == f"{script}.py: error: argument {flag}: {must}{expected}"


def test_steps_only_refuses_zero_rounds_before_it_starts(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench/steps_only.py", "out.json", "0", "128"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(Path(flags.__file__).with_name("steps_only.py")), run_name="__main__")
    assert exit_.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1] == "steps_only.py: error: argument rounds: must be an int >= 1, got 0"
    )
