"""Comparability of a cell with its paper, on hand-made records: every training state, the accuracy tolerance, and
verdicts that never say *does not hold* about a cell that is not comparable (issue 39 item 1)."""

from __future__ import annotations

import dataclasses

import pytest

from pyro_bnn.reproduce.comparability import FLAT, TrainingState, check_cell, training_state
from pyro_bnn.reproduce.papers.leaky_calibration.analysis import _table_1
from pyro_bnn.reproduce.papers.leaky_calibration.plan import LEAKY, PROFILES
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status, Verdict
from pyro_bnn.reproduce.report import overall_verdict
from pyro_bnn.runs.config import RunConfig


def _run(curve, *, epochs=10, patience=3, accuracy=0.97, activation="relu", seed=0, ece=0.02) -> RunRecord:
    """A done run whose validation accuracy went through ``curve``, one value per epoch run."""
    config = RunConfig(dataset="mnist", model="3fc", activation=activation, seed=seed, epochs=epochs, patience=patience)
    spec = RunSpec(config, label="x", tags=(("objective", "paper"), ("part", "bnn")))
    history = [{"epoch": i + 1, "val_accuracy": v} for i, v in enumerate(curve)]
    metrics = {"accuracy": accuracy, "ece_sampled_10": ece, "epochs_run": len(curve)}
    return RunRecord(spec, Status.DONE, metrics, history)


RISING = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94]
LEVEL = [0.5, 0.8, 0.9, 0.95, 0.96, 0.97, 0.97, 0.971, 0.972, 0.973]


@pytest.mark.parametrize(
    "run, paper_epochs, state",
    [
        (_run(RISING[:6]), None, TrainingState.STOPPED),  # patience ended it at 6 of 10
        (_run(LEVEL), None, TrainingState.FLAT),  # at the cap, +0.003 over its last 3 epochs
        (_run(RISING), None, TrainingState.IMPROVING),  # at the cap, +0.06 over its last 3 epochs
        (_run(RISING + RISING, patience=0, epochs=20), 20, TrainingState.PAPER_SCHEDULE),
        (_run([], patience=0), None, TrainingState.UNKNOWN),
        (_run(RISING[:3], patience=0, epochs=3), None, TrainingState.UNKNOWN),  # too short to judge flatness
    ],
    ids=["stopped", "flat", "improving", "paper-schedule", "no-history", "too-short"],
)
def test_training_states(run, paper_epochs, state):
    assert training_state(run, paper_epochs=paper_epochs) is state
    assert state.converged is (state in (TrainingState.STOPPED, TrainingState.FLAT, TrainingState.PAPER_SCHEDULE))


def test_flat_is_judged_against_the_stated_margin():
    just_flat = [0.5, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9 + FLAT]
    just_rising = just_flat[:-1] + [0.9 + FLAT + 0.001]
    assert training_state(_run(just_flat)) is TrainingState.FLAT
    assert training_state(_run(just_rising)) is TrainingState.IMPROVING


def test_a_cell_is_comparable_only_when_converged_and_near_the_paper_s_accuracy():
    good = [_run(LEVEL, seed=s, accuracy=0.975) for s in range(3)]
    check = check_cell(good, 0.98, 0.02)
    assert check.comparable and check.reason == ""
    assert check.summary == "converged 3/3, epochs 10, accuracy 0.975 vs 0.980"

    far = check_cell([_run(LEVEL, seed=s, accuracy=0.95) for s in range(2)], 0.98, 0.02)
    assert not far.comparable and far.reason == "accuracy 0.950 is 0.030 from the paper's 0.980 (tolerance 0.02)"

    mixed = [_run(RISING, seed=0), _run(RISING[:6], seed=1), _run(RISING, seed=2)]
    check = check_cell(mixed, None, 0.0)  # no published accuracy: convergence alone
    assert not check.comparable and check.reason == "2 of 3 runs at the cap, still improving"
    assert check.summary == "converged 1/3, epochs 6-10, accuracy 0.970"
    assert check_cell([], 0.98, 0.02).reason == "no runs yet"


def test_overall_verdicts_count_comparable_cells_only():
    nc, holds, no = Verdict.NOT_COMPARABLE, Verdict.HOLDS, Verdict.DOES_NOT_HOLD
    assert overall_verdict([nc, nc]) is nc
    assert overall_verdict([nc, nc, holds]) is holds
    assert overall_verdict([nc, nc, nc, no]) is no  # one of one comparable cells does not hold
    assert overall_verdict([nc, holds, Verdict.INCONCLUSIVE]) is Verdict.INCONCLUSIVE
    assert overall_verdict([]) is Verdict.INCONCLUSIVE


