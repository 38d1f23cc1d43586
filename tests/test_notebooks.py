"""Every notebook's code cells run top to bottom (a smoke run: no Jupyter needed, figures are not shown)."""

import json
from pathlib import Path

import matplotlib
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    matplotlib.use("Agg")
    notebook = json.loads(path.read_text())
    namespace = {"__name__": "__notebook__"}
    for i, cell in enumerate(notebook["cells"]):
        assert cell["cell_type"] != "code" or cell["outputs"] == [], f"{path.name}: strip the outputs of cell {i}"
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}[{i}]", "exec"), namespace)
    assert namespace["prediction"].metrics()["accuracy"] > 0.8
