"""Posterior draws in ArviZ's form: pyro_bnn's adapter to ArviZ's data structures.

Everything here speaks one layout, ``{site name: (chain, draw, *site_shape)}`` tensors:

* :func:`draw_samples` gets it from any parameter source: a guide (its own ``draw`` where it has one, else Pyro
  tracing under a sample plate as :class:`~pyro_bnn.predict.sources.GuideSource` does), a dict of samples with or
  without a chain dimension (MCMC, an ensemble), a point estimate, or a :class:`~pyro_bnn.predict.ParameterSource`.
* :func:`to_inference_data` turns it into ArviZ's container, with a ``posterior`` group (one variable per site,
  dims ``(chain, draw, <site>_dim_0, ...)``) and, given data, a ``log_likelihood`` group (variable ``"obs"``,
  dims ``(chain, draw, obs_id)``) computed by :func:`pyro_bnn.predict.predict`, so that ArviZ's summary and LOO
  run on it (``az.summary`` / ``az.loo`` of ArviZ 0.x, ``arviz_stats.summary`` / ``loo`` of the refactored ArviZ,
  or :mod:`pyro_bnn.diagnostics.arviz_compat`'s ``summary`` / ``loo`` / ``compare`` with either).
* :func:`~pyro_bnn.diagnostics.convergence.convergence_summary` (in :mod:`pyro_bnn.diagnostics.convergence`) reads
  r-hat and ESS back as plain floats, so callers never handle ArviZ objects.
* :func:`normality_scores` (pure torch, in :mod:`pyro_bnn.diagnostics.normality`) measures how far each scalar's
  marginal is from a Normal.

Both generations of ArviZ are served: ArviZ 0.x (``arviz``) builds an ``InferenceData``; the refactored ArviZ
(ArviZ 1.x, or ``arviz-base`` + ``arviz-stats`` on their own) an ``xarray.DataTree`` with the same group and variable
names. Which one is built, and every call into ArviZ, is decided in :mod:`pyro_bnn.diagnostics.arviz_compat` and
nowhere else; ArviZ is imported only when a function here needs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.diagnostics import arviz_compat
from pyro_bnn.diagnostics.convergence import convergence_summary, posterior_dataset
from pyro_bnn.diagnostics.normality import normality_scores
from pyro_bnn.predict.predictive import Data, predict
from pyro_bnn.predict.sources import GuideSource, ParameterSource, PointEstimate, Samples

LOG_LIKELIHOOD_VAR = "obs"
"""Variable of the ``log_likelihood`` group: the likelihood's observation site."""

OBS_DIM = "obs_id"
"""Dimension of the ``log_likelihood`` variable that runs over the scored examples."""


def arviz_major_version() -> int:
    """The ArviZ generation :func:`to_inference_data` builds with now: 0 (ArviZ 0.x, ``InferenceData``) or 1 (the
    refactored ArviZ, ``xarray.DataTree``); see :func:`pyro_bnn.diagnostics.arviz_compat.backend`."""
    return 0 if arviz_compat.backend() == arviz_compat.LEGACY else 1


def site_dims(site: str, ndim: int) -> list[str]:
    """The dimension names of a site's own axes in the export: ``["<site>_dim_0", ..., "<site>_dim_{ndim-1}"]``."""
    return [f"{site}_dim_{axis}" for axis in range(ndim)]


# ------------------------------------------------------------------------------------------------- drawing
def _default_sites(bnn: BNN, available) -> list[str]:
    """Hyperparameter sites, then weight sites, in model order, of those ``available``."""
    return [name for name in (*bnn.hyper_site_names, *bnn.site_names) if name in available]


def _check_sites(sites: Sequence[str] | None, available, default: list[str]) -> list[str]:
    if sites is None:
        return default
    sites = list(sites)
    missing = [name for name in sites if name not in available]
    if missing:
        raise ValueError(f"the source has no values for site(s) {missing[:5]}; it has {sorted(available)[:8]}")
    return sites


