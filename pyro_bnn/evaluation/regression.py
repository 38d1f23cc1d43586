"""Metrics of a regression posterior predictive with a Gaussian (or Student-t) likelihood.

The predictive is the mixture ``p(y | x) = (1/S) sum_s Normal(y; mean_s(x), scale_s(x)^2)`` over ``S`` posterior
samples of the network's output. The noise scale is one number (a homoscedastic likelihood) or one per sample,
point and output ``(S, N, D)`` (a heteroscedastic likelihood, whose network predicts it). Its moments, per point
and output dimension, are

* mean: ``(1/S) sum_s mean_s``;
* standard deviation: ``sqrt(var_s(mean_s) + mean_s(scale_s^2))``, the spread of the sampled means (the population
  variance, dividing by S: the epistemic part) plus the mean noise variance (the aleatoric part); see
  :func:`~pyro_bnn.evaluation.regression_variance_split`.

With Student-t noise of ``df`` degrees of freedom (``df`` given), each component is ``StudentT(df, mean_s,
scale_s)`` and its variance ``scale_s^2 df / (df - 2)`` (infinite for ``df <= 2``, where the ``mean ± num_sd * sd``
interval is the whole line and :func:`regression_metrics` reports its coverage as NaN, undefined, as
:func:`~pyro_bnn.evaluation.calibrate_regressor` refuses the sd-based score there).

Inputs: ``means (S, N, D)`` sampled means, ``noise_scale`` a scalar (tensor or number) or a tensor of shape
``(S, N, D)``, and ``targets (N, D)``. Every check failure is a ``ValueError`` naming what was found. Computation
runs in float64.
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


def _check_noise_scale(
    noise_scale: torch.Tensor | float, device: torch.device, shape: torch.Size | None = None
) -> torch.Tensor:
    """A scalar float64 tensor, or with ``shape`` given (the means' ``(S, N, D)``) a tensor of that shape."""
    if isinstance(noise_scale, torch.Tensor) and noise_scale.numel() != 1:
        if shape is None or noise_scale.shape != shape:
            allowed = "" if shape is None else f" or a tensor of the means' shape (S, N, D) = {tuple(shape)}"
            raise ValueError(f"noise_scale must be a scalar{allowed}; got a tensor of shape {tuple(noise_scale.shape)}")
        scale = noise_scale.detach().to(device=device, dtype=torch.float64)
        if not bool((torch.isfinite(scale) & (scale > 0)).all()):
            bad = scale[~(torch.isfinite(scale) & (scale > 0))][0]
            raise ValueError(f"noise_scale must be finite and > 0 everywhere; found {float(bad)!r}")
        return scale
    if isinstance(noise_scale, torch.Tensor):
        value = float(noise_scale.detach().reshape(()))
    elif isinstance(noise_scale, numbers.Real) and not isinstance(noise_scale, bool):
        value = float(noise_scale)
    else:
        raise ValueError(f"noise_scale must be a scalar tensor or a number; got {noise_scale!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"noise_scale must be a finite number > 0; got {value!r}")
    return torch.tensor(value, dtype=torch.float64, device=device)


def _check_df(df: torch.Tensor | float | None) -> float | None:
    """Student-t degrees of freedom as a float > 0, or None for Gaussian noise."""
    if df is None:
        return None
    value = float(df.detach().reshape(())) if isinstance(df, torch.Tensor) and df.numel() == 1 else df
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"df must be a finite number > 0 (Student-t degrees of freedom) or None; got {df!r}")
    return float(value)


def _noise_variance(scale: torch.Tensor, df: float | None) -> torch.Tensor:
    """Each component's noise variance: ``scale^2``, times ``df / (df - 2)`` for Student-t noise."""
    variance = scale**2
    if df is None:
        return variance
    return variance * (df / (df - 2)) if df > 2 else torch.full_like(variance, math.inf)


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


def _mixture_moments(
    means: torch.Tensor, scale: torch.Tensor, df: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    noise = _noise_variance(scale, df).expand_as(means).mean(0)
    return means.mean(0), (means.var(0, unbiased=False) + noise).sqrt()


def predictive_moments(
    means: torch.Tensor, noise_scale: torch.Tensor | float, *, df: torch.Tensor | float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of the mixture predictive (see the module docstring).

    Args:
        means: ``(S, N, D)`` sampled means.
        noise_scale: Observation noise standard deviation, a scalar tensor or number > 0, or ``(S, N, D)``.
        df: Student-t degrees of freedom, or None for Gaussian noise.

    Returns:
        ``(mean, sd)``, each ``(N, D)`` float64 on ``means``' device.

    Raises:
        ValueError: ``means`` is not a finite floating ``(S, N, D)`` tensor, ``noise_scale`` not a finite
            scalar > 0 or an ``(S, N, D)`` tensor of them, or ``df`` not a finite number > 0.
    """
    means = _check_means(means)
    return _mixture_moments(means, _check_noise_scale(noise_scale, means.device, means.shape), _check_df(df))


def regression_metrics(
    means: torch.Tensor,
    noise_scale: torch.Tensor | float,
    targets: torch.Tensor,
    num_sd: float = DEFAULT_NUM_SD,
    *,
    df: torch.Tensor | float | None = None,
) -> dict[str, float]:
    """RMSE, mixture NLL and interval coverage of a Gaussian- (or Student-t-) likelihood regression predictive.

    Args:
        means: ``(S, N, D)`` sampled means, one per posterior sample, point and output.
        noise_scale: Observation noise standard deviation ``sigma``, a scalar tensor or number > 0, or an
            ``(S, N, D)`` tensor of them (a heteroscedastic likelihood).
        targets: ``(N, D)`` observed targets (moved to ``means``' device).
        num_sd: Half-width of the interval in predictive standard deviations (finite, > 0).
        df: Student-t degrees of freedom of the noise, or None (the default) for Gaussian noise.

    Returns:
        As Python floats:

        * ``rmse``: ``sqrt(mean_n ||y_n - mean_n||^2)`` of the predictive mean, the squared error summed over
          the D outputs (the usual RMSE for D = 1);
        * ``nll``: ``-mean_n log((1/S) sum_s prod_d Normal(y_nd; means_snd, sigma_snd^2))``, the mixture's
          negative log density (Student-t components with ``df``), summed over D and averaged over the N points;
        * ``coverage``: the fraction of targets ``y_nd`` with ``|y_nd - mean_nd| <= num_sd * sd_nd`` (each
          output dimension counts separately; for D = 1 the fraction of points inside); NaN for Student-t noise
          with ``df <= 2``, whose sd is infinite: every target would be inside, whatever the predictive.

    Raises:
        ValueError: An input fails the checks above (shapes, finiteness, ``noise_scale``, ``df`` or ``num_sd``
            not > 0).
    """
    positive_float(num_sd, "num_sd")
    means = _check_means(means)
    scale = _check_noise_scale(noise_scale, means.device, means.shape)
    targets = _check_targets(targets, means)
    df = _check_df(df)
    mean, sd = _mixture_moments(means, scale, df)

    rmse = (mean - targets).pow(2).sum(-1).mean().sqrt()
    component = (
        torch.distributions.Normal(means, scale)
        if df is None
        else torch.distributions.StudentT(torch.tensor(df, dtype=torch.float64, device=means.device), means, scale)
    )
    log_density = component.log_prob(targets.expand_as(means)).sum(-1)  # (S, N)
    log_mixture = torch.logsumexp(log_density, dim=0) - math.log(means.shape[0])
    inside = (targets - mean).abs() <= float(num_sd) * sd
    return {
        "rmse": float(rmse),
        "nll": float(-log_mixture.mean()),
        # an infinite sd (Student-t with df <= 2) makes the interval the whole line: its coverage says nothing
        "coverage": math.nan if df is not None and df <= 2 else float(inside.double().mean()),
    }
