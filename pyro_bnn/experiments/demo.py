"""Deprecated: moved to :mod:`pyro_bnn.commands.demo`; this shim warns on import and forwards to it."""

from pyro_bnn.commands import demo as _new
from pyro_bnn.commands.demo import *  # noqa: F403
from pyro_bnn.experiments._moved import moved

__getattr__ = moved(__name__, _new)
