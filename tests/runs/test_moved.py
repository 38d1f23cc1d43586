"""The run engine moved from ``pyro_bnn.experiments`` to ``pyro_bnn.runs``: each old module path still imports, as
a shim that warns once and hands out the new module's objects, and nothing in the package imports a shim."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

import pyro_bnn.experiments
from pyro_bnn.experiments._moved import MOVED

PACKAGE = Path(pyro_bnn.experiments.__file__).resolve().parents[1]
OLD = re.compile(rf"pyro_bnn\.experiments\.({'|'.join(MOVED)})(\..*)?")

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
}


def test_every_moved_module_has_a_name_to_check():
    assert set(NAMES) == set(MOVED)
    assert {path.stem for path in (PACKAGE / "runs").glob("*.py")} - {"__init__"} == set(MOVED)


@pytest.mark.parametrize("name", MOVED)
def test_the_old_path_imports_warns_once_and_gives_the_new_objects(name, monkeypatch):
    old, new = f"pyro_bnn.experiments.{name}", importlib.import_module(f"pyro_bnn.runs.{name}")
    monkeypatch.delitem(sys.modules, old, raising=False)  # a fresh import, whatever imported it before
    monkeypatch.delattr(pyro_bnn.experiments, name, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(old)} has moved to pyro_bnn\.runs\.{name}\b"):
        shim = importlib.import_module(old)
    assert getattr(shim, NAMES[name]) is getattr(new, NAMES[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is shim  # once: a second import is the cached module, silent
        exec(f"from pyro_bnn.experiments.{name} import {NAMES[name]}", {})


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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and OLD.fullmatch(node.value):
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
            if OLD.fullmatch(name)
        ]
    assert not offenders, "import pyro_bnn.runs.<name> instead of the deprecated path:\n" + "\n".join(offenders)


def test_the_check_finds_an_old_import():
    code = (
        "from pyro_bnn.experiments import runs\n"
        "import pyro_bnn.experiments.config\n"
        "from .scoring import score\n"
        "from . import selective\n"
        "x = 'pyro_bnn.experiments.evaluate'\n"
    )
    found = {OLD.fullmatch(name) for _, name in _imported_modules(ast.parse(code), "pyro_bnn.experiments")}
    assert {match.group(1) for match in found if match} == {"runs", "config", "scoring", "selective", "evaluate"}
