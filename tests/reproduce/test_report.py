"""The report helper behind the conformal columns: mean ± sd over the seeds that have a metric, said when only some
do, a dash when none does."""

import pytest

from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status
from pyro_bnn.reproduce.report import CONFORMAL_COLUMNS, finite_seeds, metric_cells, planned, runs_missing, select
from pyro_bnn.runs.config import RunConfig


def _runs(*pairs) -> list[RunRecord]:
    """One record per ``(coverage, set size)`` pair; None leaves both out (a record from before they existed)."""
    records = []
    for seed, pair in enumerate(pairs):
        metrics = {"accuracy": 0.9} if pair is None else {"conformal_coverage": pair[0], "conformal_set_size": pair[1]}
        records.append(RunRecord(RunSpec(RunConfig(seed=seed), "x"), Status.DONE, metrics))
    return records


@pytest.mark.parametrize(
    ("pairs", "cells"),
    [
        # hand: mean 0.91, sd sqrt(2 * 0.01^2 / 1) = 0.0141; mean 1.6, sd 0.141
        ([(0.90, 1.5), (0.92, 1.7)], ["0.910 ± 0.014", "1.60 ± 0.14"]),
        ([(0.90, 1.5), None, (0.92, 1.7)], ["0.910 ± 0.014 (2 of 3 seeds)", "1.60 ± 0.14 (2 of 3 seeds)"]),
        ([(0.90, 1.5), None], ["0.900 (1 of 2 seeds)", "1.50 (1 of 2 seeds)"]),
        ([(0.90, 1.5)], ["0.900 (1 seed)", "1.50 (1 seed)"]),
        ([None, None], ["—", "—"]),
        ([], ["—", "—"]),
    ],
)
def test_metric_cells(pairs, cells):
    assert metric_cells(_runs(*pairs)) == cells
    assert [key for key, _ in CONFORMAL_COLUMNS] == ["conformal_coverage", "conformal_set_size"]


def test_finite_seeds_keeps_the_finite_values_and_names_those_left_out():
    nan, inf = float("nan"), float("inf")
    kept, note = finite_seeds({"Leaky": [0.01, None, nan], "ReLU": [0.03, inf, 0.02, 0.04]}, "ECE")
    assert kept == [[0.01], [0.03, 0.02, 0.04]]
    assert note == "2 of 3 Leaky seeds have no finite ECE, left out; 1 of 4 ReLU seeds have no finite ECE, left out"
    assert finite_seeds({"": [0.5, 0.25]}, "gain") == ([[0.5, 0.25]], "")
    assert finite_seeds({"": [nan]}, "gain") == ([[]], "1 of 1 seeds have no finite gain, left out")


def test_a_cell_with_any_planned_run_not_done_has_runs_missing():
    records = _runs((0.9, 1.5), (0.9, 1.5), (0.9, 1.5))
    records[1].status = Status.MISSING
    assert [r.config.seed for r in planned(records)] == [0, 1, 2]  # the plan: every record, whatever its status
    assert [r.config.seed for r in select(records)] == [0, 2]
    assert runs_missing((3, 3), (2, 3)) == "runs missing (1 of 6 planned)"
    assert runs_missing((0, 3), (3, 3)) == "runs missing (3 of 6 planned)"
    assert runs_missing((3, 3), (3, 3)) == ""
    assert runs_missing((0, 0), (3, 3)) == "runs missing (0 of 3 planned)"  # an arm with nothing planned or done
    assert runs_missing((0, 0)) == "runs missing"
