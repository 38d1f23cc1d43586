"""The deprecation of the run engine's old paths: ``pyro_bnn.experiments.<name>`` became ``pyro_bnn.runs.<name>``.

Each old module is a shim of three lines: it star-imports the new module (its public names), and calls
:func:`moved`, which warns once (on the shim's first import) and forwards any other attribute (a private name an
old caller reached for) to the new module. Nothing in pyro_bnn imports a shim (tests/runs/test_moved.py checks).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType

MOVED = ("batched_runs", "config", "conformal", "ensemble", "evaluate", "optimisation", "run_folder", "runs",
         "scoring", "selective")  # fmt: skip
"""The modules of ``pyro_bnn.experiments`` now in :mod:`pyro_bnn.runs`, each kept as a deprecated shim."""


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
