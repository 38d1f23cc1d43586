"""Every module of ``pyro_bnn.experiments`` moved (the run engine and the verbs' analyses to ``pyro_bnn.runs``, the
demo to ``pyro_bnn.commands``, the studies to ``pyro_bnn.reproduce.studies``), and ``pyro_bnn.runs.selective`` was
renamed ``pyro_bnn.runs.selective_scoring``: each old module path still imports, as a shim that warns once and hands
out the new module's objects, a study's old path still runs it under ``python -m``, and nothing in the package
imports a shim."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import pyro_bnn.experiments
import pyro_bnn.runs
from pyro_bnn.experiments._moved import MOVED, RUNNABLE

PACKAGE = Path(pyro_bnn.experiments.__file__).resolve().parents[1]
REPO = PACKAGE.parent
RENAMED = {"pyro_bnn.runs.selective": "pyro_bnn.runs.selective_scoring"}
"""Old paths outside ``pyro_bnn.experiments``: ``{old module: new module}``."""
OLD_PATHS = {f"pyro_bnn.experiments.{name}" for name in MOVED} | set(RENAMED)


def is_old(name: str) -> bool:
    """Whether the dotted ``name`` is a deprecated module path or a name inside one."""
    return any(name == old or name.startswith(f"{old}.") for old in OLD_PATHS)


# One public name per moved module, checked to be the very object of the new module.
NAMES = {
    "batched_runs": "train_runs_batched",
    "config": "RunConfig",
    "conformal": "conformal_record",
    "ensemble": "load_ensemble",
    "evaluate": "evaluate_run",
    "optimisation": "run_optimizer",
    "run_folder": "RunFolder",
    "runs": "train_run",
    "scoring": "score",
    "selective": "selective_record",
    "ood": "evaluate_ood",
    "temperature": "fit_run_temperature",
    "diagnose": "diagnose_run",
    "laplace_run": "laplace_run",
    "sgmcmc_run": "sample_run",
    "demo": "run_demo",
    "guide_table": "run_suite",
    "guide_defaults": "measure",
    "node_noise_lenet": "sweep",
    "nuts_reference": "Settings",
    "nuts_comparison": "flat_chains",
    "nuts_report": "markdown_report",
}


def test_every_moved_module_has_a_name_to_check_and_experiments_holds_shims_only():
    assert set(NAMES) == set(MOVED) and set(RUNNABLE) <= set(MOVED)
    assert {path.stem for path in (PACKAGE / "experiments").glob("*.py")} - {"__init__", "_moved"} == set(MOVED)
    for name in MOVED:
        lines = (PACKAGE / "experiments" / f"{name}.py").read_text().splitlines()
        assert len(lines) <= 12, f"experiments/{name}.py is more than a shim"
    engine = {path.stem for path in (PACKAGE / "runs").glob("*.py")} - {"__init__", "_moved", "selective"}
    assert {new.removeprefix("pyro_bnn.runs.") for new in MOVED.values() if new.startswith("pyro_bnn.runs.")} <= engine


@pytest.mark.parametrize("name", MOVED)
def test_the_old_path_imports_warns_once_and_gives_the_new_objects(name, monkeypatch):
    old, new = f"pyro_bnn.experiments.{name}", importlib.import_module(MOVED[name])
    monkeypatch.delitem(sys.modules, old, raising=False)  # a fresh import, whatever imported it before
    monkeypatch.delattr(pyro_bnn.experiments, name, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(old)} has moved to {re.escape(MOVED[name])};"):
        shim = importlib.import_module(old)
    assert getattr(shim, NAMES[name]) is getattr(new, NAMES[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is shim  # once: a second import is the cached module, silent
        exec(f"from pyro_bnn.experiments.{name} import {NAMES[name]}", {})


def test_the_renamed_selective_scoring_keeps_its_old_path(monkeypatch):
    from pyro_bnn.runs import selective_scoring

    monkeypatch.delitem(sys.modules, "pyro_bnn.runs.selective", raising=False)
    monkeypatch.delattr(pyro_bnn.runs, "selective", raising=False)
    with pytest.warns(
        DeprecationWarning, match=r"pyro_bnn\.runs\.selective has moved to pyro_bnn\.runs\.selective_scoring;"
    ):
        from pyro_bnn.runs import selective
    assert selective.selective_record is selective_scoring.selective_record


@pytest.mark.parametrize("module", [*(f"pyro_bnn.experiments.{name}" for name in RUNNABLE),
                                    "pyro_bnn.reproduce.studies.nuts_reference"])  # fmt: skip
def test_a_study_runs_with_python_m_from_its_old_path_and_the_nuts_package_from_its_new_one(module):
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ") and "--out" in result.stdout


def test_a_shim_forwards_private_names_too(monkeypatch):
    monkeypatch.delitem(sys.modules, "pyro_bnn.experiments.runs", raising=False)
    monkeypatch.delattr(pyro_bnn.experiments, "runs", raising=False)
    with pytest.warns(DeprecationWarning):
        from pyro_bnn.experiments import runs as old
    from pyro_bnn.runs import runs as new

    assert old._build is new._build and old.WRITES_PER_RUN == new.WRITES_PER_RUN
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


def _imported_modules(tree: ast.AST, package: str = "") -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every module an import statement names, ``from X import y`` giving ``X.y`` too
    (y may be a submodule; a relative ``X`` is resolved against ``package``, the file's package), and of every
    string that is a whole old module path (an ``importlib`` argument)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and is_old(node.value):
            found.append((node.lineno, node.value))
    return found


def test_nothing_in_the_package_imports_an_old_path():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        package = ".".join(path.relative_to(PACKAGE.parent).parent.parts)
        offenders += [
            f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
            for line, name in _imported_modules(tree, package)
            if is_old(name)
        ]
    assert not offenders, "import the new module (experiments/_moved.py) instead of the deprecated path:\n" + "\n".join(
        offenders
    )


def test_the_check_finds_an_old_import():
    code = (
        "from pyro_bnn.experiments import runs\n"
        "import pyro_bnn.experiments.config\n"
        "from .scoring import score\n"
        "from . import selective\n"
        "x = 'pyro_bnn.experiments.evaluate'\n"
    )
    found = {name for _, name in _imported_modules(ast.parse(code), "pyro_bnn.experiments") if is_old(name)}
    assert {name.split(".")[2] for name in found} == {"runs", "config", "scoring", "selective", "evaluate"}
    code = "from pyro_bnn.runs.selective import selective_record\nfrom pyro_bnn.runs.selective_scoring import x\n"
    found = {name for _, name in _imported_modules(ast.parse(code), "pyro_bnn.commands") if is_old(name)}
    assert found == {"pyro_bnn.runs.selective", "pyro_bnn.runs.selective.selective_record"}
