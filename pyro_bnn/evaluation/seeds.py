"""A metric over repeated runs (seeds): its mean and sample standard deviation, as the tables report them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def mean_sd(values: Sequence[float]) -> tuple[float, float, int]:
    """``(mean, sample sd, n)`` of the finite values (sd 0 for one value; NaN mean for none).

    ``None`` and non-finite values are left out, and ``n`` counts the values kept: a caller that must not average
    over fewer runs than it has compares ``n`` with ``len(values)``.
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return math.nan, math.nan, 0
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0, len(finite)


__all__ = ["mean_sd"]
