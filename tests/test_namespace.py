"""The top-level ``pyro_bnn`` namespace: ``__all__`` lists exactly what it exports, and nothing else leaks from it."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import pyro_bnn

# The names a user imports from the top level today (README, notebooks, tests); each must keep working.
PUBLIC_TODAY = ("BNN", "MODULE_LOCAL_PARAMS_ENV", "__version__")


def _is_submodule(value: object) -> bool:
    return isinstance(value, ModuleType) and value.__name__.startswith("pyro_bnn.")


def _public_attributes(namespace: dict[str, object]) -> set[str]:
    """Names without a leading underscore that are not pyro_bnn's own subpackages (which an import adds)."""
    return {name for name, value in namespace.items() if not name.startswith("_") and not _is_submodule(value)}


def test_all_names_exactly_the_public_attributes():
    exported = set(pyro_bnn.__all__)
    assert len(exported) == len(pyro_bnn.__all__), "__all__ repeats a name"
    assert {name for name in exported if not name.startswith("_")} == _public_attributes(vars(pyro_bnn))
    assert {name for name in exported if name.startswith("_")} == {"__version__"}


def test_all_names_exactly_the_public_attributes_of_a_fresh_import():
    """The same in a new interpreter, where no other test has imported a subpackage yet."""
    code = (
        "import types, pyro_bnn\n"
        "public = sorted(n for n, v in vars(pyro_bnn).items() if not n.startswith('_') and not "
        "(isinstance(v, types.ModuleType) and v.__name__.startswith('pyro_bnn.')))\n"
        "print(' '.join(public))\n"
        "print(' '.join(sorted(n for n in pyro_bnn.__all__ if not n.startswith('_'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    public, exported = done.stdout.splitlines()
    assert public == exported


@pytest.mark.parametrize("name", ["os", "pyro", "torch", "sys"])
def test_no_module_leaks(name):
    assert not hasattr(pyro_bnn, name), f"pyro_bnn.{name} leaks an import"


def test_every_name_in_all_resolves():
    for name in pyro_bnn.__all__:
        assert getattr(pyro_bnn, name) is not None, name


def test_star_import_gives_all():
    namespace: dict[str, object] = {}
    exec("from pyro_bnn import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(pyro_bnn.__all__)


@pytest.mark.parametrize("name", PUBLIC_TODAY)
def test_public_names_stay_importable(name):
    assert name in pyro_bnn.__all__
    exec(f"from pyro_bnn import {name}", {})


def test_subpackages_stay_importable_from_the_top():
    from pyro_bnn import bnn, rng  # noqa: F401
