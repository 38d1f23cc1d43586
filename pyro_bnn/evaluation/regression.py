"""Metrics of a regression posterior predictive with a Gaussian likelihood of fixed noise scale.

The predictive is the mixture ``p(y | x) = (1/S) sum_s Normal(y; mean_s(x), noise_scale^2)`` over ``S`` posterior
samples of the network's output. Its moments, per point and output dimension, are

* mean: ``(1/S) sum_s mean_s``;
* standard deviation: ``sqrt(var_s(mean_s) + noise_scale^2)``, the spread of the sampled means (the population
  variance, dividing by S) plus the observation noise.

Inputs: ``means (S, N, D)`` sampled means, ``noise_scale`` a scalar (tensor or number) and ``targets (N, D)``.
Every check failure is a ``ValueError`` naming what was found. Computation runs in float64.
"""

from __future__ import annotations

import math
import numbers

import torch

from pyro_bnn.checks import positive_float

DEFAULT_NUM_SD = 2.0
"""Half-width of the predictive interval ``mean ± num_sd * sd`` whose coverage is reported (2: about 95 % for a
Gaussian)."""

REGRESSION_KEYS = ("rmse", "nll", "coverage")
"""Keys of :func:`regression_metrics`' result, in the order they are inserted."""


def _check_means(means: torch.Tensor) -> torch.Tensor:
    if not isinstance(means, torch.Tensor):
        raise ValueError(f"means must be a torch.Tensor; got {type(means).__name__}")
    if not means.dtype.is_floating_point:
        raise ValueError(f"means must be a floating-point tensor; got dtype {means.dtype}")
    if means.dim() != 3 or means.numel() == 0:
        raise ValueError(f"means must have shape (S, N, D) with no empty dimension; got {tuple(means.shape)}")
    if not bool(torch.isfinite(means).all()):
        raise ValueError("means must be finite; found a NaN or infinite sampled mean")
    return means.double()


def _check_noise_scale(noise_scale: torch.Tensor | float, device: torch.device) -> torch.Tensor:
    if isinstance(noise_scale, torch.Tensor):
        if noise_scale.numel() != 1:
            raise ValueError(f"noise_scale must be a scalar; got a tensor of shape {tuple(noise_scale.shape)}")
        value = float(noise_scale.detach().reshape(()))
    elif isinstance(noise_scale, numbers.Real) and not isinstance(noise_scale, bool):
        value = float(noise_scale)
    else:
        raise ValueError(f"noise_scale must be a scalar tensor or a number; got {noise_scale!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"noise_scale must be a finite number > 0; got {value!r}")
    return torch.tensor(value, dtype=torch.float64, device=device)


def _check_targets(targets: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    if not isinstance(targets, torch.Tensor):
        raise ValueError(f"targets must be a torch.Tensor; got {type(targets).__name__}")
    if targets.shape != means.shape[1:]:
        raise ValueError(
            f"targets must have shape (N, D) = {tuple(means.shape[1:])} to match means (S, N, D) = "
            f"{tuple(means.shape)}; got {tuple(targets.shape)} (reshape a 1-D target to (N, 1))"
        )
    if targets.dtype == torch.bool or targets.dtype.is_complex:
        raise ValueError(f"targets must be real numbers; got dtype {targets.dtype}")
    targets = targets.to(device=means.device, dtype=torch.float64)
    if not bool(torch.isfinite(targets).all()):
        raise ValueError("targets must be finite; found a NaN or infinite target")
    return targets


def _mixture_moments(means: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return means.mean(0), (means.var(0, unbiased=False) + scale**2).sqrt()


def predictive_moments(means: torch.Tensor, noise_scale: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of the mixture predictive (see the module docstring).

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: Observation noise standard deviation, a scalar tensor or number > 0.

    Returns:
        ``(mean, sd)``, each ``(N, D)`` float64 on ``means``' device.

    Raises:
        ValueError: ``means`` is not a finite floating ``(S, N, D)`` tensor, or ``noise_scale`` not a finite
            scalar > 0.
    """
    means = _check_means(means)
    return _mixture_moments(means, _check_noise_scale(noise_scale, means.device))


def regression_metrics(
    means: torch.Tensor,
    noise_scale: torch.Tensor | float,
    targets: torch.Tensor,
    num_sd: float = DEFAULT_NUM_SD,
) -> dict[str, float]:
    """RMSE, mixture NLL and interval coverage of a Gaussian-likelihood regression predictive.

    Args:
        means: ``(S, N, D)`` sampled means, one per posterior sample, point and output.
        noise_scale: Observation noise standard deviation ``sigma``, a scalar tensor or number > 0.
        targets: ``(N, D)`` observed targets (moved to ``means``' device).
        num_sd: Half-width of the interval in predictive standard deviations (finite, > 0).

    Returns:
        As Python floats:

        * ``rmse``: ``sqrt(mean_n ||y_n - mean_n||^2)`` of the predictive mean, the squared error summed over
          the D outputs (the usual RMSE for D = 1);
        * ``nll``: ``-mean_n log((1/S) sum_s prod_d Normal(y_nd; means_snd, sigma^2))``, the mixture's negative
          log density, summed over D and averaged over the N points;
        * ``coverage``: the fraction of targets ``y_nd`` with ``|y_nd - mean_nd| <= num_sd * sd_nd`` (each
          output dimension counts separately; for D = 1 the fraction of points inside).

    Raises:
        ValueError: An input fails the checks above (shapes, finiteness, ``noise_scale`` or ``num_sd`` not > 0).
    """
    positive_float(num_sd, "num_sd")
    means = _check_means(means)
    scale = _check_noise_scale(noise_scale, means.device)
    targets = _check_targets(targets, means)
    mean, sd = _mixture_moments(means, scale)

    rmse = (mean - targets).pow(2).sum(-1).mean().sqrt()
    log_density = torch.distributions.Normal(means, scale).log_prob(targets.expand_as(means)).sum(-1)  # (S, N)
    log_mixture = torch.logsumexp(log_density, dim=0) - math.log(means.shape[0])
    inside = (targets - mean).abs() <= float(num_sd) * sd
    return {
        "rmse": float(rmse),
        "nll": float(-log_mixture.mean()),
        "coverage": float(inside.double().mean()),
    }
