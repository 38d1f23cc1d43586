"""The cold-posterior study's table and verdict on hand-made runs (the training is the run engine's, tested there)."""

from __future__ import annotations

import json

import pytest

from pyro_bnn.reproduce.records import code_version, training_code
from pyro_bnn.reproduce.studies import cold_posterior
from pyro_bnn.reproduce.studies.cold_posterior import base_config, run_one, summarise, verdict, write_outputs


def _rows(nll: dict[float, list[float]]) -> list[dict]:
    return [
        {"temperature": t, "seed": s, "nll": v, "accuracy": 0.8, "ece": 0.05, "train_time_s": 1.0}
        for t, values in nll.items()
        for s, v in enumerate(values)
    ]


def test_a_cold_temperature_better_on_every_seed_by_more_than_the_spread_is_a_yes():
    rows = _rows({0.1: [0.40, 0.41, 0.42], 1.0: [0.50, 0.52, 0.51]})
    text = verdict(rows, [0.1, 1.0])
    assert "predict better? yes." in text and "T = 0.1" in text
    assert "-0.100, -0.110, -0.090" in text  # the per-seed differences, best minus T = 1


def test_no_gain_on_average_is_a_no_and_a_gain_within_the_spread_is_not_settled():
    assert "better? no." in verdict(_rows({0.1: [0.52, 0.50], 1.0: [0.50, 0.50]}), [0.1, 1.0])
    unsettled = verdict(_rows({0.1: [0.49, 0.51], 1.0: [0.50, 0.52]}), [0.1, 1.0])
    assert "not settled" in unsettled  # a gain of 0.010 on both seeds, less than the sd 0.014 at T = 1


def test_a_gain_on_every_seed_that_rests_on_one_seed_is_not_settled():
    """The committed sweep's seeds 0-2 at T = 0.3: differences -0.030, -0.006, -0.0003, a mean gain of 0.012 above
    the sd at T = 1 (0.010), but its standard error over the seeds is 0.009: twice that covers it."""
    rows = _rows({0.3: [0.4411, 0.4622, 0.4524], 1.0: [0.4706, 0.4678, 0.4527]})
    text = verdict(rows, [0.3, 1.0])
    assert "not settled" in text and "standard error 0.009" in text
    one_seed = verdict(_rows({0.1: [0.40], 1.0: [0.50]}), [0.1, 1.0])
    assert "standard error unknown with one seed" in one_seed
    assert "the seeds' sd at T = 1 is unknown with one seed" in one_seed and "0.000" not in one_seed


def test_only_seeds_that_ran_every_temperature_count():
    rows = _rows({0.1: [0.40], 1.0: [0.50, 0.60]})
    assert "over 1 seed(s)" in verdict(rows, [0.1, 1.0])
    assert verdict(_rows({0.1: [0.4]}), [0.1, 1.0]).startswith("No verdict yet")
    assert verdict(rows, [1.0]).startswith("No verdict: the sweep needs")


def test_the_table_holds_mean_and_sd_over_seeds():
    (cold, plain) = summarise(_rows({0.1: [0.40, 0.42], 1.0: [0.5, 0.5]}), [0.1, 1.0])
    assert (
        cold["seeds"] == 2
        and cold["nll"][0] == pytest.approx(0.41)
        and cold["nll"][1] == pytest.approx(0.01414, rel=1e-3)
    )
    assert plain["nll"][1] == 0.0


def test_the_table_names_the_training_code_of_its_runs(tmp_path):
    rows = _rows({0.1: [0.40, 0.42], 1.0: [0.5, 0.5]})
    for row in rows:
        row.update(code="pyro_bnn 0.1.0 at aaa", training_code="fp1")
    write_outputs(tmp_path, rows, [0.1, 1.0], "cmd", "setting")
    assert "one state, fp1: 4 run(s) (pyro_bnn 0.1.0 at aaa)" in (tmp_path / "table.md").read_text()
    rows[0].update(code="pyro_bnn 0.1.0 at bbb", training_code="fp2")
    write_outputs(tmp_path, rows, [0.1, 1.0], "cmd", "setting")
    assert "**2 states**" in (tmp_path / "table.md").read_text()


def test_a_run_started_by_other_code_is_not_resumed(tmp_path):
    folder = tmp_path / "runs" / "T0.1-s0"
    folder.mkdir(parents=True)
    (folder / "code.json").write_text('{"code": "pyro_bnn 0.0.1 at 0000000", "training_code": "elsewhere"}\n')
    with pytest.raises(RuntimeError, match="started by other code"):
        run_one(base_config(None, 1, 100), 0.1, 0, tmp_path / "runs")


def test_a_new_run_records_its_code_before_it_trains(tmp_path, monkeypatch):
    def fake_train_run(config, folder, **kwargs):
        assert (folder / "code.json").exists()  # written before training starts
        metrics = {"accuracy": 0.8, "nll": 0.5, "ece": 0.05, "train_time_s": 1.0, "temperature": config.temperature}
        (folder / "metrics.json").write_text(json.dumps(metrics))

    monkeypatch.setattr(cold_posterior, "train_run", fake_train_run)
    row = run_one(base_config(None, 1, 100), 0.1, 0, tmp_path / "runs")
    assert row["code"] == code_version() and row["training_code"] == training_code()
    assert row["nll"] == 0.5 and row["temperature"] == 0.1


