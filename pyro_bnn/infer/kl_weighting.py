"""Minibatch KL weighting: how an epoch's M minibatches share the KL term."""

from __future__ import annotations

import math
from enum import Enum

from pyro_bnn.checks import enum_member


class KLWeighting(str, Enum):
    """How the KL term is spread over the M minibatches of an epoch."""

    UNIFORM = "uniform"
    """pi_i = 1/M: every step carries the full KL once the likelihood is scaled by N/B (weight 1)."""
    BLUNDELL = "blundell"
    """pi_i = 2^(M-i) / (2^M - 1) (Blundell et al., 2015): early minibatches carry most of the KL."""


def blundell_fraction(step: int, num_steps: int) -> float:
    """pi_i = 2^(M-i) / (2^M - 1) for step ``i`` (1-based) of ``M``, computed without forming 2^M.

    Rewritten as 2^-i / (1 - 2^-M), which stays finite for any M; for i beyond ~1074 it underflows to 0, which is
    its value to double precision.
    """
    if not 1 <= step <= num_steps:
        raise ValueError(f"step must lie in [1, {num_steps}], got {step}")
    return math.ldexp(1.0, -step) / -math.expm1(-num_steps * math.log(2.0))


def minibatch_kl_weight(weighting: KLWeighting | str, step: int, num_steps: int) -> float:
    """The factor on the latent sites at ``step`` (1-based) of ``num_steps``: ``M * pi_i``.

    The data term of each step is already scaled by N/B (about M), so a step's loss is M times Blundell et al.'s
    minibatch cost ``pi_i KL - log p(D_i | w)``; over an epoch the factors average to 1.
    """
    weighting = enum_member(KLWeighting, weighting, "KL weighting")
    if weighting is KLWeighting.UNIFORM:
        return 1.0
    return num_steps * blundell_fraction(step, num_steps)
