"""Every notebook's code cells run top to bottom, in this process (no Jupyter kernel needed; figures are drawn on
matplotlib's Agg backend and not shown).

The tutorial notebooks (``notebooks/NN_*.ipynb``) read ``SMOKE`` from the environment variable ``PYRO_BNN_SMOKE``
in their first code cell; it is set to 1 here, which shrinks each to seconds. Each notebook then has its own check
on the variables it defines, so a notebook that runs but computes nothing useful still fails.
"""

import json
import math
import re
import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

from pyro_bnn.guides import guide_families, unregister_guide

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
TUTORIALS = ["01_compose_and_train", "02_swap_guides", "03_posterior_shape", "04_node_noise", "05_compose"]
SMOKE_ENV = "PYRO_BNN_SMOKE"


def _finite(*values) -> bool:
    return all(math.isfinite(float(v)) for v in values)


def check_quickstart(ns):
    assert ns["prediction"].metrics()["accuracy"] > 0.8


def check_compose_and_train(ns):
    table = ns["table"]
    assert list(table.index) == ["Normal(0, 1)", "Laplace(0, 1)", "hierarchical", "deterministic"]
    assert _finite(*table.to_numpy().ravel())
    assert (table["accuracy"] > 0.3).all()  # above chance (0.1) after the smoke run's few epochs
    assert ns["models"]["hierarchical"].hyper_site_names  # the hierarchical prior has its per-layer scale sites
    uncertainty = ns["uncertainty"]
    assert _finite(*uncertainty[["total", "aleatoric", "epistemic"]].to_numpy().ravel())
    assert (uncertainty[uncertainty.model == "deterministic"].epistemic < 1e-6).all()  # 0 up to float32 round-off
    assert (uncertainty[uncertainty.model == "Normal(0, 1)"].epistemic > 0).all()


def check_swap_guides(ns):
    results = ns["results"]
    assert list(results.index) == list(ns["GUIDES"])
    assert any("custom" in name for name in results.index) and any("low-rank" in name for name in results.index)
    assert _finite(*results.to_numpy().ravel())
    assert results.loc["MAP", "mean σ"] == 0 and (results.drop(index="MAP")["mean σ"] > 0).all()
    assert "layer-scale" in {family.name for family in guide_families()}  # the notebook's own guide, registered
    assert "| mixture:4 |" in ns["guide_table"]  # the committed "which guide for which model" table is shown


def check_posterior_shape(ns):
    plateaus = ns["plateaus"]
    assert set(plateaus) == {"ReLU", "Leaky ReLU (-0.5)"}
    for summaries in plateaus.values():
        assert summaries and all(s.num_sampled == ns["PER_LAYER"] for s in summaries.values())
    comparison = ns["comparison"]
    assert list(comparison.index) == ["NUTS", "VI (flat:rel=1)"] and _finite(*comparison.to_numpy().ravel())
    assert set(ns["loo_comparison"].index) == {"N(0, 1)", "N(0, 0.3²)"}
    assert _finite(*ns["loo_comparison"]["elpd_loo"])
    assert ns["nuts"]["fc1.weight"].shape[:2] == (ns["NUTS_CHAINS"], ns["NUTS_SAMPLES"])
    sets = ns["set_table"]  # conformal sets of NUTS and VI, three methods each, on the scored half of the test set
    assert list(sets.index) == [(m, s) for m in ("NUTS", "VI") for s in ("thr", "aps", "raps")]
    assert _finite(*sets.to_numpy().ravel()) and sets["mean set size"].between(0, 2).all()
    # what the prose says of the set table holds at smoke size too: `thr` covers the most, VI's sets are the larger
    for label in ("NUTS", "VI"):
        assert sets.loc[(label, "thr"), "coverage"] >= sets.loc[[(label, "aps"), (label, "raps")], "coverage"].max()
    for method in ("thr", "aps", "raps"):
        assert sets.loc[("VI", method), "mean set size"] > sets.loc[("NUTS", method), "mean set size"]
    assert all(0 <= curve.aurc <= 1 for curve in ns["curves"]) and len(ns["curves"]) == 3


