"""Deprecated: moved to :mod:`pyro_bnn.reproduce.studies.guide_defaults`; this shim warns on import and forwards to it
(``python -m pyro_bnn.experiments.guide_defaults`` still runs the study, as ``python -m
pyro_bnn.reproduce.studies.guide_defaults``)."""

from pyro_bnn.experiments._moved import moved
from pyro_bnn.reproduce.studies import guide_defaults as _new
from pyro_bnn.reproduce.studies.guide_defaults import *  # noqa: F403

__getattr__ = moved(__spec__.name, _new)  # __spec__: the module's name under python -m too

if __name__ == "__main__":
    raise SystemExit(_new.main())
