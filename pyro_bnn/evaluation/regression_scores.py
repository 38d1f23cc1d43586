"""Calibration of a Gaussian-mixture regression predictive: interval coverage, quantile calibration, CRPS, sharpness.

The predictive is the mixture ``F(y) = (1/S) sum_s Phi((y - mean_s) / scale_s)`` over S posterior samples, with
``means (S, N, D)``, a noise scale that is a scalar or ``(S, N, D)`` and targets ``(N, D)``; each point and output
is scored on its own and the scores averaged over ``N x D``.

* :func:`mixture_cdf` and :func:`pit_values`: ``F(y)``; the probability integral transform of the targets, uniform
  on ``[0, 1]`` for a calibrated predictive.
* :func:`mixture_quantile` and :func:`central_interval`: quantiles by bisection on ``F``, bracketed by the
  components' own quantiles (the mixture's ``p``-quantile lies between their smallest and largest).
* :func:`quantile_calibration_error`: Kuleshov et al. (2018)'s calibration of quantiles, here
  ``mean_j |freq(PIT <= p_j) - p_j|`` over levels ``p_j`` (0.05, 0.10, ..., 0.95 by default).
* :func:`crps_gaussian` (closed form), :func:`crps_gaussian_mixture` (closed form of the energy form
  ``E|X - y| - E|X - X'| / 2``, Grimit et al. 2006) and :func:`crps_samples` (the energy form on an ensemble of
  samples).
* :func:`regression_calibration`: all of them for one predictive, as a dict of floats.

Computation runs in float64; every check failure is a ``ValueError`` naming what was found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from pyro_bnn.checks import open_unit
from pyro_bnn.evaluation.regression import _check_means, _check_noise_scale, _check_targets

DEFAULT_COVERAGE_LEVELS = (0.5, 0.9, 0.95)
"""The central-interval levels :func:`regression_calibration` reports coverage and width at."""

DEFAULT_QCE_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))
"""The quantile levels ``0.05, 0.10, ..., 0.95`` of :func:`quantile_calibration_error`."""

BISECTION_STEPS = 64
"""Halvings of the bracket in :func:`mixture_quantile`: 64 reach float64's resolution for any bracket."""

_PAIR_BUDGET = 2**24
"""Most ``S x S x rows x D`` entries :func:`crps_gaussian_mixture` holds at once (it works in chunks of rows)."""

_SQRT_PI = math.sqrt(math.pi)


