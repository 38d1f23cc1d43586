"""Laplace approximations around a MAP as a parameter source, through laplace-torch (the ``laplace`` extra).

:func:`fit_laplace` fits laplace-torch (last-layer or all weights; diagonal, Kronecker-factored or full GGN) around
a BNN's MAP weights and tunes the prior precision by the marginal likelihood. The :class:`LaplacePosterior` it
returns draws ``{site: (S, *param_shape)}`` (:meth:`LaplacePosterior.sample`), feeds
:func:`pyro_bnn.predict.predict` as a parameter source (:meth:`LaplacePosterior.source`) and predicts with the
linearised GLM predictive (:func:`predict_laplace`). Importing this package does not need laplace-torch; fitting
does.
"""

from pyro_bnn.laplace.fit import INSTALL_HINT, fit_laplace, import_laplace, laplace_likelihood, map_network
from pyro_bnn.laplace.options import LaplaceOptions, Link, Predictive, PriorStructure, Structure, Subset
from pyro_bnn.laplace.posterior import LaplacePosterior, LaplaceSource
from pyro_bnn.laplace.predictive import predict_laplace

__all__ = [
    "INSTALL_HINT",
    "LaplaceOptions",
    "LaplacePosterior",
    "LaplaceSource",
    "Link",
    "Predictive",
    "PriorStructure",
    "Structure",
    "Subset",
    "fit_laplace",
    "import_laplace",
    "laplace_likelihood",
    "map_network",
    "predict_laplace",
]