def test_table_1_never_says_does_not_hold_about_networks_that_did_not_train(tmp_path):
    # ReLU separated better calibrated, but every run stopped at its cap still improving: the cell cannot be judged
    leaky = [_run(RISING, activation=LEAKY, seed=s, accuracy=0.97, ece=0.09 + s / 1000) for s in range(3)]
    relu = [_run(RISING, seed=s, accuracy=0.98, ece=0.05 + s / 1000) for s in range(3)]
    settings = {**PROFILES["quick"].settings, "datasets": ("mnist",), "models": ("3fc",)}
    profile = dataclasses.replace(PROFILES["quick"], settings=settings)
    section, headlines = _table_1(leaky + relu, profile, tmp_path)
    assert headlines[0].verdict is Verdict.NOT_COMPARABLE
    assert "0 of 1 cells comparable" in headlines[0].reason
    assert "3 of 3 runs at the cap, still improving" in headlines[0].reason
    row = section.tables[0].splitlines()[4]
    assert "converged 0/3, epochs 10, accuracy 0.970 vs 0.970" in row and row.endswith("not comparable at this scale |")
    # the same cell with converged runs: judged, and ReLU's lower ECE is a result
    for run in leaky + relu:
        run.history = [{"epoch": i + 1, "val_accuracy": v} for i, v in enumerate(LEVEL)]
    _, headlines = _table_1(leaky + relu, profile, tmp_path)
    assert headlines[0].verdict is Verdict.DOES_NOT_HOLD


def test_no_effect_is_printed_with_its_interval():
    from pyro_bnn.reproduce.planned import Headline

    assert Headline("c", Verdict.NO_EFFECT, "r", interval=0.016).label == "no effect within ±0.016"
    assert Headline("c", Verdict.HOLDS, "r").label == "holds"
    assert overall_verdict([Verdict.NO_EFFECT, Verdict.NOT_COMPARABLE]) is Verdict.NO_EFFECT
    assert overall_verdict([Verdict.NO_EFFECT, Verdict.HOLDS]) is Verdict.INCONCLUSIVE


def test_a_patience_of_the_whole_run_is_no_early_stopping_and_the_flat_margin_is_the_rule_s():
    whole = _run([0.5 + 0.02 * i for i in range(20)], patience=20, epochs=20)  # the best epoch restored, no stop
    assert training_state(whole, paper_epochs=20) is TrainingState.PAPER_SCHEDULE
    assert training_state(whole) is TrainingState.IMPROVING
    almost = _run([0.5, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.903])  # +0.003 over its last epochs
    assert training_state(almost) is TrainingState.FLAT
    assert training_state(almost, flat=0.002) is TrainingState.IMPROVING


def test_a_cell_whose_accuracies_are_not_all_finite_is_not_comparable():
    # A NaN accuracy once made the cell's mean NaN, and |NaN - 0.98| > 0.02 is False: the gate passed, its summary
    # reading "accuracy nan vs 0.980". Each run without a finite accuracy is named now, and the mean is the finite
    # runs' (0.5 alone is 0.48 from the paper's).
    nan = float("nan")
    both = check_cell([_run(LEVEL, seed=0, accuracy=nan), _run(LEVEL, seed=1, accuracy=nan)], 0.98, 0.02)
    assert not both.comparable and both.reason == "2 of 2 runs with no finite accuracy"
    assert both.summary == "converged 2/2, epochs 10, accuracy — vs 0.980"
    one = check_cell([_run(LEVEL, seed=0, accuracy=0.5), _run(LEVEL, seed=1, accuracy=nan)], 0.98, 0.02)
    assert not one.comparable
    assert (
        one.reason
        == "1 of 2 runs with no finite accuracy; accuracy 0.500 is 0.480 from the paper's 0.980 (tolerance 0.02)"
    )
    # near the paper but one run diverged: still not comparable
    near = check_cell([_run(LEVEL, seed=0, accuracy=0.975), _run(LEVEL, seed=1, accuracy=float("inf"))], 0.98, 0.02)
    assert (near.comparable, near.reason) == (False, "1 of 2 runs with no finite accuracy")
    # no published accuracy: a recorded NaN still fails; a cell that records no accuracy (regression) does not
    assert check_cell([_run(LEVEL, accuracy=nan)], None, 0.0).reason == "1 of 1 runs with no finite accuracy"
    regression = _run(LEVEL)
    del regression.metrics["accuracy"]
    assert check_cell([regression], None, 0.0).comparable
