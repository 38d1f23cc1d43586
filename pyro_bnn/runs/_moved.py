"""The deprecation of a module path that moved: the shim left at the old path star-imports the new module (its
public names) and sets its module ``__getattr__`` to :func:`moved`, which warns once (on the shim's first import)
and forwards any other attribute (a private name an old caller reached for) to the new module.

Here, below every front end, so that a shim inside the run engine (``pyro_bnn.runs.selective``) can use it too;
:mod:`pyro_bnn.experiments._moved` lists the shims of ``pyro_bnn.experiments``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType


def moved(old: str, new: ModuleType) -> Callable[[str], object]:
    """Warns that module ``old`` is now ``new``; returns the module ``__getattr__`` that forwards to ``new``."""
    # stacklevel 3: past this function and the shim's body to the import statement (importlib's frames are skipped)
    warnings.warn(
        f"{old} has moved to {new.__name__}; import it from there ({old} will be removed)",
        DeprecationWarning,
        stacklevel=3,
    )

    def forward(name: str) -> object:
        return getattr(new, name)

    return forward
