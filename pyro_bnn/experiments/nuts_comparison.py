"""Deprecated: moved to :mod:`pyro_bnn.reproduce.studies.nuts_reference.comparison`; this shim warns on import and
forwards to it."""

from pyro_bnn.experiments._moved import moved
from pyro_bnn.reproduce.studies.nuts_reference import comparison as _new
from pyro_bnn.reproduce.studies.nuts_reference.comparison import *  # noqa: F403

__getattr__ = moved(__name__, _new)
