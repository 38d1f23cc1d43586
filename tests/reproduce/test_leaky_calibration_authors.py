"""``leaky-calibration``'s ``full-3fc-authors`` grid: judged on the authors' ECE binning where every run recorded it,
with the accuracy-gate departure measured on its own records."""

from __future__ import annotations

import csv
import dataclasses

from pyro_bnn.reproduce import Status, Verdict
from pyro_bnn.reproduce.papers.leaky_calibration import LeakyCalibration
from pyro_bnn.reproduce.papers.leaky_calibration.analysis import _table_1
from pyro_bnn.reproduce.papers.leaky_calibration.departures import INPUT_SCALING, departures
from pyro_bnn.reproduce.papers.leaky_calibration.plan import LEAKY, PROFILES
from pyro_bnn.reproduce.papers.leaky_calibration.verdicts import ECE_SAMPLED, ECE_SAMPLED_AUTHORS, judged_ece
from pyro_bnn.reproduce.planned import RunRecord, RunSpec
from pyro_bnn.runs.config import RunConfig

PROFILE = PROFILES["full-3fc-authors"]


def _record(activation: str, seed: int, ours: float, theirs: float | None, accuracy: float = 0.97) -> RunRecord:
    config = RunConfig(dataset="mnist", model="3fc", activation=activation, seed=seed, epochs=50, patience=3,
                       normalization="mnist-standard")  # fmt: skip
    spec = RunSpec(config, label="x", measures=("sampled_label_ece:10,authors",),
                   tags=(("objective", "paper"), ("part", "bnn")))  # fmt: skip
    metrics = {ECE_SAMPLED: ours, "accuracy": accuracy, "accuracy_sampled": accuracy - 0.001, "epochs_run": 12}
    if theirs is not None:
        metrics[ECE_SAMPLED_AUTHORS] = theirs
    return RunRecord(spec, Status.DONE, metrics)


def _cell(theirs_leaky=(0.040, 0.041, 0.042), theirs_relu=(0.010, 0.011, 0.012)):
    # by the library's binning Leaky is the better calibrated; by the authors' ReLU is
    leaky = [_record(LEAKY, s, 0.010 + s / 1000, t) for s, t in enumerate(theirs_leaky)]
    relu = [_record("relu", s, 0.040 + s / 1000, t) for s, t in enumerate(theirs_relu)]
    return leaky + relu


def test_the_authors_binning_is_judged_only_where_every_run_recorded_it():
    runs = _cell()
    assert judged_ece(runs) == ECE_SAMPLED_AUTHORS
    assert judged_ece([*runs, _record("relu", 3, 0.04, None)]) == ECE_SAMPLED
    assert judged_ece([]) == ECE_SAMPLED


def test_table_1_reads_the_authors_binning_and_writes_both(tmp_path):
    settings = {**PROFILE.settings, "datasets": ["mnist"]}
    section, headlines = _table_1(_cell(), dataclasses.replace(PROFILE, settings=settings), tmp_path)
    assert headlines[0].verdict is Verdict.DOES_NOT_HOLD, headlines[0].reason
    assert "ECE gap Leaky - ReLU +0.030" in headlines[0].reason
    assert "ECE Leaky (10 bins, sampled, authors' binning)" in section.tables[0]
    assert "binned by the authors' rule" in section.text and INPUT_SCALING not in section.text
    rows = list(csv.DictReader((tmp_path / "table1.csv").open()))
    assert {float(r[ECE_SAMPLED_AUTHORS]) for r in rows if r["activation"] == "relu"} == {0.010, 0.011, 0.012}
    assert {float(r[ECE_SAMPLED]) for r in rows if r["activation"] == "relu"} == {0.040, 0.041, 0.042}


def test_the_authors_grid_states_its_accuracy_gate_from_its_own_records():
    runs = _cell()
    text = departures(runs)
    assert text.startswith(" **Departure from the authors' code**: *Accuracy gate.*")
    assert "differ by at most 0.0010 (mnist 3fc" in text and "no arm changes sides of the tolerance" in text
    # an arm at the tolerance's edge by the mean predictive but not by the sampled labels (0.97 - 0.02 = 0.95)
    edge = [dataclasses.replace(r, metrics={**r.metrics, "accuracy": 0.9505, "accuracy_sampled": 0.9490})
            for r in runs if r.config.activation == LEAKY]  # fmt: skip
    assert "would change sides of the 0.02 tolerance: mnist 3fc leaky:-0.5" in departures(edge)
    assert departures([dataclasses.replace(r, metrics={}) for r in runs]) == ""


def test_the_gpu_authors_profile_is_the_gpu_grid_as_the_authors_ran_it_with_full_3fc_authors_3fc_runs():
    gpu = LeakyCalibration().plan(PROFILES["gpu"], 3, {})
    specs = LeakyCalibration().plan(PROFILES["gpu-authors"], 3, {})
    assert len({s.run_id for s in specs}) == 24 and {s.config.normalization for s in specs} == {"mnist-standard"}
    assert {dataclasses.replace(s.config, normalization="unit") for s in specs} == {s.config for s in gpu}
    assert {s.measures for s in specs} == {("sampled_label_ece:10,authors",)}
    full = {s.run_id for s in LeakyCalibration().plan(PROFILE, 3, {})}
    assert {s.run_id for s in specs if s.config.model == "3fc"} == full
