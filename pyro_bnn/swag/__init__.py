"""SWAG and MultiSWAG: Gaussian posteriors fitted to the iterates of SGD, as parameter sources for ``predict``.

:func:`fit_swag` runs SGD on the model's own log joint (:class:`~pyro_bnn.sgmcmc.LogJoint`) and collects the running
moments of its iterates (:class:`SwagMoments`) into a :class:`SwagPosterior` (low-rank plus diagonal, or diagonal
only via :meth:`SwagPosterior.diagonal`); :func:`fit_multiswag` mixes several independent runs (:class:`MultiSwag`).
Both are :class:`~pyro_bnn.predict.ParameterSource` s: ``predict(bnn, posterior, x)``. See docs/swag.md.
"""

from pyro_bnn.swag.fit import SwagDivergenceError, SwagOptions, fit_multiswag, fit_swag
from pyro_bnn.swag.moments import SwagMoments
from pyro_bnn.swag.posterior import MultiSwag, SwagPosterior

__all__ = [
    "MultiSwag",
    "SwagDivergenceError",
    "SwagMoments",
    "SwagOptions",
    "SwagPosterior",
    "fit_multiswag",
    "fit_swag",
]
