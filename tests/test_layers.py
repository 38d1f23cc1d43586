"""The package's layers, as import-linter contracts (the repository's ``.importlinter``): lower layers never import
upper ones. See docs/design.md ("Layers").

import-linter runs in a subprocess (it changes ``sys.path`` and the logging configuration of the process it runs in)
with this interpreter, so it is the virtualenv's import-linter; ``make install`` installs it (setup.cfg's ``dev``
extra). Its report is the failure message.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / ".importlinter"

# One upward import per contract id of .importlinter: (file of a copy of the package, line appended to it). The
# guides probe is the import that pyro_bnn.guides.flat once made (infer builds on guides, not the other way round).
PROBES = {
    "rng-leaf": ("rng.py", "import pyro_bnn.sites"),
    "checks-leaf": ("checks.py", "import pyro_bnn.rng"),
    "evaluation-pure": ("evaluation/_layer_probe.py", "import pyro_bnn.bnn"),
    "zoo-below-model": ("nn/_layer_probe.py", "import pyro_bnn.priors"),
    "model-below-infer": ("priors/_layer_probe.py", "import pyro_bnn.infer"),
    "guides-below-infer": ("guides/_layer_probe.py", "from pyro_bnn.infer.noise import standard_normal"),
    "predict-below-infer": ("predict/_layer_probe.py", "import pyro_bnn.infer"),
    "infer-below-batched": ("infer/_layer_probe.py", "import pyro_bnn.batched"),
    "core-below-runs": ("diagnostics/_layer_probe.py", "import pyro_bnn.runs"),
    "runs-below-front-ends": ("runs/_layer_probe.py", "import pyro_bnn.experiments"),
    "core-below-front-ends": ("plots/_layer_probe.py", "import pyro_bnn.experiments"),
    "front-end-order": ("commands/_layer_probe.py", "import pyro_bnn.reproduce"),
    "data-above-leaves": ("data/_layer_probe.py", "import pyro_bnn.bnn"),
    "diagnostics-below-runs": ("diagnostics/_layer_probe.py", "import pyro_bnn.sgmcmc"),
    "plots-below-runs": ("plots/_layer_probe.py", "import pyro_bnn.laplace"),
    "plots-draws-results": ("plots/_layer_probe.py", "import pyro_bnn.infer"),
}


def _contracts() -> dict[str, str]:
    """``{contract id: contract name}`` of .importlinter."""
    parser = configparser.ConfigParser()
    assert parser.read(CONFIG), f"{CONFIG} is missing"
    prefix = "importlinter:contract:"
    return {
        section[len(prefix) :]: parser[section]["name"] for section in parser.sections() if section.startswith(prefix)
    }


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """Runs import-linter on the ``pyro_bnn`` importable from ``cwd`` with the repository's contracts."""
    if importlib.util.find_spec("importlinter") is None:
        pytest.fail(
            f"import-linter is not installed in {sys.prefix}; `make install` installs it (setup.cfg's dev extra), "
            "or `.venv/bin/pip install import-linter`"
        )
    script = (
        "import sys\n"
        "from importlinter.cli import lint_imports\n"
        f"sys.exit(lint_imports(config_filename={str(CONFIG)!r}, no_cache=True, no_logo=True))\n"
    )
    # A wide console: Rich wraps the report at 80 columns otherwise, splitting contract names across lines.
    env = {
        **os.environ,
        "COLUMNS": "1000",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_package_keeps_its_layer_contracts():
    result = _lint_imports(REPO)
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"an import breaks pyro_bnn's layers (.importlinter):\n{report}"
    for name in _contracts().values():
        assert f"{name} KEPT" in report, report


def test_every_contract_fails_on_an_upward_import(tmp_path):
    contracts = _contracts()
    assert set(PROBES) == set(contracts), "every contract of .importlinter needs a probe here, and only those"
    copy = tmp_path / "pyro_bnn"
    shutil.copytree(REPO / "pyro_bnn", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for path, line in PROBES.values():
        with (copy / path).open("a") as file:
            file.write(f"\n{line}\n")

    result = _lint_imports(tmp_path)
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    for contract_id, name in contracts.items():
        assert f"{name} BROKEN" in report, f"{contract_id} did not fail on its probe:\n{report}"
        path, _ = PROBES[contract_id]
        probe_module = "pyro_bnn." + path.removesuffix(".py").replace("/", ".")
        assert f"{probe_module} -> " in report, f"{contract_id}: the report does not name {probe_module}:\n{report}"
    assert f"Contracts: 0 kept, {len(contracts)} broken." in report, report


def test_evaluation_may_import_only_the_checks_leaf():
    """evaluation-pure lists its forbidden modules one by one (``pyro_bnn.*`` would forbid pyro_bnn.checks too): the
    list must name every top-level module of the package but evaluation itself and the checks leaf."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    forbidden = set(parser["importlinter:contract:evaluation-pure"]["forbidden_modules"].split())
    package = REPO / "pyro_bnn"
    top_level = {
        f"pyro_bnn.{path.stem}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert forbidden == top_level - {"pyro_bnn.evaluation", "pyro_bnn.checks"}
