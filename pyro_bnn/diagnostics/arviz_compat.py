"""The one module of pyro_bnn that knows which generation of ArviZ is installed.

Why this exists: ArviZ split in two. ArviZ 0.17 to 0.23 (Python 3.10+) keeps everything in ``arviz`` and builds an
``arviz.InferenceData``. The refactored ArviZ (ArviZ 1.x, which needs Python 3.12+, is a thin namespace over
``arviz-base``, ``arviz-stats`` and ``arviz-plots``; their 0.8 releases install on Python 3.11 and hold the same
API) builds an ``xarray.DataTree`` with ``arviz_base.from_dict({group: {var: array}})`` and computes diagnostics
with ``arviz_stats``; its results have other field names (``ELPDData.elpd`` where 0.x has ``["elpd_loo"]``).
``pip install arviz`` gives the first on Python 3.11 and the second on 3.12 and newer, so pyro_bnn must speak both.
Everything else in pyro_bnn calls the few operations below and never imports an ArviZ package itself.

Two backends:

* :data:`LEGACY` (``"legacy"``): ``arviz`` 0.x, ``arviz.InferenceData``;
* :data:`REFACTORED` (``"refactored"``): ``arviz_base`` + ``arviz_stats`` (0.8 or later, or ArviZ 1.x which ships
  them), ``xarray.DataTree``.

:func:`backend` chooses the one that :func:`from_dicts` builds with: the environment variable
:data:`ENV_VAR` (``PYRO_BNN_ARVIZ=legacy`` or ``refactored``) when it is set, else ``legacy`` when ``arviz`` 0.x is
installed (what its ``az.summary`` / ``az.loo`` take), else ``refactored``. Every other function reads the backend
off the container it is given (an ``InferenceData`` or a ``DataTree``), so a container keeps working after the
choice changes.

ArviZ is imported lazily, inside these functions: importing pyro_bnn (or running a CLI command that does not need
ArviZ) imports none of it. ArviZ 0.2x's import-time ``FutureWarning`` about the refactor is filtered here, where
``arviz`` is imported, and nowhere else.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

LEGACY = "legacy"
"""ArviZ 0.x: ``arviz.from_dict`` -> ``arviz.InferenceData``."""

REFACTORED = "refactored"
"""ArviZ 1.x / arviz-base + arviz-stats: ``arviz_base.from_dict`` -> ``xarray.DataTree``."""

BACKENDS = (LEGACY, REFACTORED)

ENV_VAR = "PYRO_BNN_ARVIZ"
"""Environment variable that forces the backend :func:`from_dicts` builds with (``legacy`` or ``refactored``)."""

SUMMARY_COLUMNS = ("mean", "sd", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat")
"""Columns of :func:`summary`: those both generations compute (their credible-interval columns differ)."""

COMPARE_COLUMNS = ("rank", "elpd", "p", "elpd_diff", "weight", "se", "dse")
"""Columns of :func:`compare` (ArviZ 0.x's ``elpd_loo`` / ``p_loo`` renamed to the refactored ``elpd`` / ``p``)."""

TAIL_PROBS = (0.05, 0.95)
"""Quantiles of :func:`ess`'s ``"tail"`` method, in both backends."""

_REFACTOR_WARNING = r"\s*ArviZ is undergoing a major refactor"
"""Start of the FutureWarning ArviZ 0.2x prints on import (once a day) unless all three split packages are there."""


# ------------------------------------------------------------------------------------------- the backend
def _arviz_major() -> int | None:
    """Major version of the installed ``arviz`` distribution, None when it is not installed (no import)."""
    try:
        return int(metadata.version("arviz").split(".", 1)[0])
    except (metadata.PackageNotFoundError, ValueError):
        return None


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def available(name: str) -> bool:
    """Whether a backend's packages are installed: ``arviz`` 0.x for :data:`LEGACY`; ``arviz_base`` and
    ``arviz_stats`` for :data:`REFACTORED` (as ArviZ 1.x installs them, or on their own)."""
    if name == LEGACY:
        return _arviz_major() == 0 and _importable("arviz")
    if name == REFACTORED:
        return _importable("arviz_base") and _importable("arviz_stats")
    raise ValueError(f"unknown ArviZ backend {name!r}; choose one of {BACKENDS}")


def backend() -> str:
    """The backend :func:`from_dicts` builds with (see the module docstring for the rule).

    Raises:
        ValueError: :data:`ENV_VAR` names no backend.
        ImportError: the chosen backend's packages are missing, or no ArviZ is installed.
    """
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"{ENV_VAR}={forced!r} names no ArviZ backend; choose one of {BACKENDS}")
        if not available(forced):
            raise ImportError(f"{ENV_VAR}={forced} but its packages are not installed: {_install_hint(forced)}")
        return forced
    if available(LEGACY):
        return LEGACY
    if available(REFACTORED):
        return REFACTORED
    raise ImportError(f"the ArviZ export needs ArviZ: {_install_hint(REFACTORED)}, or pip install 'arviz>=0.17'")


