"""Packaging: ``--version`` from both entry points, the version written in one place, and a wheel and sdist that
``python -m build`` makes from the source tree and ``twine check`` passes."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import pyro_bnn
from pyro_bnn.cli import main

ROOT = Path(__file__).resolve().parent.parent
VERSION_LINE = f"pyro-bnn {pyro_bnn.__version__}"
# What the source tree holds that a build does not read (and that is large or changes while tests run).
NOT_BUILD_INPUTS = {".git", ".venv", "results", "bench", "notebooks", "tests", "build", "dist", "shared"}


def test_version_is_a_release_number():
    parts = pyro_bnn.__version__.split(".")
    assert len(parts) == 3 and all(part.isdigit() for part in parts), pyro_bnn.__version__


def test_main_prints_the_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == VERSION_LINE + "\n"


def test_python_m_pyro_bnn_prints_the_version():
    done = subprocess.run(
        [sys.executable, "-m", "pyro_bnn", "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == VERSION_LINE + "\n"


def test_python_m_pyro_bnn_runs_a_verb():
    done = subprocess.run(
        [sys.executable, "-m", "pyro_bnn", "list"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "--guide" in done.stdout


def test_a_verb_that_draws_nothing_and_a_grid_worker_import_neither_matplotlib_nor_scipy():
    # Each was about a second of every `pyro-bnn` start and of every spawned grid worker (which draws no figure);
    # the modules that draw or fit import them when they do.
    code = (
        "import sys; from pyro_bnn.cli import main; import pyro_bnn.reproduce.executors, pyro_bnn.diagnostics; "
        "code = main(['list']); print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', "
        "'scipy'}), code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "LOADED [] 0" in done.stdout, done.stdout[-300:]


def test_pyro_bnn_script_prints_the_version():
    script = Path(sys.executable).with_name("pyro-bnn")
    if not script.exists():
        pytest.skip(f"no pyro-bnn script beside {sys.executable} (the package is not installed in this environment)")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == VERSION_LINE + "\n"


def test_setup_cfg_reads_the_version_from_the_package():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["metadata"]["version"].strip() == "attr: pyro_bnn.__version__"
    assert config["options.entry_points"]["console_scripts"].strip() == "pyro-bnn = pyro_bnn.cli:main"


def _build(tmp_path: Path) -> tuple[Path, Path]:
    """Builds the sdist, then the wheel from it (``python -m build``'s default), from a copy of the source tree."""
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=lambda folder, names: (
            ([n for n in names if n in NOT_BUILD_INPUTS or n.endswith(".egg-info")] if Path(folder) == ROOT else [])
            + [n for n in names if n in ("__pycache__", ".pytest_cache", ".ruff_cache") or n.endswith(".pyc")]
        ),
    )
    dist = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    return sdist, wheel


def test_wheel_and_sdist_build_and_pass_twine_check(tmp_path):
    pytest.importorskip("build", reason="python -m build comes with the dev extra: pip install -e '.[dev]'")
    pytest.importorskip("twine", reason="twine comes with the dev extra: pip install -e '.[dev]'")
    sdist, wheel = _build(tmp_path)
    version = pyro_bnn.__version__
    assert sdist.name == f"pyro_bnn-{version}.tar.gz"
    assert wheel.name == f"pyro_bnn-{version}-py3-none-any.whl"

    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("README.md", "CHANGELOG.md", "setup.cfg", "pyproject.toml", "pyro_bnn/__init__.py"):
        assert needed in members, f"the sdist lacks {needed}"
    assert "pyro_bnn/__main__.py" in members

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"pyro_bnn-{version}.dist-info"
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {"pyro_bnn/__init__.py", "pyro_bnn/__main__.py", "pyro_bnn/cli.py"} <= names
    assert not any(name.startswith("tests/") for name in names)
    assert "pyro-bnn = pyro_bnn.cli:main" in entry_points
    assert metadata["Name"] == "pyro-bnn"
    assert metadata["Version"] == version
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert {"ray", "docs", "notebooks", "bench", "dev"} <= set(metadata.get_all("Provides-Extra"))
    # Installing without extras brings no test or lint tool.
    runtime = [req for req in metadata.get_all("Requires-Dist") if "extra ==" not in req]
    assert not any(req.split(">")[0].split("=")[0].strip() in {"pytest", "ruff", "build", "twine"} for req in runtime)
