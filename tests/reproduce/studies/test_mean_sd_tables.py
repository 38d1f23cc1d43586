"""The demo and the guide tables take mean ± sd from :func:`pyro_bnn.evaluation.mean_sd`: the committed
results/demo and results/guide-table numbers come out the same."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyro_bnn.commands.demo import summarize_seeds
from pyro_bnn.reproduce.studies.guide_table import _cell

RESULTS = Path(__file__).resolve().parents[3] / "results"


def test_the_demo_summary_is_the_committed_one():
    summary = json.loads((RESULTS / "demo" / "summary.json").read_text())
    results = {label: [SimpleNamespace(metrics=m) for m in runs] for label, runs in summary["runs"].items()}
    computed = summarize_seeds(results)
    assert {label: {c: list(v) for c, v in row.items()} for label, row in computed.items()} == summary[
        "mean_sd_over_seeds"
    ]
    first = next(iter(results))
    results[first][0].metrics = {**results[first][0].metrics, "ece": math.nan}
    mean, sd = summarize_seeds(results)[first]["ece"]  # not the mean of fewer seeds than the table says
    assert math.isnan(mean) and math.isnan(sd)


@pytest.mark.parametrize(
    ("values", "digits", "cell"),
    [([0.5, 0.25, 0.125], 3, "0.292 ± 0.191"), ([0.7], 4, "0.7000 ± 0.0000"), ([math.nan, 1.0], 3, "n/a")],
)
def test_guide_table_cells(values, digits, cell):
    assert _cell(values, digits) == cell


def test_guide_table_cells_are_the_committed_ones():
    table = json.loads((RESULTS / "guide-table" / "table.json").read_text())
    text = (RESULTS / "guide-table" / "table.md").read_text()
    for row in table["rows"]:
        cells = " | ".join(_cell([r[k] for r in row["per_seed"]]) for k in ("accuracy", "ece", "sigma"))
        assert f"| {row['model']} | {row['guide']} | {cells} |" in text