def _install_hint(name: str) -> str:
    return "pip install 'arviz>=0.17,<1'" if name == LEGACY else "pip install arviz-base 'arviz-stats[xarray]'"


def _legacy() -> Any:
    """``arviz`` 0.x, imported without its refactor FutureWarning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_REFACTOR_WARNING, category=FutureWarning)
        import arviz
    if int(str(arviz.__version__).split(".", 1)[0]) >= 1:
        raise ImportError(f"the legacy ArviZ backend needs arviz 0.x; arviz {arviz.__version__} is installed")
    return arviz


def _arviz_base() -> Any:
    import arviz_base

    return arviz_base


def _arviz_stats() -> Any:
    import arviz_stats

    if not hasattr(arviz_stats, "loo"):  # arviz_stats hides its xarray layer when arviz-base / xarray-einstats miss
        raise ImportError(f"arviz_stats has no xarray layer here: {_install_hint(REFACTORED)}")
    return arviz_stats


def _is_datatree(data: Any) -> bool:
    return any(cls.__name__ == "DataTree" and cls.__module__.startswith("xarray") for cls in type(data).__mro__)


def _is_dataset(data: Any) -> bool:
    return any(cls.__name__ == "Dataset" and cls.__module__.startswith("xarray") for cls in type(data).__mro__)


def backend_of(data: Any) -> str:
    """The backend a container belongs to: :data:`REFACTORED` for an ``xarray.DataTree``, :data:`LEGACY` for an
    ``InferenceData``, and :func:`backend` for anything else (a bare ``xarray.Dataset``)."""
    if _is_datatree(data):
        return REFACTORED
    if type(data).__name__ == "InferenceData":
        return LEGACY
    return backend()


# ------------------------------------------------------------------------------------------- building
def from_dicts(
    posterior: Mapping[str, Any],
    *,
    log_likelihood: Mapping[str, Any] | None = None,
    observed_data: Mapping[str, Any] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, Any] | None = None,
) -> Any:
    """ArviZ's container from dicts of arrays, with the backend :func:`backend` names.

    Args:
        posterior: ``{var: (chain, draw, *shape)}`` arrays.
        log_likelihood: ``{var: (chain, draw, *obs_shape)}`` pointwise log-likelihoods, or None.
        observed_data: ``{var: obs_shape}`` arrays (no sample dimensions), or None.
        dims: ``{var: [dim name per axis after (chain, draw)]}``; axes without a name get ``<var>_dim_<i>``.
        coords: ``{dim name: coordinate values}``; dims without one get ``0 .. n - 1``.

    Returns:
        :data:`LEGACY`: an ``arviz.InferenceData``; :data:`REFACTORED`: an ``xarray.DataTree``. Either has groups
        ``posterior`` and, when given, ``log_likelihood`` and ``observed_data``.
    """
    dims = {name: list(value) for name, value in (dims or {}).items()}
    coords = dict(coords) if coords else None
    if backend() == LEGACY:
        return _legacy().from_dict(
            posterior=dict(posterior),
            log_likelihood=dict(log_likelihood) if log_likelihood is not None else None,
            observed_data=dict(observed_data) if observed_data is not None else None,
            dims=dims,
            coords=coords,
        )
    groups = {"posterior": dict(posterior)}
    if log_likelihood is not None:
        groups["log_likelihood"] = dict(log_likelihood)
    if observed_data is not None:
        groups["observed_data"] = dict(observed_data)  # "data" in the name: arviz-base adds no sample dims
    return _arviz_base().from_dict(groups, dims=dims, coords=coords)


# ------------------------------------------------------------------------------------------- reading
def group_names(data: Any) -> list[str]:
    """Names of the container's groups, e.g. ``["posterior", "log_likelihood"]``."""
    if _is_datatree(data):
        return list(data.children)
    return list(data.groups())