def _finished_run(folder, config, **metrics) -> None:
    """A run folder as train_run leaves it: config.json (the resolved config), metrics.json and code.json."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(config.resolved().to_json())
    values = {"accuracy": 0.8, "nll": 0.5, "ece": 0.05, "train_time_s": 1.0, **metrics}
    (folder / "metrics.json").write_text(json.dumps(values))
    (folder / "code.json").write_text(json.dumps({"code": code_version(), "training_code": training_code()}))


def _config(base, temperature, seed):
    return cold_posterior.RunConfig.from_dict({**json.loads(base.to_json()), "temperature": temperature, "seed": seed})


def _no_training(*args, **kwargs):
    raise AssertionError("train_run was called")


def test_a_finished_run_at_other_settings_is_refused_naming_them_not_read_back(tmp_path, monkeypatch):
    """The reviewer's case: a sweep of 200 images and 1 epoch, then one asking 1 000 images and 3 epochs in the same
    --out read the first sweep's runs back as the second's."""
    monkeypatch.setattr(cold_posterior, "train_run", _no_training)
    _finished_run(tmp_path / "runs" / "T0.5-s0", _config(base_config(None, 1, 200), 0.5, 0))
    with pytest.raises(cold_posterior.OtherRunError, match=r"other settings \(train_subset 200 there, 1000 now\)"):
        run_one(base_config(None, 3, 1000), 0.5, 0, tmp_path / "runs")
    with pytest.raises(cold_posterior.OtherRunError, match=r"epochs 3 there, 1 now"):  # a resume cannot shorten it
        _finished_run(tmp_path / "runs" / "T1-s0", _config(base_config(None, 3, 200), 1.0, 0))
        run_one(base_config(None, 1, 200), 1.0, 0, tmp_path / "runs")


def test_a_finished_run_with_another_data_folder_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr(cold_posterior, "train_run", _no_training)
    _finished_run(tmp_path / "runs" / "T0.5-s0", _config(base_config(None, 1, 200), 0.5, 0), nll=0.25)
    assert run_one(base_config("/some/where/else", 1, 200), 0.5, 0, tmp_path / "runs")["nll"] == 0.25


def test_a_finished_run_with_fewer_epochs_resumes_from_its_checkpoint_or_is_refused_without_one(tmp_path, monkeypatch):
    calls = []

    def fake_train_run(config, folder, **kwargs):
        calls.append((config.epochs, kwargs["resume"]))
        (folder / "metrics.json").write_text(json.dumps({"accuracy": 0.9, "nll": 0.3, "ece": 0.01, "train_time_s": 2}))

    monkeypatch.setattr(cold_posterior, "train_run", fake_train_run)
    folder = tmp_path / "runs" / "T0.5-s0"
    _finished_run(folder, _config(base_config(None, 1, 200), 0.5, 0))
    with pytest.raises(cold_posterior.OtherRunError, match=r"\(epochs 1 there, 3 now\) and no checkpoint.pt"):
        run_one(base_config(None, 3, 200), 0.5, 0, tmp_path / "runs")
    (folder / "checkpoint.pt").write_bytes(b"")
    assert run_one(base_config(None, 3, 200), 0.5, 0, tmp_path / "runs")["nll"] == 0.3
    assert calls == [(3, True)]


def test_the_committed_sweep_is_read_back_at_its_command(tmp_path, monkeypatch):
    """results/cold-posterior's runs hold what its command (``--seeds 5``, the defaults otherwise) asks."""
    import shutil
    from pathlib import Path

    committed = Path(__file__).parents[3] / "results" / "cold-posterior"
    table = json.loads((committed / "table.json").read_text())
    assert table["command"].endswith("--out results/cold-posterior --seeds 5")
    shutil.copytree(committed / "runs", tmp_path / "runs")
    monkeypatch.setattr(cold_posterior, "train_run", _no_training)
    base = base_config(None, 10, 10_000)
    rows = [run_one(base, t, seed, tmp_path / "runs") for seed in range(5) for t in cold_posterior.TEMPERATURES]
    assert [r["nll"] for r in rows] == [r["nll"] for r in table["runs"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperatures", "inf"], "argument --temperatures: expected a finite number > 0, got 'inf'"),
        (["--temperatures", "nan"], "argument --temperatures: expected a finite number > 0, got 'nan'"),
        (["--temperatures", "0"], "argument --temperatures: expected a finite number > 0, got '0'"),
        (["--epochs", "0"], "argument --epochs: expected an int >= 1, got '0'"),
        (["--epochs", "-1"], "argument --epochs: expected an int >= 1, got '-1'"),
        (["--train-subset", "0"], "argument --train-subset: expected an int >= 1, got '0'"),
        (["--seeds", "0"], "argument --seeds: expected an int >= 1, got '0'"),
        (["--data-dir", "/nonexistent"], "argument --data-dir: expected an existing folder, got '/nonexistent'"),
        (["--out", "{tmp}/afile"], "--out {tmp}/afile exists and is not a folder"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2_before_any_run(args, message, monkeypatch, refused):
    monkeypatch.setattr(cold_posterior, "train_run", _no_training)
    refused(cold_posterior.main, args, message)
