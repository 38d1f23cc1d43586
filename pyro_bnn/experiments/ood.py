"""Deprecated: moved to :mod:`pyro_bnn.runs.ood_scoring`; this shim warns on import and forwards to it."""

from pyro_bnn.experiments._moved import moved
from pyro_bnn.runs import ood_scoring as _new
from pyro_bnn.runs.ood_scoring import *  # noqa: F403

__getattr__ = moved(__name__, _new)
