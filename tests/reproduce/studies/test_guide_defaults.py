"""Tiny-settings smoke run of the measurement behind the default guide."""

import shlex
import sys

import pytest

from pyro_bnn.data import load_dataset
from pyro_bnn.reproduce.studies import guide_defaults
from pyro_bnn.reproduce.studies.guide_defaults import Setting, format_table, measure


def test_measure_records_every_score_after_each_epoch(tmp_path, make_tiny):
    data_dir = make_tiny(n_train=64, n_test=16).write(tmp_path / "fmnist")
    data = load_dataset("fashion-mnist", data_dir=data_dir, val_size=0, seed=0)
    setting = Setting(train_subset=None, test_subset=16, batch_size=32, epochs=(1, 2), num_samples=3, width=32)
    row = measure("autonormal:0.01,loc=map", "leaky:-0.5", data, setting)
    assert sorted(row["by_epoch"]) == [1, 2]
    scores = row["by_epoch"][2]
    assert 0 <= scores["accuracy"] <= 1 and scores["mutual_information"] >= 0
    assert set(scores["sigma_per_layer"]) == {"fc1", "fc2", "fc3", "out"}
    assert 0.005 < scores["mean_sigma"] < 0.02  # started at 0.01, two short epochs
    table = format_table([row], setting.epochs)
    assert "`autonormal:0.01,loc=map` | leaky:-0.5" in table and "acc@2" in table


def _fake_measurement(monkeypatch):
    """guide_defaults.main without data or training: every row scores the same after epochs 1 and 5."""
    scores = {"accuracy": 0.5, "ece": 0.1, "mean_sigma": 0.01, "mutual_information": 0.0, "sigma_per_layer": {}}
    monkeypatch.setattr(guide_defaults, "load_dataset", lambda *args, **kwargs: None)
    monkeypatch.setattr(guide_defaults, "measure", lambda guide, activation, data, setting: {
        "guide": guide, "activation": activation, "by_epoch": {1: scores, 5: scores}, "seconds": 1.0})  # fmt: skip


def test_the_command_line_is_the_one_given_from_the_shell_or_from_python(tmp_path, monkeypatch):
    _fake_measurement(monkeypatch)
    out = tmp_path / "g d"
    args = ["--out", str(out), "--guides", "autonormal:0.01", "--activations", "relu"]
    monkeypatch.setattr(sys, "argv", ["guide_defaults.py", *args])
    guide_defaults.main()  # from the shell: argv is None
    expected = f"Command: `python -m pyro_bnn.reproduce.studies.guide_defaults {shlex.join(args)}`"
    assert (out / "table.md").read_text().splitlines()[0] == expected
    assert f"--out '{out}' --guides" in expected  # the space in the folder's name is quoted
    guide_defaults.main(args)
    assert (out / "table.md").read_text().splitlines()[0] == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--guides", "nosuch"], "unknown guide 'nosuch'; expected one of "),
        (["--full", "nosuch"], "unknown guide 'nosuch'; expected one of "),
        (["--activations", "nosuch"], "unknown activation 'nosuch'; expected one of relu, leaky[:SLOPE], tanh, "),
        (["--merge", "/nonexistent"], "--merge /nonexistent: expected a folder holding a --full run's full.json, "
                                      "found none"),
        (["--data-dir", "/nonexistent"], "argument --data-dir: expected an existing folder, got '/nonexistent'"),
    ],
)  # fmt: skip
def test_a_bad_argument_is_one_line_and_exit_2_before_any_data_is_read(args, message, tmp_path, monkeypatch, capsys):
    def no_data(*args, **kwargs):
        raise AssertionError("data was read")

    monkeypatch.setattr(guide_defaults, "load_dataset", no_data)
    with pytest.raises(SystemExit) as exit_:
        guide_defaults.main(["--out", str(tmp_path / "out"), *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err  # PROG: error: MESSAGE, one line
    assert f": error: {message}" in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