def group(data: Any, name: str = "posterior") -> Any:
    """One group of the container as an ``xarray.Dataset``.

    Raises:
        KeyError: the container has no such group.
    """
    if _is_dataset(data) and name == "posterior":
        return data
    if name not in group_names(data):
        raise KeyError(f"the ArviZ container has no {name!r} group; it has {group_names(data)}")
    if _is_datatree(data):
        return data[name].to_dataset()
    return getattr(data, name)


def _posterior(data: Any, var_names: Sequence[str] | None) -> Any:
    dataset = group(data, "posterior")
    return dataset[list(var_names)] if var_names is not None else dataset


# ------------------------------------------------------------------------------------------- statistics
def rhat(data: Any, var_names: Sequence[str] | None = None) -> Any:
    """Rank-normalised split r-hat of every posterior scalar: an ``xarray.Dataset`` without ``chain``/``draw``.

    Args:
        data: A container of either backend, or its posterior ``xarray.Dataset``.
        var_names: Posterior variables to include; default all.
    """
    dataset = _posterior(data, var_names)
    if backend_of(data) == LEGACY:
        return _legacy().rhat(dataset)
    return _arviz_stats().rhat(dataset)


def ess(data: Any, var_names: Sequence[str] | None = None, *, method: str = "bulk") -> Any:
    """Effective sample size of every posterior scalar (``method`` ``"bulk"``, ``"tail"``, ``"mean"``, ...): an
    ``xarray.Dataset`` without ``chain``/``draw``. Arguments as :func:`rhat`."""
    dataset = _posterior(data, var_names)
    if backend_of(data) == LEGACY:
        return _legacy().ess(dataset, method=method)
    # Tail ESS is min(ESS of the 5 % and 95 % quantile indicators) (Vehtari et al. 2021) as ArviZ 0.x computes it;
    # arviz-stats' default takes its credible-interval mass (0.89) instead, so the quantiles are passed here.
    options = {"prob": TAIL_PROBS} if method == "tail" else {}
    return _arviz_stats().ess(dataset, method=method, **options)


def summary(data: Any, var_names: Sequence[str] | None = None) -> Any:
    """``az.summary`` of the posterior, unrounded, with the columns :data:`SUMMARY_COLUMNS`: a pandas DataFrame
    with one row per scalar, labelled like ``"fc1.weight[0, 1]"``.

    ``mean``, ``mcse_mean``, ``ess_bulk`` and ``r_hat`` are the same numbers in both generations; the others follow
    each generation's own conventions: ``sd`` divides by n - 1 in ArviZ 0.x and by n in arviz-stats, ``mcse_sd``
    is estimated differently, and ``ess_tail`` takes the 5 % / 95 % quantiles in ArviZ 0.x but arviz-stats'
    credible-interval mass (11 % / 89 % by default); :func:`ess` with ``method="tail"`` is the same in both.
    """
    if backend_of(data) == LEGACY:
        table = _legacy().summary(data, var_names=list(var_names) if var_names else None, round_to="none")
    else:
        table = _arviz_stats().summary(data, var_names=list(var_names) if var_names else None, round_to="none")
    return table[list(SUMMARY_COLUMNS)].astype(float)


@dataclass(frozen=True)
class Loo:
    """PSIS-LOO of a container, in the same fields for both backends.

    Attributes:
        elpd: Estimated expected log pointwise predictive density (sum over observations).
        se: Its standard error.
        p: Effective number of parameters.
        n_samples: Posterior draws used (chains x draws).
        n_data_points: Observations.
        pareto_k: Pareto shape estimate per observation (numpy, ``obs_shape``).
        warning: True when the backend flagged unreliable estimates (a large Pareto k).

    The two generations fit the Pareto tail slightly differently (tail length, the prior on k), so their estimates
    agree to about 1e-3 relative, not to the last digit. Under 25 draws arviz-stats fits no tail at all and
    raises; :func:`loo` then gives the plain importance-sampling estimate with ``pareto_k`` = inf and ``warning``
    True, as ArviZ 0.x itself does under 21 draws.
        native: The backend's own result (``ELPDData``).
    """

    elpd: float
    se: float
    p: float
    n_samples: int
    n_data_points: int
    pareto_k: Any
    warning: bool
    native: Any


