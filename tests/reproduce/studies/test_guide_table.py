"""The "which guide for which model" table: every row trains through the Trainer as a user passes it."""

import json
import math

import pytest

from pyro_bnn.reproduce.studies.guide_table import ROWS, Setting, run


def test_every_guide_row_trains_and_the_table_is_written(tmp_path):
    results = run(tmp_path / "table", Setting(epochs=1, seeds=(0,), num_samples=4))
    assert [r["guide"] for r in results] == [row.label for row in ROWS]
    for result in results:
        (scores,) = result["per_seed"]
        assert 0.0 <= scores["accuracy"] <= 1.0 and math.isfinite(scores["ece"]), result["guide"]
    table = (tmp_path / "table" / "table.md").read_text()
    assert table.count("\n| ") == len(ROWS) + 1 and "python -m pyro_bnn.reproduce.studies.guide_table" in table
    assert json.loads((tmp_path / "table" / "table.json").read_text())["setting"]["epochs"] == 1


def _cell(accuracy, ece, sigma=0.02, mi=0.1):
    return {"accuracy": accuracy, "ece": ece, "sigma": sigma, "mutual_information": mi}


def test_the_default_is_the_candidate_that_passes_every_check():
    from pyro_bnn.reproduce.studies.guide_table import REFERENCE, choose_default

    sticks = ["small", "3FC"]
    means = {
        "good": {"small": _cell(0.85, 0.05), "3FC": _cell(0.80, 0.03, sigma=0.02, mi=0.15)},
        "sharp": {"small": _cell(0.86, 0.04), "3FC": _cell(0.81, 0.02, sigma=0.005, mi=0.15)},  # sigma < 0.01
        "noisy": {"small": _cell(0.80, 0.05), "3FC": _cell(0.80, 0.03, mi=0.15)},  # 0.06 below the best on small
        "hot": {"small": _cell(0.86, 0.07), "3FC": _cell(0.80, 0.03, mi=0.15)},  # ECE 0.03 above the best on small
        REFERENCE: {"small": _cell(0.85, 0.04), "3FC": _cell(0.81, 0.02, sigma=0.004, mi=0.06)},
    }
    choice = choose_default(means, sticks, "3FC")
    assert choice["default"] == "good" and choice["all_pass"]
    assert choice["failures"]["good"] == []
    assert choice["failures"]["sharp"] == ["3FC: mean sigma 0.0050 < 0.01"]
    assert choice["failures"]["noisy"] == ["small: accuracy 0.0600 below the best"]
    assert choice["failures"]["hot"] == ["small: ECE 0.0300 above the best"]
    assert "3FC: mutual information 0.0600 < twice" in choice["failures"][REFERENCE][-1]


def test_without_a_candidate_that_passes_sigma_and_mi_are_hard_and_the_smallest_total_miss_decides():
    from pyro_bnn.reproduce.studies.guide_table import REFERENCE, choose_default

    means = {
        "sharp": {"s": _cell(0.85, 0.05), "3FC": _cell(0.81, 0.02, sigma=0.005)},  # accurate, but sigma < 0.01
        "once": {"s": _cell(0.85, 0.05), "3FC": _cell(0.70, 0.03)},  # one miss: 0.11 below on 3FC (0.09 over)
        "twice": {"s": _cell(0.82, 0.05), "3FC": _cell(0.78, 0.03)},  # two misses: 0.03 below on both (0.02 over)
        REFERENCE: {"s": _cell(0.75, 0.05), "3FC": _cell(0.81, 0.02, sigma=0.001, mi=0.01)},
    }
    choice = choose_default(means, ["s", "3FC"], "3FC")
    assert choice["default"] == "twice" and not choice["all_pass"]
    assert choice["failures"]["twice"] == ["s: accuracy 0.0300 below the best", "3FC: accuracy 0.0300 below the best"]
    assert choice["excess"] == {"sharp": 0.0, "once": 0.09, "twice": 0.02, REFERENCE: 0.08}
    assert choice["failures"]["sharp"] == ["3FC: mean sigma 0.0050 < 0.01"]


def test_the_suite_writes_its_table_and_resumes_from_its_cells(tmp_path, monkeypatch):
    from pyro_bnn.reproduce.studies import guide_table

    sticks = (guide_table.Yardstick("moons quick", "moons", "tanh-small", epochs=1, batch_size=128, lr=1e-2,
                                    num_samples=4),)  # fmt: skip
    guides = ("flat:0.01", "autonormal:0.001", "map")
    result = guide_table.run_suite(tmp_path / "suite", guides=guides, yardsticks=sticks, seeds=(0,))
    assert set(result["rows"]) == set(guides) and result["choice"]["default"] in ("flat:0.01", "autonormal:0.001")
    text = (tmp_path / "suite" / "suite.md").read_text()
    assert "## moons quick" in text and f"**{result['choice']['default']}**" in text and "| map |" in text
    assert len(list((tmp_path / "suite" / "cells").glob("*.json"))) == 3

    def no_training(*args, **kwargs):
        raise AssertionError("a measured cell was measured again")

    monkeypatch.setattr(guide_table, "measure_yardstick", no_training)
    again = guide_table.run_suite(tmp_path / "suite", guides=guides, yardsticks=sticks, seeds=(0,))
    assert again["rows"] == result["rows"]


def test_among_candidates_that_all_pass_the_smallest_worst_accuracy_gap_wins_and_the_reference_is_needed():
    from pyro_bnn.reproduce.studies.guide_table import REFERENCE, choose_default

    means = {
        "close": {"s": _cell(0.85, 0.05), "3FC": _cell(0.80, 0.03, mi=0.2)},  # worst gap 0.005
        "closer": {"s": _cell(0.855, 0.05), "3FC": _cell(0.805, 0.03, mi=0.2)},  # worst gap 0.0
        REFERENCE: {"s": _cell(0.84, 0.05), "3FC": _cell(0.805, 0.03, sigma=0.001, mi=0.05)},
    }
    choice = choose_default(means, ["s", "3FC"], "3FC")
    assert choice["all_pass"] and choice["default"] == "closer" and choice["failures"]["close"] == []
    del means[REFERENCE]
    with pytest.raises(ValueError, match=REFERENCE):
        choose_default(means, ["s", "3FC"], "3FC")
