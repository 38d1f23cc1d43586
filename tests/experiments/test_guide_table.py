"""The "which guide for which model" table: every row trains through the Trainer as a user passes it."""

import json
import math

from pyro_bnn.experiments.guide_table import ROWS, Setting, run


def test_every_guide_row_trains_and_the_table_is_written(tmp_path):
    results = run(tmp_path / "table", Setting(epochs=1, seeds=(0,), num_samples=4))
    assert [r["guide"] for r in results] == [row.label for row in ROWS]
    for result in results:
        (scores,) = result["per_seed"]
        assert 0.0 <= scores["accuracy"] <= 1.0 and math.isfinite(scores["ece"]), result["guide"]
    table = (tmp_path / "table" / "table.md").read_text()
    assert table.count("\n| ") == len(ROWS) + 1 and "python -m pyro_bnn.experiments.guide_table" in table
    assert json.loads((tmp_path / "table" / "table.json").read_text())["setting"]["epochs"] == 1
