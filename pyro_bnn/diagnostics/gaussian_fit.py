"""The Gaussian fitted to a likelihood slice (:func:`fit_gaussian`) and its total-variation distance to the slice
(:func:`gaussian_tv_distance`), both on the slice's grid; :class:`~pyro_bnn.diagnostics.slices.LikelihoodSlice` holds
their results.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def fit_gaussian(grid: torch.Tensor | np.ndarray, log_likelihood: torch.Tensor | np.ndarray) -> tuple[float, float]:
    """The Gaussian that best fits a slice's normalised curve ``p = exp(ll - max ll)`` on its grid.

    Least squares over ``(A, mean, sd)`` of ``A exp(-(w - mean)^2 / (2 sd^2)) - p`` (``scipy.optimize.least_squares``,
    started at the grid's argmax with the sd of ``p``'s second moment about it); ``A`` is only a nuisance (the grid's
    maximum lies off the true peak). Unlike the paper's fit (the mean at the grid's argmax, the sd from a grid of
    candidates), this recovers mean and sd of an exactly Gaussian slice to rounding wherever its peak falls between
    grid points, so the :func:`gaussian_tv_distance` that follows measures the slice's shape and not the fit's
    resolution. It fits ``p``, not ``ll``, so the top of the slice, where the posterior mass is, matters most and
    tails below the window's ~1 % edges hardly count. The sd is kept within ``[spacing / 20, 100 * window width]``:
    a flat slice gets the widest Gaussian.

    Args:
        grid: ``(G,)`` increasing values, G >= 3.
        log_likelihood: ``(G,)``; ``-inf`` entries count as 0 likelihood.

    Returns:
        ``(mean, sd)``.

    Raises:
        ValueError: fewer than 3 points, shapes that differ, a NaN or no finite log-likelihood.
    """
    w, ll = _curve(grid, log_likelihood)
    p = np.exp(ll - ll.max())
    center, width = 0.5 * (w[0] + w[-1]), w[-1] - w[0]
    u = (w - center) / width  # the fit runs on a window of width 1 for conditioning
    step = 1.0 / (len(u) - 1)
    mode = u[int(np.argmax(p))]
    spread = math.sqrt(float(np.sum(p * (u - mode) ** 2) / np.sum(p)))
    low_sd, high_sd = step / 20, 100.0
    sd0 = min(max(spread, step / 2), high_sd)

    def residual(theta: np.ndarray) -> np.ndarray:
        amplitude, mean, log_sd = theta
        return amplitude * np.exp(-0.5 * ((u - mean) / math.exp(log_sd)) ** 2) - p

    # scipy.optimize is imported here, not with the module: it costs about half a second, and every `pyro-bnn`
    # command imports this module (through pyro_bnn.diagnostics) while only slices fit Gaussians.
    from scipy.optimize import least_squares

    result = least_squares(
        residual,
        x0=np.array([1.0, mode, math.log(sd0)]),
        bounds=([0.0, -2.0, math.log(low_sd)], [np.inf, 2.0, math.log(high_sd)]),
        method="trf",
        x_scale="jac",
        xtol=1e-14,
        ftol=1e-14,
        gtol=1e-14,
    )
    _, mean, log_sd = result.x
    return float(center + mean * width), float(math.exp(log_sd) * width)


def gaussian_tv_distance(
    grid: torch.Tensor | np.ndarray, log_likelihood: torch.Tensor | np.ndarray, mean: float, sd: float
) -> float:
    """Total-variation distance ``0.5 * sum |p - q|`` between a slice and a Gaussian on the slice's grid, both
    normalised to sum 1 over the grid: ``p ∝ exp(ll - max ll)``, ``q ∝ exp(-(w - mean)^2 / (2 sd^2))``.

    Returns:
        A number in ``[0, 1]`` (1 when the Gaussian has no mass on the grid).
    """
    w, ll = _curve(grid, log_likelihood)
    if not sd > 0:
        raise ValueError(f"sd must be > 0, got {sd!r}")
    p = np.exp(ll - ll.max())
    p = p / p.sum()
    q = np.exp(-0.5 * ((w - mean) / sd) ** 2)
    if not q.sum() > 0:
        return 1.0
    return float(0.5 * np.abs(p - q / q.sum()).sum())


def _curve(grid, log_likelihood) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(torch.as_tensor(grid, dtype=torch.float64).cpu(), dtype=np.float64)
    ll = np.asarray(torch.as_tensor(log_likelihood, dtype=torch.float64).cpu(), dtype=np.float64)
    if w.ndim != 1 or ll.shape != w.shape or len(w) < 3:
        raise ValueError(
            f"a slice needs grid and log-likelihood of one shape (G,) with G >= 3, got {w.shape} and {ll.shape}"
        )
    if np.isnan(ll).any() or not np.isfinite(ll).any() or np.isposinf(ll).any():
        raise ValueError("a slice's log-likelihood must be finite or -inf, with at least one finite value")
    return w, ll


__all__ = ["fit_gaussian", "gaussian_tv_distance"]
