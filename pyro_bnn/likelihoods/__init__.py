"""Likelihoods: the data site, its plate and the N/B minibatch scaling.

Regression: :class:`Gaussian` (one noise scale, fixed or learned), :class:`HeteroscedasticGaussian` (mean and scale
predicted by the network, which outputs ``2 D`` values) and :class:`StudentT` (heavy tails; scale fixed, learned
or predicted, :class:`NoiseScale`).
"""

from pyro_bnn.likelihoods.base import KLScale, Likelihood
from pyro_bnn.likelihoods.categorical import Categorical
from pyro_bnn.likelihoods.gaussian import Gaussian
from pyro_bnn.likelihoods.heteroscedastic import (
    DEFAULT_MIN_SCALE,
    HeteroscedasticGaussian,
    NoiseScale,
    ScaleLink,
    StudentT,
    split_mean_scale,
)

__all__ = [
    "DEFAULT_MIN_SCALE",
    "Categorical",
    "Gaussian",
    "HeteroscedasticGaussian",
    "KLScale",
    "Likelihood",
    "NoiseScale",
    "ScaleLink",
    "StudentT",
    "split_mean_scale",
]
