"""Moved to :mod:`pyro_bnn.rng` (a bottom-layer module, so that guides can use it without importing infer).

This module re-exports its public names for code that still imports them from here.
"""

from pyro_bnn.rng import CHUNKS, PARALLEL_MIN_NUMEL, standard_normal

__all__ = ["CHUNKS", "PARALLEL_MIN_NUMEL", "standard_normal"]
