"""``pyro-bnn evaluate RUN --conformal ALPHA`` and ``evaluate_run(conformal=...)``: a tiny digits run calibrated on
a part of its test set and scored on the rest, the record against a direct computation from the same prediction,
a regression run's intervals, and one-line refusals before any data where the options alone can tell."""

import json
import math
from dataclasses import replace

import pytest
import torch

from pyro_bnn.cli import main
from pyro_bnn.data import load_dataset
from pyro_bnn.evaluation import calibrate_classifier, calibrate_regressor, interval_metrics, prediction_set_metrics
from pyro_bnn.predict import Prediction
from pyro_bnn.runs import RunConfig, evaluate_run, train_run
from pyro_bnn.runs.conformal import SPLIT_SEED, ConformalOptions, conformal_record, format_conformal_table

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
NUM_TEST = 359  # digits' test split


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformal") / "digits"
    train_run(TINY_DIGITS, out, progress=False)
    return out


def test_cli_reports_coverage_and_set_size_in_evaluation_json_and_the_table(digits_run, capsys):
    args = ["evaluate", str(digits_run), "--conformal", "0.1", "--conformal-method", "aps", "--calibration-size", "200"]
    assert main(args) == 0
    out = capsys.readouterr().out
    record = json.loads((digits_run / "evaluation.json").read_text())["conformal"]
    assert (record["alpha"], record["method"], record["split_seed"]) == (0.1, "aps", SPLIT_SEED)
    assert (record["calibration_size"], record["scored_size"]) == (200, NUM_TEST - 200)
    assert 0 <= record["coverage"] <= 1 and 0 <= record["mean_set_size"] <= 10
    sizes = record["coverage_by_size"]
    assert sum(part["count"] for part in sizes.values()) == NUM_TEST - 200
    assert f"aps: coverage {record['coverage']:.4f}, mean set size {record['mean_set_size']:.3f}" in out
    assert "calibrated on 200 test inputs, scored on the other 159" in out


def test_the_record_is_a_disjoint_seeded_split_of_the_test_prediction():
    # a prediction whose label always has probability 0.6 (the other classes 0.1 each): THR's threshold is
    # 1 - 0.6 = 0.4 and every set is the label alone, so coverage 1 and size 1 on the scored part
    labels = torch.arange(50) % 5
    probs = torch.full((2, 50, 5), 0.1)
    probs[:, torch.arange(50), labels] = 0.6
    record = conformal_record(Prediction(probs=probs, targets=labels), ConformalOptions(0.1).check())
    assert (record["calibration_size"], record["scored_size"]) == (25, 25)
    assert record["quantile"] == pytest.approx(0.4) and record["coverage"] == 1.0 and record["mean_set_size"] == 1.0
    # the same numbers by hand: calibrate on the seeded permutation's first 25, score the rest
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    order = torch.randperm(50, generator=generator)
    noisy = torch.softmax(torch.randn(3, 50, 5, generator=torch.Generator().manual_seed(1)), dim=-1)
    record = conformal_record(Prediction(probs=noisy, targets=labels), ConformalOptions(0.2).check())
    first, rest = order[:25], order[25:]
    classifier = calibrate_classifier(noisy[:, first], 0.2, labels=labels[first])
    assert set(first.tolist()).isdisjoint(rest.tolist())
    expected = prediction_set_metrics(classifier.prediction_sets(noisy[:, rest]), labels[rest])
    assert record["quantile"] == classifier.quantile and record["coverage"] == expected.coverage


