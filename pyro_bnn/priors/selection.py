"""Predicates that choose which parameters of a network become random.

A selector is a function ``select(name, module) -> bool`` where ``name`` is the parameter's full dotted name in the
network (``"layers.0.weight"``) and ``module`` the module that owns it directly (the ``nn.Linear``). The helpers
below cover the common choices and combine with :func:`all_of` / :func:`any_of`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from torch import nn

Select = Callable[[str, nn.Module], bool]
"""``select(parameter name, owning module) -> bool``: which parameters a prior makes random."""


def every_parameter(name: str, module: nn.Module) -> bool:
    """Selects every weight and bias (the default)."""
    return True


def weights_only(name: str, module: nn.Module) -> bool:
    """Selects parameters whose attribute name is ``weight``; biases stay deterministic."""
    return name.rsplit(".", 1)[-1] == "weight"


def nothing(name: str, module: nn.Module) -> bool:
    """Selects no parameter: the network stays deterministic (maximum-likelihood baselines)."""
    return False


def module_types(*types: type[nn.Module]) -> Select:
    """Selects the parameters of modules of the given types, e.g. ``module_types(nn.Linear)``."""
    if not types or not all(isinstance(t, type) and issubclass(t, nn.Module) for t in types):
        raise ValueError(f"module_types expects nn.Module subclasses, got {types!r}")
    return lambda name, module: isinstance(module, types)


def name_matches(*patterns: str) -> Select:
    """Selects parameters whose full name matches one of the shell-style patterns (``"head.*"``)."""
    if not patterns:
        raise ValueError("name_matches expects at least one pattern")
    return lambda name, module: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def all_of(*selects: Select) -> Select:
    """Selects a parameter when every given selector does."""
    return lambda name, module: all(s(name, module) for s in selects)


def any_of(*selects: Select) -> Select:
    """Selects a parameter when at least one given selector does."""
    return lambda name, module: any(s(name, module) for s in selects)


def negate(select: Select) -> Select:
    """Selects exactly the parameters that ``select`` leaves out."""
    return lambda name, module: not select(name, module)
