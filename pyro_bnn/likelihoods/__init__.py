"""Likelihoods: the data site, its plate and the N/B minibatch scaling."""

from pyro_bnn.likelihoods.base import KLScale, Likelihood
from pyro_bnn.likelihoods.categorical import Categorical
from pyro_bnn.likelihoods.gaussian import Gaussian

__all__ = ["Categorical", "Gaussian", "KLScale", "Likelihood"]