def _leading_dims(bnn: BNN, values: Mapping[str, torch.Tensor]) -> int:
    """How many leading dimensions a dict of values carries beyond the sites' shapes: 0 (a point estimate), 1
    (``(S, ...)``) or 2 (``(chain, draw, ...)``), read from the model's weight sites (all must agree)."""
    known = {site.name: site.shape for site in bnn.sites if site.name in values}
    if not known:
        raise ValueError(f"the dict of values holds none of the model's weight sites {bnn.site_names[:5]}")
    leads = {name: values[name].dim() - len(shape) for name, shape in known.items()}
    for name, lead in leads.items():
        if lead not in (0, 1, 2) or tuple(values[name].shape[lead:]) != tuple(known[name]):
            raise ValueError(
                f"values of site {name!r} have shape {tuple(values[name].shape)}; expected {tuple(known[name])} "
                "preceded by nothing (a point estimate), (S,) or (chain, draw)"
            )
    if len(set(leads.values())) > 1:
        raise ValueError(f"the sites' values disagree on their leading dimensions: {leads}")
    return next(iter(leads.values()))


def _from_values(
    bnn: BNN,
    values: Mapping[str, torch.Tensor],
    num_samples: int | None,
    chains: int | None,
    sites: Sequence[str] | None,
) -> dict[str, torch.Tensor]:
    """``(chain, draw, ...)`` views of a dict of values (a point estimate, ``(S, ...)`` or ``(chain, draw, ...)``)."""
    lead = _leading_dims(bnn, values)
    names = _check_sites(sites, values, _default_sites(bnn, values) or list(values))
    out = {}
    for name in names:
        value = values[name].detach()
        if lead == 0:
            value = value.expand(chains or 1, num_samples or 1, *value.shape)
        elif lead == 1:
            chains_ = chains or 1
            if len(value) == 0:
                raise ValueError(f"site {name!r} holds 0 draws; draw_samples needs at least 1")
            if num_samples is None and len(value) < chains_:
                raise ValueError(f"site {name!r} holds {len(value)} draws, fewer than chains = {chains_}")
            per_chain = num_samples if num_samples is not None else len(value) // chains_
            if chains_ * per_chain > len(value):
                raise ValueError(
                    f"site {name!r} holds {len(value)} draws, fewer than chains x num_samples = {chains_} x {per_chain}"
                )
            value = value[: chains_ * per_chain].reshape(chains_, per_chain, *value.shape[1:])
        else:
            if value.shape[0] == 0 or value.shape[1] == 0:
                raise ValueError(
                    f"site {name!r} holds {value.shape[0]} chain(s) of {value.shape[1]} draw(s); draw_samples needs "
                    "at least 1 of each"
                )
            if chains is not None and chains != value.shape[0]:
                raise ValueError(f"the samples hold {value.shape[0]} chains; chains={chains} asks for another number")
            if num_samples is not None:
                if num_samples > value.shape[1]:
                    raise ValueError(f"the samples hold {value.shape[1]} draws per chain; asked for {num_samples}")
                value = value[:, :num_samples]
        out[name] = value
    return out


