"""pyro_bnn: a Pyro model zoo for Bayesian neural networks."""

import pyro

# Every PyroModule (AutoGuides included) keeps its parameters on the module instead of Pyro's global parameter
# store, so two models (or two guides) built side by side never share a parameter because their names match.
# This is the setting Pyro recommends for the torch-optimizer interface that pyro_bnn's trainer uses.
pyro.settings.set(module_local_params=True)

__version__ = "0.1.0"

from pyro_bnn.bnn import BNN  # noqa: E402  (after the settings above)

__all__ = ["BNN", "__version__"]