def check_node_noise(ns):
    counts = ns["counts"]
    assert counts.input_nodes == 4355 and counts.weights > 11_000_000  # ResNet-18: 1 latent per ~2 500 weights
    assert _finite(*ns["metrics"].to_numpy().ravel())
    uncertainty = ns["uncertainty"]
    assert _finite(*uncertainty[["total", "aleatoric", "epistemic"]].to_numpy().ravel())
    assert (uncertainty[uncertainty.model == "node-noise BNN"].epistemic > 0).all()


def check_compose(ns):
    assert ns["draws"]["f"].shape == (200, 200, 1)  # (S, grid points, 1): the network's outputs per draw
    assert ns["draws"]["sigma"].shape == (200,)
    assert 0 < ns["sigma_median"] < 10 and _finite(ns["sigma_median"])
    assert ns["centred"].shape == (3,) and _finite(*ns["centred"])
    assert ns["losses"][-1] < ns["losses"][0] and ns["losses_h"][-1] < ns["losses_h"][0]
    assert ns["loop_losses"][-1] < ns["loop_losses"][0]  # the plain loop lowers its negative ELBO
    assert ns["loop_draws"].std(0).mean() > 0  # the module draws new weights on every forward
    assert ns["prediction"].means.shape == (200, 400, 1)  # section 4: the Trainer's model, as a Prediction
    assert len(ns["lv_history"]) == ns["LV_EPOCHS"] and _finite(*ns["lv_metrics"].values())


CHECKS = {
    "quickstart": check_quickstart,
    "01_compose_and_train": check_compose_and_train,
    "02_swap_guides": check_swap_guides,
    "03_posterior_shape": check_posterior_shape,
    "04_node_noise": check_node_noise,
    "05_compose": check_compose,
}


def _code_cells(path: Path) -> list[str]:
    notebook = json.loads(path.read_text())
    cells = []
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: strip the outputs of cell {i}"
            assert cell.get("execution_count") is None, f"{path.name}: clear the execution count of cell {i}"
            # IPython's magics (the first cell's ``%matplotlib inline``) are for a kernel: Python runs the rest
            lines = "".join(cell["source"]).splitlines(keepends=True)
            cells.append("".join(line for line in lines if not line.startswith("%")))
    return cells


def test_every_notebook_shows_the_figures_pyro_bnn_returns():
    """pyro_bnn's plots build ``matplotlib.figure.Figure`` objects without pyplot; a kernel shows a returned figure
    only once its inline backend is set up, which a notebook that never draws with pyplot first did not do (its
    figures printed as ``<Figure size 1260x340 with 3 Axes>``). ``%matplotlib inline`` in the first cell sets it up."""
    for path in NOTEBOOKS:
        first = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        assert "".join(first["source"]).startswith("%matplotlib inline\n"), f"{path.name}: first code cell"


def test_there_are_notebooks():
    assert [p.stem for p in NOTEBOOKS if p.stem != "quickstart"] == TUTORIALS
    assert set(CHECKS) == {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", [NOTEBOOK_DIR / f"{name}.ipynb" for name in TUTORIALS], ids=TUTORIALS)
def test_the_first_code_cell_holds_the_parameters(path):
    first = _code_cells(path)[0]
    assert f'SMOKE = os.environ.get("{SMOKE_ENV}", "0") == "1"' in first
    assert 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"' in first


@pytest.fixture
def notebook_process(monkeypatch, tmp_path):
    """What a notebook run changes, undone afterwards: the working folder, the figures, torch's thread count, and
    guide families a notebook registers."""
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SMOKE_ENV, "1")
    threads = torch.get_num_threads()
    # The notebooks' networks are small: one thread is faster, and much steadier on a machine shared with other jobs.
    torch.set_num_threads(1)
    families = {family.name for family in guide_families()}
    yield
    torch.set_num_threads(threads)
    plt.close("all")
    for family in guide_families():
        if family.name not in families:
            unregister_guide(family.name)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, notebook_process):
    namespace = {"__name__": "__notebook__"}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "FigureCanvasAgg is non-interactive", UserWarning)
        for i, source in enumerate(_code_cells(path)):
            exec(compile(source, f"{path.name}[cell {i}]", "exec"), namespace)
    if path.stem != "quickstart":
        assert namespace["SMOKE"] is True
    CHECKS[path.stem](namespace)


