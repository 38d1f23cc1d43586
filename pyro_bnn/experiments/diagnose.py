"""Deprecated: moved to :mod:`pyro_bnn.runs.diagnose`; this shim warns on import and forwards to it."""

from pyro_bnn.experiments._moved import moved
from pyro_bnn.runs import diagnose as _new
from pyro_bnn.runs.diagnose import *  # noqa: F403

__getattr__ = moved(__name__, _new)
