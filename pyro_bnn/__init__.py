"""pyro_bnn: a Pyro model zoo for Bayesian neural networks.

Importing pyro_bnn turns on Pyro's ``module_local_params`` setting: every :class:`~pyro.nn.PyroModule` (AutoGuides
included) then keeps its parameters on the module instead of in Pyro's global parameter store, so two models (or
two guides) built side by side never share a parameter merely because their site names match. It is also the
setting Pyro recommends for the plain torch-optimiser training that pyro_bnn's trainer does.

Set the environment variable ``PYRO_BNN_MODULE_LOCAL_PARAMS=0`` before the import to leave Pyro's setting as it
is (for code that relies on ``pyro.get_param_store()``); ``1``, empty or unset means the default above.
"""

import os as _os

import pyro as _pyro

# The package version, written here only: setup.cfg reads it (``attr:``) and ``pyro-bnn --version`` prints it.
__version__ = "0.1.0"

MODULE_LOCAL_PARAMS_ENV = "PYRO_BNN_MODULE_LOCAL_PARAMS"
"""The environment variable read at import: ``0`` leaves Pyro's ``module_local_params`` setting as it is, ``1`` or
unset turns it on (every model and guide keeps its parameters on the module)."""


def _module_local_params_wanted() -> bool:
    """Reads ``PYRO_BNN_MODULE_LOCAL_PARAMS``: True unless it is ``0``; any value other than 0, 1 or empty fails."""
    value = _os.environ.get(MODULE_LOCAL_PARAMS_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(
            f"{MODULE_LOCAL_PARAMS_ENV}={value!r} is not understood: expected 0 (leave Pyro's module_local_params "
            "setting alone) or 1 (turn it on, the default)"
        )
    return value != "0"


if _module_local_params_wanted():
    _pyro.settings.set(module_local_params=True)

from pyro_bnn.bnn import BNN  # noqa: E402  (after the settings above)

# What ``from pyro_bnn import *`` gives and what the API reference documents as the top level; everything else is
# reached through its subpackage (pyro_bnn.priors, pyro_bnn.guides, pyro_bnn.infer, ...).
__all__ = ["BNN", "MODULE_LOCAL_PARAMS_ENV", "__version__"]
