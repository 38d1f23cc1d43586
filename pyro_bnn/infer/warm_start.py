"""A short MAP warm start: the point estimate a variational guide can start its locations from.

:func:`map_warm_start` is defined beside the :class:`~pyro_bnn.infer.Trainer` that runs it (a trainer given a
``loc=map`` guide spec calls it), and kept importable from here.
"""

from pyro_bnn.infer.trainer import map_warm_start

__all__ = ["map_warm_start"]
