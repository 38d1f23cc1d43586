"""``pyro-bnn evaluate RUN --temperature`` and ``fit_run_temperature``: a tiny digits run fitted on its validation
split, the record written, and one-line refusals (a regression run, a run without validation examples, options
that do not combine) before any data is loaded."""

import json
import math
from dataclasses import replace

import pytest

from pyro_bnn.cli import main
from pyro_bnn.data import load_dataset
from pyro_bnn.evaluation import SUMMARY_KEYS
from pyro_bnn.runs import RunConfig, runs, train_run
from pyro_bnn.runs.temperature_scaling import TEMPERATURE_FILE, fit_run_temperature

TINY_DIGITS = RunConfig(
    dataset="digits",
    model="mlp:16",
    activation="relu",
    guide="autonormal:0.05",
    epochs=1,
    batch_size=64,
    lr=0.02,
    train_subset=300,
    num_samples=4,
    num_val_samples=2,
    device="cpu",
)


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """One tiny digits run (scikit-learn's bundled digits: no data files, no cache, so safe outside a test)."""
    out = tmp_path_factory.mktemp("temperature") / "digits"
    train_run(TINY_DIGITS, out, progress=False)
    return out


def _check_record(record, *, mode):
    assert record["mode"] == mode
    assert (record["num_val"], record["num_test"], record["num_samples"]) == (288, 359, 4)
    numbers = [record["temperature"], record["val_nll_before"], record["val_nll_after"]]
    for part in ("test", "test_tempered"):
        assert tuple(record[part]) == SUMMARY_KEYS
        numbers += record[part].values()
    assert all(math.isfinite(value) for value in numbers)
    assert record["temperature"] > 0
    assert record["val_nll_after"] <= record["val_nll_before"]


def _one_line_error(capsys, args):
    assert main([str(arg) for arg in args]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("pyro-bnn evaluate: error:")
    return err


def test_cli_fits_on_the_validation_split_and_writes_the_record(digits_run, capsys, leftover_files):
    assert main(["evaluate", str(digits_run), "--temperature"]) == 0
    out = capsys.readouterr().out
    record = json.loads((digits_run / TEMPERATURE_FILE).read_text())
    _check_record(record, mode="mean")
    assert f"temperature T = {record['temperature']:.4f} (mode mean), fitted on 288 validation examples" in out
    assert "tempered" in out and f"wrote {digits_run / TEMPERATURE_FILE}" in out
    # mode "mean" tempers one predictive: its argmax, so the accuracy, cannot change
    assert record["test_tempered"]["accuracy"] == record["test"]["accuracy"]
    assert leftover_files(digits_run) == []
    assert not (digits_run / "evaluation.json").exists()  # --temperature does temperature scaling only


def test_python_api_and_the_samples_mode(digits_run):
    record = fit_run_temperature(digits_run, mode="samples", num_samples=3)
    assert record["num_samples"] == 3 and record["mode"] == "samples"
    assert json.loads((digits_run / TEMPERATURE_FILE).read_text()) == record
    record["num_samples"] = 4  # _check_record's sizes
    _check_record(record, mode="samples")
    again = fit_run_temperature(digits_run, mode="samples", num_samples=3)
    assert again["temperature"] == record["temperature"]  # the run's seed fixes the posterior draws


def test_a_regression_run_is_refused_before_any_data(tmp_path, capsys, no_data):
    cubic = replace(TINY_DIGITS, dataset="cubic", train_subset=None, batch_size=200, num_samples=2, val_size=40)
    data = load_dataset("cubic", val_size=40, seed=cubic.seed)  # no_data refuses runs.load_data
    train_run(cubic, tmp_path / "cubic", progress=False, data=data)
    err = _one_line_error(capsys, ["evaluate", tmp_path / "cubic", "--temperature"])
    assert "--temperature does not apply to a regression run (dataset 'cubic')" in err
    assert not (tmp_path / "cubic" / TEMPERATURE_FILE).exists()


def test_a_run_without_validation_examples_is_refused_before_any_data(tmp_path, capsys, monkeypatch):
    train_run(replace(TINY_DIGITS, val_size=0), tmp_path / "no-val", progress=False)
    monkeypatch.setattr(runs, "load_data", lambda *args: pytest.fail("data was loaded"))
    err = _one_line_error(capsys, ["evaluate", tmp_path / "no-val", "--temperature"])
    assert "this digits run has no validation examples (--val-size 0); retrain with --val-size N > 0" in err
    assert not (tmp_path / "no-val" / TEMPERATURE_FILE).exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--temperature", "--ood", "mnist"], "--temperature and --ood do not combine"),
        (["--temperature", "--corruption", "gaussian:0.5"], "--temperature and --corruption do not combine"),
        (["--temperature-mode", "samples"], "--temperature-mode only applies with --temperature"),
        (["--temperature", "--num-samples", "0"], "--num-samples must be an int >= 1, got 0"),
        (["--temperature", "--data-dir", "mnist=/x"], "--data-dir mnist=/x is unused: this evaluation reads digits"),
    ],
)
def test_bad_combinations_fail_in_one_line_before_any_data(digits_run, capsys, no_data, extra, message):
    assert message in _one_line_error(capsys, ["evaluate", digits_run, *extra])


def test_an_unknown_mode_is_refused(digits_run, capsys):
    with pytest.raises(SystemExit) as raised:
        main(["evaluate", str(digits_run), "--temperature", "--temperature-mode", "logits"])
    assert raised.value.code == 2
    assert "invalid choice: 'logits'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--temperature-mode must be one of mean, samples; got 'logits'"):
        fit_run_temperature(digits_run, mode="logits")
