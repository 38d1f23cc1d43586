"""The cold-posterior study's table and verdict on hand-made runs (the training is the run engine's, tested there)."""

from __future__ import annotations

import pytest

from pyro_bnn.reproduce.studies.cold_posterior import summarise, verdict


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
    assert "not settled" in unsettled


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