def draw_samples(
    bnn: BNN,
    source: ParameterSource | Callable | Mapping[str, torch.Tensor],
    num_samples: int | None = None,
    *,
    chains: int | None = None,
    sites: Sequence[str] | None = None,
    guide_args: tuple = (),
) -> dict[str, torch.Tensor]:
    """Posterior draws of the chosen sites in the ``(chain, draw, *site_shape)`` layout.

    Args:
        bnn: The model (its site names and shapes tell a point estimate from samples).
        source: Where the draws come from:

            * a guide: :class:`~pyro_bnn.guides.FlatMeanField` and :class:`~pyro_bnn.guides.NodeNoiseMixture`
              through their own ``draw`` (the mixture's chain ``c`` takes draws ``c * n .. (c + 1) * n``, so each
              chain holds every component equally when ``n`` is a multiple of K); any other guide is run once
              under a sample plate of ``chains * num_samples`` draws (Pyro tracing, auxiliary sites left out);
            * a dict ``{site: (S, *shape)}``: the first ``chains * num_samples`` draws, split into consecutive
              blocks of ``num_samples``, one per chain;
            * a dict ``{site: (chain, draw, *shape)}``: the first ``num_samples`` draws of every chain;
            * a point estimate ``{site: shape}``: repeated (a view) to ``(chains, num_samples)``;
            * a :class:`~pyro_bnn.predict.ParameterSource` (guide, samples or point estimate).
        num_samples: Draws per chain. Required for a guide; for a dict, default all its draws (split evenly).
        chains: Number of chains; default 1, or for a dict with a chain dimension all of its chains. Draws from a
            guide are independent, so its "chains" are only a layout (r-hat ~ 1 by construction).
        sites: Sites to keep; default every hyperparameter and weight site of the model that the source holds
            (for a guide without ``draw``: every latent site it samples).
        guide_args: Arguments to call a guide with (a guide that has not run yet needs the model's ``(x,)``).

    Returns:
        ``{site: (chain, draw, *site_shape)}``, detached, on the source's device.

    Raises:
        ValueError: a guide without ``num_samples``, a site the source does not hold, values of a shape that
            fits no layout above, or a dict with no draw (or fewer draws than ``chains``).
    """
    if chains is not None:
        positive_int(chains, "chains")
    if num_samples is not None:
        positive_int(num_samples, "num_samples")
    if isinstance(source, (Samples, PointEstimate)):
        source = source.samples if isinstance(source, Samples) else source.values
    elif callable(source) and not isinstance(source, ParameterSource):
        source = GuideSource(source)
    if isinstance(source, Mapping):
        return _from_values(bnn, _as_tensors(source, "draw_samples"), num_samples, chains, sites)
    if not isinstance(source, GuideSource):
        raise ValueError(f"draw_samples takes a guide, a dict of samples or a point estimate, got {type(source)}")
    if num_samples is None:
        raise ValueError("draw_samples needs num_samples (draws per chain) to draw from a guide")
    chains = chains or 1
    total = chains * num_samples
    with torch.no_grad():  # the parameter source's own draw, the one prediction takes
        values = {name: value.squeeze(1) for name, value in source.draw_latents(total, *guide_args).items()}
    names = _check_sites(sites, values, _default_sites(bnn, values) or list(values))
    return {name: values[name].detach().reshape(chains, num_samples, *values[name].shape[1:]) for name in names}


# ---------------------------------------------------------------------------------------------- ArviZ export
def _flatten_chains(samples: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{site: (chain * draw, *shape)}`` from ``{site: (chain, draw, *shape)}``."""
    return {name: value.reshape(-1, *value.shape[2:]) for name, value in samples.items()}


def _chain_draw(samples: Mapping[str, torch.Tensor], sites: Sequence[str]) -> tuple[int, int]:
    shapes = {name: tuple(samples[name].shape[:2]) for name in sites if samples[name].dim() >= 2}
    if len(shapes) != len(sites):
        short = [name for name in sites if samples[name].dim() < 2]
        raise ValueError(f"samples must be (chain, draw, *shape); site(s) {short} have fewer than 2 dimensions")
    if len(set(shapes.values())) != 1:
        raise ValueError(f"every site needs the same (chain, draw) dimensions, got {shapes}")
    chains, draws = next(iter(shapes.values()))
    if chains < 1 or draws < 1:
        raise ValueError(
            f"the samples hold {chains} chain(s) of {draws} draw(s); the export needs at least 1 chain of 1 draw"
        )
    return chains, draws


def _as_tensors(samples: Any, caller: str, *, network_dtype: bool = True) -> dict[str, torch.Tensor]:
    """``samples`` as a dict of tensors (NumPy arrays converted, floating ones to torch's default dtype, which the
    network runs in, unless ``network_dtype`` is False: draws no network reads keep their own); one line for
    anything else."""
    if not isinstance(samples, Mapping):
        raise ValueError(f"{caller} takes a dict {{site: tensor}}, got {type(samples).__name__}")
    tensors = {}
    for name, value in samples.items():
        if isinstance(value, np.ndarray):
            to_network = network_dtype and np.issubdtype(value.dtype, np.floating)
            dtype = torch.get_default_dtype() if to_network else None
            value = torch.as_tensor(np.ascontiguousarray(value), dtype=dtype)
        elif not isinstance(value, torch.Tensor):
            raise ValueError(
                f"{caller}: samples[{name!r}] must be a torch.Tensor or a NumPy array, got {type(value).__name__}"
            )
        tensors[name] = value
    return tensors


def _check_site_shapes(bnn: BNN, samples: Mapping[str, torch.Tensor], names: Sequence[str]) -> None:
    """Refuses weight samples whose shape after ``(chain, draw)`` is not their site's (``(S, *shape)`` draws without
    a chain dimension would otherwise be read as S chains)."""
    shapes = {site.name: tuple(site.shape) for site in bnn.sites}
    for name in names:
        if name in shapes and samples[name].dim() >= 2 and tuple(samples[name].shape[2:]) != shapes[name]:
            raise ValueError(
                f"samples must be (chain, draw, *site_shape): {name!r} is {tuple(samples[name].shape)} but its site "
                f"is {shapes[name]} (give draws (S, *shape) of one chain as .unsqueeze(0))"
            )


def _float64_numpy(value: torch.Tensor) -> np.ndarray:
    """``value`` as a NumPy array, in float64 when it is floating point: ArviZ's PSIS exponentiates log-weights down
    to float64's ~-708, where float32 underflows to 0 below ~-103 and the Pareto fit of a wide posterior gave NaN."""
    value = value.detach().cpu()
    return (value.to(torch.float64) if value.is_floating_point() else value).numpy()