def test_python_api_matches_the_cli_and_is_deterministic(digits_run):
    record = evaluate_run(digits_run, conformal=0.2, conformal_method="raps")["conformal"]
    again = evaluate_run(digits_run, conformal=0.2, conformal_method="raps")["conformal"]
    assert record == again  # the split seed and the run's seed fix everything
    assert (record["calibration_size"], record["method"]) == (NUM_TEST // 2, "raps")


def test_a_regression_run_gets_intervals_from_both_scores(tmp_path):
    cubic = replace(TINY_DIGITS, dataset="cubic", train_subset=None, batch_size=200, num_samples=2, val_size=40)
    train_run(cubic, tmp_path / "cubic", progress=False, data=load_dataset("cubic", val_size=40, seed=cubic.seed))
    record = evaluate_run(tmp_path / "cubic", conformal=0.25, calibration_size=30)["conformal"]
    for score in ("absolute", "normalized"):
        assert math.isfinite(record[score]["quantile"]) and record[score]["mean_width"] > 0
        assert 0 <= record[score]["coverage"] <= 1


def test_a_student_t_predictive_of_infinite_sd_skips_the_normalized_score_and_says_why():
    g = torch.Generator().manual_seed(0)
    prediction = Prediction(
        means=torch.randn(3, 40, 1, generator=g), noise_scale=0.5, noise_df=1.5, targets=torch.randn(40, 1, generator=g)
    )
    record = conformal_record(prediction, ConformalOptions(alpha=0.25).check())
    assert record["normalized"] == {"skipped": "the predictive sd is infinite (Student-t noise with df <= 2)"}
    assert math.isfinite(record["absolute"]["mean_width"]) and record["absolute"]["coverage"] > 0
    assert "normalized: skipped, the predictive sd is infinite" in format_conformal_table(record)


def test_each_part_keeps_its_own_rows_of_a_predicted_noise_scale():
    """A heteroscedastic prediction's noise scale (S, N, D) is cut with the means: the record equals the
    regressor calibrated and scored by hand on the same two parts."""
    g = torch.Generator().manual_seed(0)
    means, scale = torch.randn(3, 40, 1, generator=g), torch.rand(3, 40, 1, generator=g) + 0.1
    targets = torch.randn(40, 1, generator=g)
    record = conformal_record(Prediction(means=means, noise_scale=scale, targets=targets), ConformalOptions(0.25))
    order = torch.randperm(40, generator=torch.Generator().manual_seed(SPLIT_SEED))
    cal, rest = order[: record["calibration_size"]], order[record["calibration_size"] :]
    regressor = calibrate_regressor(
        Prediction(means=means[:, cal], noise_scale=scale[:, cal], targets=targets[cal]), 0.25
    )
    lower, upper = regressor.intervals(Prediction(means=means[:, rest], noise_scale=scale[:, rest]))
    assert record["normalized"]["quantile"] == regressor.quantile
    assert record["normalized"]["coverage"] == interval_metrics(lower, upper, targets[rest]).coverage


def _one_line_error(capsys, args):
    assert main([str(arg) for arg in args]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--conformal", "0.1", "--ood", "mnist"], "--conformal and --ood do not combine"),
        (["--conformal", "0.1", "--temperature"], "--conformal and --temperature do not combine"),
        (["--conformal-method", "aps"], "--conformal-method only applies with --conformal ALPHA"),
        (["--calibration-size", "50"], "--calibration-size only applies with --conformal ALPHA"),
        (["--conformal", "0.1", "--calibration-size", "0"], "--calibration-size must be an int >= 1, got 0"),
    ],
)
def test_options_that_do_not_combine_fail_before_any_data(digits_run, capsys, no_data, extra, message):
    assert message in _one_line_error(capsys, ["evaluate", digits_run, *extra])


def test_calibration_size_at_least_the_test_set_is_refused_after_loading_and_before_scoring(digits_run, capsys):
    before = (digits_run / "evaluation.json").stat().st_mtime_ns if (digits_run / "evaluation.json").exists() else 0
    err = _one_line_error(capsys, ["evaluate", digits_run, "--conformal", "0.1", "--calibration-size", NUM_TEST])
    assert f"--calibration-size {NUM_TEST} leaves nothing to score: the test set has {NUM_TEST} inputs" in err
    after = (digits_run / "evaluation.json").stat().st_mtime_ns if (digits_run / "evaluation.json").exists() else 0
    assert before == after  # nothing written


def test_evaluate_records_selective_prediction_and_draws_the_risk_coverage_figure(digits_run):
    metrics = evaluate_run(digits_run)
    selective = json.loads((digits_run / "evaluation.json").read_text())["selective"]
    assert set(selective["aurc"]) == {"max_probability", "entropy", "mutual_information"}
    error = 1 - metrics["accuracy"]  # of the predictive mean, as the referral curves score it
    for score, at_rate in selective["accuracy_at_referral"].items():
        assert at_rate["0"] == pytest.approx(metrics["accuracy"])  # nothing referred
        # AURC is the mean risk over coverages k/N; the risk at full coverage is the overall error
        assert 0 <= selective["aurc"][score] <= 1
    # max probability orders this classifier's mistakes better than chance: AURC below the overall error rate
    assert selective["aurc"]["max_probability"] < error
    assert (digits_run / "risk_coverage.png").stat().st_size > 10_000


def test_selective_accuracies_do_not_depend_on_the_order_of_tied_inputs():
    from pyro_bnn.runs.selective_scoring import selective_record

    # One sample (a point estimate): four inputs with the same probabilities, two right and two wrong. Referring 30 %
    # refers one and keeps three of the four tied inputs: over the orders of the tie, 1/2 of them are right, in
    # either input order (a stable sort would keep the last three: 1/3 or 2/3 right).
    probs = torch.tensor([[[0.7, 0.3]] * 4])
    for labels in (torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 0, 0])):
        record = selective_record(Prediction(probs=probs, targets=labels))
        assert set(record["aurc"]) == {"max_probability", "entropy"}  # no mutual information for one sample
        assert record["accuracy_at_referral"]["max_probability"]["0"] == pytest.approx(0.5)
        assert record["accuracy_at_referral"]["max_probability"]["0.3"] == pytest.approx(0.5)
