"""Normality scores of posterior draws (pure torch): how far each scalar's marginal is from a Normal.

:func:`normality_scores` is re-exported by :mod:`pyro_bnn.diagnostics.arviz_export`, whose ``(chain, draw, ...)``
layout it reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch


def normality_scores(samples: Mapping[str, torch.Tensor], *, sample_dims: int = 2) -> dict[str, dict]:
    """How Normal each scalar's marginal looks: skewness, excess kurtosis and the KS distance to the fitted Normal.

    Moments are the population (biased) ones, as ``scipy.stats.skew`` / ``kurtosis`` compute by default:
    ``skewness = m3 / m2^1.5`` and ``excess kurtosis = m4 / m2^2 - 3``. The KS distance is
    ``sup_t |F_n(t) - Phi((t - mean) / sd)|`` with the draws' own mean and (population) sd. A Normal gives about
    ``(0, 0, 0.9 / sqrt(n))``; a two-component mixture of well-separated equal modes has excess kurtosis near -2 and
    a KS distance near 0.1 or more; heavy tails show as a large positive kurtosis.

    Args:
        samples: ``{site: (*sample_shape, *site_shape)}`` with ``sample_dims`` leading sample dimensions, pooled
            (2 for ``(chain, draw)``, 1 for ``(S,)``).
        sample_dims: Number of leading dimensions that index draws.

    Returns:
        ``{site: {"skewness", "excess_kurtosis", "ks_distance": tensors of the site's shape, "num_draws": n}}``
        (float64).
    """
    if sample_dims not in (1, 2):
        raise ValueError(f"sample_dims must be 1 (S, ...) or 2 (chain, draw, ...), got {sample_dims!r}")
    if not isinstance(samples, Mapping):
        raise ValueError(
            f"samples must be a dict {{site: tensor}} (draw_samples, run_nuts), got {type(samples).__name__}; for an "
            "ArviZ container pass the draws it was made from"
        )
    scores = {}
    for name, value in samples.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"site {name!r} must be a torch.Tensor, got {type(value).__name__}")
        if value.dim() < sample_dims:
            raise ValueError(f"site {name!r} has shape {tuple(value.shape)}, fewer than {sample_dims} sample dims")
        shape = value.shape[sample_dims:]
        draws = value.detach().double().reshape(-1, math.prod(shape)).cpu()  # (n, scalars)
        n = draws.shape[0]
        if n < 3:
            raise ValueError(f"site {name!r} has {n} draws; normality scores need at least 3")
        centred = draws - draws.mean(0)
        m2 = centred.square().mean(0)
        safe_m2 = m2.clamp_min(torch.finfo(torch.float64).tiny)
        skew = centred.pow(3).mean(0) / safe_m2.pow(1.5)
        kurt = centred.pow(4).mean(0) / safe_m2.square() - 3.0
        sd = safe_m2.sqrt()
        cdf = torch.special.ndtr(centred.sort(0).values / sd)
        upper = torch.arange(1, n + 1, dtype=torch.float64).unsqueeze(1) / n
        ks = torch.maximum((upper - cdf).max(0).values, (cdf - (upper - 1.0 / n)).max(0).values)
        constant = m2 == 0
        scores[name] = {
            "skewness": skew.masked_fill(constant, float("nan")).reshape(shape),
            "excess_kurtosis": kurt.masked_fill(constant, float("nan")).reshape(shape),
            "ks_distance": ks.masked_fill(constant, float("nan")).reshape(shape),
            "num_draws": n,
        }
    return scores


__all__ = ["normality_scores"]