def _thinned_indices(numel: int, keep: int) -> torch.Tensor:
    """``keep`` flat indices spread evenly over ``0 .. numel - 1`` (first and last included)."""
    return torch.linspace(0, numel - 1, keep).round().long().unique()


def to_inference_data(
    bnn: BNN,
    samples: Mapping[str, torch.Tensor],
    data: Data | None = None,
    *,
    sites: Sequence[str] | None = None,
    max_scalars_per_site: int | None = None,
    batch_size: int = 1000,
) -> Any:
    """ArviZ's container for posterior draws, with pointwise log-likelihoods when data is given.

    Args:
        bnn: The model.
        samples: ``{site: (chain, draw, *site_shape)}`` (:func:`draw_samples`, :func:`~pyro_bnn.diagnostics.nuts.
            run_nuts`), at least one chain of one draw; for the log-likelihood it must hold every weight site of the
            model.
        data: Examples to score, ``(x, y)`` or a loader of ``(x, y)`` batches (anything :func:`~pyro_bnn.predict.
            predict` takes with targets); None leaves out the ``log_likelihood`` group.
        sites: Sites to export to the posterior group; default the model's hyperparameter and weight sites held
            in ``samples`` (any other keys when it holds none of them).
        max_scalars_per_site: Export at most this many scalars of a larger site: it is flattened (row-major) and
            this many entries, spread evenly from the first to the last, are kept, under one dimension
            ``<site>_flat`` whose coordinate is the flat index. None exports every scalar.
        batch_size: Examples per network call when scoring ``data``.

    Returns:
        ArviZ 0.x: an ``arviz.InferenceData``; the refactored ArviZ: an ``xarray.DataTree`` (the backend that
        :func:`~pyro_bnn.diagnostics.arviz_compat.backend` names; ``PYRO_BNN_ARVIZ`` forces one). Groups
        ``posterior`` (one variable per site, dims ``(chain, draw, <site>_dim_0, ...)``) and, with data,
        ``log_likelihood`` (variable ``"obs"``, dims ``(chain, draw, obs_id)``: ``log p(y_n | draw)``, unscaled).
        Floating-point values are exported as float64 whatever the network's dtype, so PSIS-LOO's importance weights
        do not underflow.

    Raises:
        ValueError: samples not in the ``(chain, draw, ...)`` layout (or with no draw), a site missing from them, or
            data without targets.
    """
    samples = _as_tensors(samples, "to_inference_data")
    names = _check_sites(sites, samples, _default_sites(bnn, samples) or list(samples))
    if not names:
        raise ValueError("there is nothing to export: samples hold no site")
    if max_scalars_per_site is not None:
        positive_int(max_scalars_per_site, "max_scalars_per_site")
    _check_site_shapes(bnn, samples, names)
    num_chains, num_draws = _chain_draw(samples, names)
    posterior, dims, coords = {}, {}, {}
    for name in names:
        value = samples[name].detach()
        shape = tuple(value.shape[2:])
        if max_scalars_per_site is not None and math.prod(shape) > max_scalars_per_site:
            index = _thinned_indices(math.prod(shape), max_scalars_per_site)
            value = value.reshape(num_chains, num_draws, -1)[:, :, index.to(value.device)]
            dims[name] = [f"{name}_flat"]
            coords[f"{name}_flat"] = index.numpy()
        else:
            dims[name] = site_dims(name, len(shape))
        posterior[name] = _float64_numpy(value)
    log_likelihood = None
    if data is not None:
        missing = [name for name in bnn.site_names if name not in samples]
        if missing:
            raise ValueError(f"scoring data needs every weight site of the model; samples lack {missing[:5]}")
        _chain_draw(samples, bnn.site_names)
        flat = _flatten_chains({name: samples[name].detach() for name in bnn.site_names})
        prediction = predict(bnn, flat, data, batch_size=batch_size)
        if prediction.log_likelihood is None:
            raise ValueError("the data have no targets, so there is no log-likelihood to export")
        pointwise = prediction.log_likelihood.reshape(num_chains, num_draws, -1)
        log_likelihood = {LOG_LIKELIHOOD_VAR: _float64_numpy(pointwise)}
        dims[LOG_LIKELIHOOD_VAR] = [OBS_DIM]
    return arviz_compat.from_dicts(posterior, log_likelihood=log_likelihood, dims=dims, coords=coords)


