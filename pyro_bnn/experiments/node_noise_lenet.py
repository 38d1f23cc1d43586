"""Deprecated: moved to :mod:`pyro_bnn.reproduce.studies.node_noise_lenet`; this shim warns on import and forwards to it
(``python -m pyro_bnn.experiments.node_noise_lenet`` still runs the study, as ``python -m
pyro_bnn.reproduce.studies.node_noise_lenet``)."""

from pyro_bnn.experiments._moved import moved
from pyro_bnn.reproduce.studies import node_noise_lenet as _new
from pyro_bnn.reproduce.studies.node_noise_lenet import *  # noqa: F403

__getattr__ = moved(__spec__.name, _new)  # __spec__: the module's name under python -m too

if __name__ == "__main__":
    raise SystemExit(_new.main())
