"""The runner registry: runs that are not Trainer runs (:attr:`~pyro_bnn.reproduce.planned.RunSpec.runner`), e.g. the
posterior families' NUTS, Laplace and SG-MCMC fits, each registered by the paper that owns it under the name its run
ids carry."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.runs.runs import RunResult

Runner = Callable[[RunSpec, Path, Path], RunResult]
"""``function(spec, runs_dir, folder) -> RunResult``: a run that is not a Trainer run (:attr:`RunSpec.runner`)."""

RUNNERS: dict[str, Runner] = {}
"""Runner name (what a :attr:`~pyro_bnn.reproduce.planned.RunSpec.runner` says) -> function, filled by
:func:`register_runner` (a paper's package registers its own when imported)."""


def register_runner(name: str, function: Runner, *, replace: bool = False) -> Runner:
    """Makes ``function`` the runner called ``name`` (``RunSpec(runner=name)``; the name is part of the run id, so
    a paper keeps its runners' names when their code moves). A pool worker receives the parent's registry.

    Raises:
        ValueError: An empty name, or one taken by another function without ``replace``.
        TypeError: ``function`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a runner name is a non-empty string, got {name!r}")
    if not callable(function):
        raise TypeError(f"runner {name!r}: {function!r} is not callable")
    existing = RUNNERS.get(name)
    if existing is not None and existing is not function and not replace:
        raise ValueError(f"runner {name!r} is already registered; pass replace=True to override it")
    RUNNERS[name] = function
    return function


def registered_runners() -> dict[str, Runner]:
    """A copy of the runner registry (what a pool worker is given)."""
    return dict(RUNNERS)


def resolve_runner(runner: str) -> Runner:
    """The function a :attr:`~pyro_bnn.reproduce.planned.RunSpec.runner` names: a registered runner
    (:func:`register_runner`; the built-in papers are loaded when the name is not), else ``"package.module:function"``
    imported.

    Raises:
        ValueError: neither registered nor of that form, or naming nothing importable (one line).
    """
    if runner not in RUNNERS:
        import pyro_bnn.reproduce.papers  # noqa: F401  (the built-in papers register their runners)
    if runner in RUNNERS:
        return RUNNERS[runner]
    module_name, _, function_name = runner.partition(":")
    if not module_name or not function_name.isidentifier():
        raise ValueError(f"a runner must be registered or 'package.module:function', got {runner!r}")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError):
        raise ValueError(f"runner {runner!r} names no importable function") from None
    if not callable(function):
        raise ValueError(f"runner {runner!r} is not callable")
    return function