def draws_to_inference_data(
    samples: Mapping[str, torch.Tensor],
    *,
    observed: Mapping[str, torch.Tensor] | None = None,
) -> Any:
    """ArviZ's container for draws of any model's sites, no BNN needed: a composed model's
    (:func:`pyro_bnn.compose.predict_model`, every site under its own name) or a sampler's.

    Args:
        samples: ``{site: (chain, draw, *site_shape)}`` tensors or NumPy arrays, every site with the same chain and
            draw counts, at least one of each (one chain: ``value.unsqueeze(0)`` of a ``(draw, *shape)`` tensor).
        observed: ``{site: shape}`` observed values for the ``observed_data`` group, or None.

    Returns:
        As :func:`to_inference_data`: groups ``posterior`` (one variable per site, dims ``(chain, draw,
        <site>_dim_0, ...)``, floating-point draws in float64) and, when given, ``observed_data``.

    Raises:
        ValueError: no site, a value that is neither a tensor nor an array, samples not in the
            ``(chain, draw, ...)`` layout, or no draw.
    """
    samples = _as_tensors(samples, "draws_to_inference_data", network_dtype=False)
    names = list(samples)
    if not names:
        raise ValueError("there is nothing to export: samples hold no site")
    _chain_draw(samples, names)
    posterior = {name: _float64_numpy(samples[name].detach()) for name in names}
    dims = {name: site_dims(name, samples[name].dim() - 2) for name in names}
    observed_data = None
    if observed is not None:
        observed_data = {name: torch.as_tensor(value).detach().cpu().numpy() for name, value in observed.items()}
        for name, value in observed_data.items():
            dims.setdefault(name, site_dims(name, value.ndim))
    return arviz_compat.from_dicts(posterior, observed_data=observed_data, dims=dims)


__all__ = [
    "LOG_LIKELIHOOD_VAR",
    "OBS_DIM",
    "arviz_major_version",
    "convergence_summary",
    "draw_samples",
    "draws_to_inference_data",
    "normality_scores",
    "posterior_dataset",
    "site_dims",
    "to_inference_data",
]