def loo(data: Any) -> Loo:
    """PSIS-LOO cross-validation from the container's ``log_likelihood`` group (and ``posterior``, for the relative
    efficiency of the draws)."""
    import numpy as np

    if backend_of(data) == LEGACY:
        result = _legacy().loo(data, pointwise=True)
        return Loo(
            elpd=float(result["elpd_loo"]),
            se=float(result["se"]),
            p=float(result["p_loo"]),
            n_samples=int(result["n_samples"]),
            n_data_points=int(result["n_data_points"]),
            pareto_k=np.asarray(result["pareto_k"]),
            warning=bool(result["warning"]),
            native=result,
        )
    stats = _arviz_stats()
    try:
        result = stats.loo(data, pointwise=True)
    except ValueError as error:
        if "n_draws_tail" not in str(error):
            raise
        # arviz-stats fits its Pareto tail to a fifth of the draws and refuses fewer than 5 (under 25 draws), where
        # ArviZ 0.x goes on without smoothing (k = inf, a warning). Do what ArviZ 0.x does: plain importance weights.
        result = stats.loo(data, pointwise=True, **_unsmoothed_weights(group(data, "log_likelihood")))
    return Loo(
        elpd=float(result.elpd),
        se=float(result.se),
        p=float(result.p),
        n_samples=int(result.n_samples),
        n_data_points=int(result.n_data_points),
        pareto_k=np.asarray(result.pareto_k),
        warning=bool(result.warning),
        native=result,
    )


def _unsmoothed_weights(log_likelihood: Any) -> dict[str, Any]:
    """Self-normalised importance log-weights ``-log p(y_i | draw)`` and Pareto k = inf, as ``loo`` arguments."""
    import numpy as np
    from scipy.special import logsumexp

    if len(log_likelihood.data_vars) != 1:
        raise ValueError(f"PSIS-LOO needs one log-likelihood variable, got {list(log_likelihood.data_vars)}")
    log_lik = next(iter(log_likelihood.data_vars.values()))
    sample_axes = tuple(log_lik.get_axis_num(dim) for dim in ("chain", "draw"))
    log_weights = -log_lik - logsumexp(-log_lik.values, axis=sample_axes, keepdims=True)
    pareto_k = (log_lik.isel(chain=0, draw=0, drop=True) * 0 + np.inf).rename("pareto_k")
    return {"log_weights": log_weights, "pareto_k": pareto_k}


def compare(models: Mapping[str, Any], *, method: str = "stacking") -> Any:
    """LOO comparison of containers (all of one backend): a pandas DataFrame, best model first, with the columns
    :data:`COMPARE_COLUMNS`, unrounded; ``elpd_diff`` is the best model's elpd minus this one's (>= 0, ArviZ 0.x's
    sign; ArviZ 1.x's own ``compare`` reports its negative).

    Args:
        models: ``{name: container}``.
        method: Weights: ``"stacking"``, ``"BB-pseudo-BMA"`` or ``"pseudo-BMA"``.
    """
    kinds = {backend_of(data) for data in models.values()}
    if len(kinds) != 1:
        raise ValueError(f"compare needs containers of one ArviZ backend, got {sorted(kinds)}")
    if kinds == {LEGACY}:
        table = _legacy().compare(dict(models), ic="loo", method=method)
        table = table.rename(columns={"elpd_loo": "elpd", "p_loo": "p"})
    else:
        stats = _arviz_stats()
        options = {"round_to": "none"} if "round_to" in inspect.signature(stats.compare).parameters else {}
        table = stats.compare(dict(models), method=method, **options)  # ArviZ 1.x rounds unless told not to
    table = table[list(COMPARE_COLUMNS)].sort_values("rank").copy()
    # ArviZ 0.x and arviz-stats 0.8 report elpd_diff as best minus this model (>= 0), ArviZ 1.x as this model minus
    # the best (<= 0): one sign for both, from the elpd column itself.
    table["elpd_diff"] = table["elpd"].iloc[0] - table["elpd"]
    return table.astype({column: float for column in COMPARE_COLUMNS if column != "rank"}).astype({"rank": int})


__all__ = [
    "BACKENDS",
    "COMPARE_COLUMNS",
    "ENV_VAR",
    "LEGACY",
    "REFACTORED",
    "SUMMARY_COLUMNS",
    "TAIL_PROBS",
    "Loo",
    "available",
    "backend",
    "backend_of",
    "compare",
    "ess",
    "from_dicts",
    "group",
    "group_names",
    "loo",
    "rhat",
    "summary",
]
