"""Convergence of posterior draws in ArviZ's form, as plain floats: split r-hat and bulk / tail ESS of every
posterior scalar, summarised so that callers never handle ArviZ objects (:func:`convergence_summary`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pyro_bnn.diagnostics import arviz_compat


def posterior_dataset(inference_data: Any) -> Any:
    """The ``posterior`` group as an ``xarray.Dataset`` (from an ``InferenceData`` or a ``DataTree``)."""
    return arviz_compat.group(inference_data, "posterior")


def _per_scalar(dataset: Any, names: Sequence[str]) -> np.ndarray:
    """Every scalar of the named variables of a diagnostic's Dataset, flattened and concatenated."""
    return np.concatenate([np.asarray(dataset[name].values, dtype=np.float64).reshape(-1) for name in names])


def _defined(values: np.ndarray) -> np.ndarray:
    """The entries that are not NaN (an infinite r-hat is defined: chains that never overlap)."""
    return values[~np.isnan(values)]


def _statistic(values: np.ndarray, reduce: Callable[[np.ndarray], Any]) -> float:
    """``reduce`` over the defined entries; NaN when there are none."""
    defined = _defined(values)
    return float(reduce(defined)) if defined.size else math.nan


def _posterior_names(inference_data: Any, var_names: Sequence[str] | None) -> list[str]:
    """The posterior variables ``var_names`` names (default all), each checked to be there; one line otherwise."""
    try:
        posterior = posterior_dataset(inference_data)
    except (AttributeError, TypeError, KeyError):
        raise ValueError(
            "convergence_summary takes an ArviZ InferenceData or xarray DataTree with a posterior group "
            f"(to_inference_data's result), got {type(inference_data).__name__}"
        ) from None
    present = list(posterior.data_vars)
    if var_names is None:
        return present
    if isinstance(var_names, str):
        raise ValueError(f"var_names must be a list of variable names, got the string {var_names!r}")
    names = list(var_names)
    unknown = [name for name in names if name not in present]
    if unknown:
        raise ValueError(f"the posterior has no variable {unknown[0]!r}; it has {present[:8]}")
    if not names:
        raise ValueError("var_names is empty: there is nothing to summarise")
    return names


def convergence_summary(inference_data: Any, var_names: Sequence[str] | None = None) -> dict[str, float]:
    """Rank-normalised split r-hat and bulk / tail ESS of every posterior scalar, summarised as plain floats.

    ArviZ gives a NaN r-hat or ESS where it cannot tell (fewer than 4 draws per chain, a scalar that never moves):
    the statistics and fractions are taken over the scalars whose value is not NaN, NaN when there are none, and
    ``num_rhat_nan`` counts the undefined r-hats, so a summary that could not tell never reads as converged. An
    infinite r-hat (chains that never overlap) counts as above both thresholds.

    Args:
        inference_data: What :func:`~pyro_bnn.diagnostics.arviz_export.to_inference_data` returned (either ArviZ
            generation).
        var_names: Posterior variables to include; default all.

    Returns:
        ``{"num_scalars", "num_rhat_nan", "rhat_max", "rhat_median", "frac_rhat_gt_1.01", "frac_rhat_gt_1.1",
        "ess_bulk_min", "ess_bulk_median", "ess_tail_min", "ess_tail_median"}``; the fractions are over the
        ``num_scalars - num_rhat_nan`` defined r-hats.

    Raises:
        ValueError: ``inference_data`` is not an ArviZ container with a posterior group, or ``var_names`` names a
            variable it does not hold.
    """
    names = _posterior_names(inference_data, var_names)
    rhat = _per_scalar(arviz_compat.rhat(inference_data, names), names)
    ess_bulk = _per_scalar(arviz_compat.ess(inference_data, names, method="bulk"), names)
    ess_tail = _per_scalar(arviz_compat.ess(inference_data, names, method="tail"), names)
    return {
        "num_scalars": int(rhat.size),
        "num_rhat_nan": int(np.isnan(rhat).sum()),
        "rhat_max": _statistic(rhat, np.max),
        "rhat_median": _statistic(rhat, np.median),
        "frac_rhat_gt_1.01": _statistic(rhat, lambda r: np.mean(r > 1.01)),
        "frac_rhat_gt_1.1": _statistic(rhat, lambda r: np.mean(r > 1.1)),
        "ess_bulk_min": _statistic(ess_bulk, np.min),
        "ess_bulk_median": _statistic(ess_bulk, np.median),
        "ess_tail_min": _statistic(ess_tail, np.min),
        "ess_tail_median": _statistic(ess_tail, np.median),
    }


__all__ = ["convergence_summary", "posterior_dataset"]
