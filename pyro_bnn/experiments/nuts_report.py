"""Deprecated: moved to :mod:`pyro_bnn.reproduce.studies.nuts_reference.report`; this shim warns on import and forwards
to it."""

from pyro_bnn.experiments._moved import moved
from pyro_bnn.reproduce.studies.nuts_reference import report as _new
from pyro_bnn.reproduce.studies.nuts_reference.report import *  # noqa: F403

__getattr__ = moved(__name__, _new)