def _markdown(name: str) -> str:
    cells = json.loads((NOTEBOOK_DIR / f"{name}.ipynb").read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def _full_run_value(name: str, parameter: str) -> int:
    """A parameter's full-run value from the first code cell's ``NAME = smoke if SMOKE else full`` line."""
    match = re.search(rf"^{parameter} = \S+ if SMOKE else (\d+)", _code_cells(NOTEBOOK_DIR / f"{name}.ipynb")[0], re.M)
    assert match, f"{name}: no full-run value of {parameter}"
    return int(match.group(1))


def test_the_guide_table_command_is_the_one_the_committed_table_states():
    """Notebook 02 gives the study's command, the table it prints stated the deprecated shim's
    (``pyro_bnn.experiments.guide_table``); both now give the command the study writes."""
    from pyro_bnn.reproduce.studies import guide_table

    committed = json.loads((NOTEBOOK_DIR.parent / "results" / "guide-table" / "table.json").read_text())["command"]
    assert committed == "python -m pyro_bnn.reproduce.studies.guide_table --out results/guide-table"
    assert f"`{committed}`" in (NOTEBOOK_DIR.parent / "results" / "guide-table" / "table.md").read_text()
    assert f"`{committed}`" in _markdown("02_swap_guides")
    assert guide_table.COMMAND == f"python -m {guide_table.__name__}"  # what run() records, before its arguments


def test_the_pareto_k_threshold_is_arviz_s_for_the_full_run():
    """ArviZ calls a Pareto k bad above min(1 - 1/log10(S), 0.7) for S draws, not above 0.7: notebook 03 says
    which threshold its full run's draws get (0.64 for 4 chains of 150)."""
    az = pytest.importorskip("arviz")
    chains, draws = (
        _full_run_value("03_posterior_shape", "NUTS_CHAINS"),
        _full_run_value("03_posterior_shape", "NUTS_SAMPLES"),
    )
    generator = torch.Generator().manual_seed(0)
    idata = az.from_dict(
        posterior={"w": torch.randn(chains, draws, generator=generator).numpy()},
        log_likelihood={"y": (torch.randn(chains, draws, 20, generator=generator) - 1).numpy()},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threshold = az.loo(idata, pointwise=True).good_k
    assert (chains, draws, round(threshold, 2)) == (4, 150, 0.64)
    prose = _markdown("03_posterior_shape")
    assert f"{threshold:.2f} for the full run's {chains * draws} draws" in prose
    assert "(k > 0.7)" not in prose


def test_the_guide_prose_quotes_the_committed_table_s_seconds_as_they_are():
    """Notebook 02 called the flat guide "the fastest per step" next to the committed table it prints, where flat
    took 14.8 s and MAP 0.1 s (one-off costs charged to the first rows; the study now warms up first). The prose says
    what that table's seconds are (each row's ``Trainer.fit`` wall time, too small to rank guides: two rows that train
    the same AutoNormal differ) and sends speed to the notebook's own ``train s``; the seconds it quotes are the
    table's."""
    rows = json.loads((NOTEBOOK_DIR.parent / "results" / "guide-table" / "table.json").read_text())["rows"]
    seconds = {row["guide"]: sum(r["seconds"] for r in row["per_seed"]) / len(row["per_seed"]) for row in rows}
    prose = _markdown("02_swap_guides")
    assert f"`autonormal:0.01` {seconds['autonormal:0.01']:.1f} s" in prose
    assert f'"Pyro AutoNormal, init_to_network" {seconds["Pyro AutoNormal, init_to_network"]:.1f} s' in prose
    assert "fastest per step" not in prose and "about 3x BBB's time" not in prose


def test_the_conformal_prose_reads_set_size_with_coverage():
    """Notebook 03 said `thr` "gives the smallest sets on average" above a table where, at full size, `aps` and
    `raps` gave the smaller sets (NUTS 0.86 against 0.90) at lower coverage (0.81 against 0.88)."""
    prose = _markdown("03_posterior_shape")
    assert "gives the smallest sets on average;" not in prose
    assert "read set size together with coverage" in prose