def _checked(
    means: torch.Tensor, noise_scale: torch.Tensor | float, targets: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    means = _check_means(means)
    scale = _check_noise_scale(noise_scale, means.device, means.shape).expand_as(means)
    return means, scale, None if targets is None else _check_targets(targets, means)


def _normal_cdf(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * torch.erfc(-z / math.sqrt(2.0))


def _normal_pdf(z: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)


def mixture_cdf(means: torch.Tensor, noise_scale: torch.Tensor | float, y: torch.Tensor) -> torch.Tensor:
    """The mixture predictive's CDF at ``y``.

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: Scalar or ``(S, N, D)`` noise standard deviations.
        y: ``(N, D)`` points.

    Returns:
        ``(N, D)`` float64: ``(1/S) sum_s Phi((y - mean_s) / scale_s)``.
    """
    means, scale, y = _checked(means, noise_scale, y)
    return _normal_cdf((y - means) / scale).mean(0)


def pit_values(means: torch.Tensor, noise_scale: torch.Tensor | float, targets: torch.Tensor) -> torch.Tensor:
    """The probability integral transform ``F(y)`` of every target, ``(N, D)`` in ``[0, 1]``."""
    return mixture_cdf(means, noise_scale, targets)


def mixture_quantile(means: torch.Tensor, noise_scale: torch.Tensor | float, level: float) -> torch.Tensor:
    """The mixture predictive's ``level``-quantile of every point and output, by bisection on its CDF.

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: Scalar or ``(S, N, D)`` noise standard deviations.
        level: In ``(0, 1)``.

    Returns:
        ``(N, D)`` float64 ``q`` with ``F(q) = level`` (to float64 resolution).
    """
    level = open_unit(level, "level")
    means, scale, _ = _checked(means, noise_scale)
    z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(level, dtype=torch.float64))
    component = means + scale * z  # (S, N, D): each component's own quantile
    low, high = component.amin(0), component.amax(0)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (low + high)
        below = _normal_cdf((mid - means) / scale).mean(0) < level
        low = torch.where(below, mid, low)
        high = torch.where(below, high, mid)
    return 0.5 * (low + high)


def central_interval(
    means: torch.Tensor, noise_scale: torch.Tensor | float, level: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The central ``level`` interval ``[q((1 - level) / 2), q((1 + level) / 2)]``, each bound ``(N, D)``."""
    level = open_unit(level, "level")
    return (
        mixture_quantile(means, noise_scale, (1 - level) / 2),
        mixture_quantile(means, noise_scale, (1 + level) / 2),
    )


def quantile_calibration_error(pit: torch.Tensor, levels: Sequence[float] = DEFAULT_QCE_LEVELS) -> float:
    """Mean absolute gap between the observed and the expected frequency of ``PIT <= p`` over the levels.

    Args:
        pit: PIT values of any shape (:func:`pit_values`), in ``[0, 1]``.
        levels: Quantile levels, each in ``(0, 1)``.

    Returns:
        ``mean_j |mean(pit <= p_j) - p_j|``: 0 for a perfectly calibrated predictive (uniform PIT), up to 0.5.
    """
    if not isinstance(pit, torch.Tensor) or pit.numel() == 0 or not pit.dtype.is_floating_point:
        raise ValueError(f"pit must be a non-empty floating tensor; got {pit!r:.80}")
    if not bool(((pit >= 0) & (pit <= 1)).all()):
        raise ValueError("pit values must lie in [0, 1]; found one outside")
    levels = [open_unit(level, "quantile level") for level in levels]
    if not levels:
        raise ValueError("quantile_calibration_error needs at least one level")
    values = pit.detach().double().reshape(-1)
    gaps = [abs(float((values <= level).double().mean()) - level) for level in levels]
    return sum(gaps) / len(gaps)


def crps_gaussian(mean: torch.Tensor, sd: torch.Tensor | float, y: torch.Tensor) -> torch.Tensor:
    """The CRPS of ``Normal(mean, sd^2)`` at ``y``, elementwise (broadcast), in closed form.

    ``CRPS = sd [z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi)]`` with ``z = (y - mean) / sd``; for ``N(0, 1)`` at
    ``y = 0`` it is ``(sqrt(2) - 1) / sqrt(pi)``. Lower is better; it has the units of ``y``.
    """
    mean = torch.as_tensor(mean, dtype=torch.float64)
    sd = torch.as_tensor(sd, dtype=torch.float64, device=mean.device)
    y = torch.as_tensor(y, dtype=torch.float64, device=mean.device)
    if not bool((sd > 0).all()):
        raise ValueError("crps_gaussian needs sd > 0 everywhere")
    z = (y - mean) / sd
    return sd * (z * (2 * _normal_cdf(z) - 1) + 2 * _normal_pdf(z) - 1 / _SQRT_PI)


def _abs_normal_mean(mu: torch.Tensor, sd: torch.Tensor) -> torch.Tensor:
    """``E|X|`` for ``X ~ Normal(mu, sd^2)``: ``mu (2 Phi(mu / sd) - 1) + 2 sd phi(mu / sd)``."""
    z = mu / sd
    return mu * (2 * _normal_cdf(z) - 1) + 2 * sd * _normal_pdf(z)


def crps_gaussian_mixture(
    means: torch.Tensor, noise_scale: torch.Tensor | float, targets: torch.Tensor
) -> torch.Tensor:
    """The CRPS of the equal-weight Gaussian mixture at each target, in closed form.

    ``CRPS = (1/S) sum_s E|X_s - y| - (1 / 2 S^2) sum_{s,t} E|X_s - X_t|`` with ``X_s ~ N(mean_s, scale_s^2)``,
    each term the mean of a folded normal (Grimit et al. 2006). With S = 1 it is :func:`crps_gaussian`.

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: Scalar or ``(S, N, D)`` noise standard deviations.
        targets: ``(N, D)``.

    Returns:
        ``(N, D)`` float64.
    """
    means, scale, targets = _checked(means, noise_scale, targets)
    first = _abs_normal_mean(targets - means, scale).mean(0)
    num_samples, rows, dims = means.shape
    step = max(1, _PAIR_BUDGET // (num_samples * num_samples * dims))
    second = torch.empty_like(first)
    for start in range(0, rows, step):
        block = slice(start, start + step)
        m, v = means[:, block], scale[:, block] ** 2
        pair = _abs_normal_mean(m.unsqueeze(0) - m.unsqueeze(1), (v.unsqueeze(0) + v.unsqueeze(1)).sqrt())
        second[block] = pair.mean((0, 1))
    return first - 0.5 * second


def crps_samples(samples: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The CRPS of the empirical distribution of samples at each target (the energy form).

    ``CRPS = (1/M) sum_i |x_i - y| - (1 / 2 M^2) sum_{i,j} |x_i - x_j|``, computed from the sorted samples in
    ``O(M log M)``: ``sum_{i,j} |x_i - x_j| = 2 sum_i (2 i - M - 1) x_(i)``.

    Args:
        samples: ``(M, N, D)`` draws of the predictive.
        targets: ``(N, D)``.

    Returns:
        ``(N, D)`` float64.
    """
    samples = _check_means(samples)
    targets = _check_targets(targets, samples)
    num = samples.shape[0]
    ordered = samples.sort(0).values
    weights = 2 * torch.arange(1, num + 1, dtype=torch.float64, device=samples.device) - num - 1
    spread = (weights.view(-1, 1, 1) * ordered).sum(0) / num**2
    return (samples - targets).abs().mean(0) - spread


def sharpness(means: torch.Tensor, noise_scale: torch.Tensor | float) -> float:
    """The mean predictive standard deviation ``mean_{n,d} sqrt(Var_s(mean_s) + E_s(scale_s^2))``."""
    means, scale, _ = _checked(means, noise_scale)
    return float((means.var(0, unbiased=False) + (scale**2).mean(0)).sqrt().mean())


def _level_key(level: float) -> str:
    return f"{100 * level:g}".replace(".", "_")


def regression_calibration(
    means: torch.Tensor,
    noise_scale: torch.Tensor | float,
    targets: torch.Tensor,
    *,
    levels: Sequence[float] = DEFAULT_COVERAGE_LEVELS,
    qce_levels: Sequence[float] = DEFAULT_QCE_LEVELS,
) -> dict[str, float]:
    """Calibration and sharpness of a Gaussian-mixture regression predictive.

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: Scalar or ``(S, N, D)`` noise standard deviations.
        targets: ``(N, D)``.
        levels: Central-interval levels, each in ``(0, 1)``.
        qce_levels: Quantile levels of the quantile calibration error.

    Returns:
        As floats, averaged over points and outputs: ``coverage_<100 level>`` (the share of targets inside the
        central interval, e.g. ``coverage_90``) and ``width_<100 level>`` (its mean width) for each level,
        ``qce`` (:func:`quantile_calibration_error` of the PIT values), ``crps`` (:func:`crps_gaussian_mixture`)
        and ``sharpness`` (:func:`sharpness`).
    """
    means, scale, targets = _checked(means, noise_scale, targets)
    result: dict[str, float] = {}
    for level in levels:
        lower, upper = central_interval(means, scale, level)
        inside = (targets >= lower) & (targets <= upper)
        result[f"coverage_{_level_key(level)}"] = float(inside.double().mean())
        result[f"width_{_level_key(level)}"] = float((upper - lower).mean())
    result["qce"] = quantile_calibration_error(pit_values(means, scale, targets), qce_levels)
    result["crps"] = float(crps_gaussian_mixture(means, scale, targets).mean())
    result["sharpness"] = sharpness(means, scale)
    return result
