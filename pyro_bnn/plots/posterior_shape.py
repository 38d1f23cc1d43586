"""The shape of a weight posterior and what it does to predictions: per-scalar marginal histograms (one colour per
chain, the fitted Normal overlaid) and a NUTS-versus-VI comparison of two posterior predictives.

Samples follow :mod:`pyro_bnn.diagnostics.arviz_export`'s layout, ``{site: (chain, draw, *site_shape)}``. Figures
are built with matplotlib's object API (no pyplot state), as everywhere in :mod:`pyro_bnn.plots`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from pyro_bnn.plots._inputs import mapping, panel_names

PANEL_SIZE = (2.8, 2.2)
"""Width and height in inches of one marginal panel."""

MAP_SIZE = (3.6, 3.2)
"""Width and height in inches of one panel of the predictive maps."""


def _numpy(value: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


def _scalars(
    samples: Mapping[str, torch.Tensor],
    sites: str | Sequence[str] | None,
    indices: Sequence[tuple[str, tuple[int, ...]]] | None,
    max_panels: int,
) -> list[tuple[str, tuple[int, ...]]]:
    """The ``(site, index)`` pairs to draw: ``indices`` as given, else the first scalars of each site in turn."""
    if indices is not None:
        chosen = [(site, tuple(int(i) for i in index)) for site, index in indices]
    else:
        chosen = []
        for site in panel_names(sites, "sites") if sites is not None else list(samples):
            if site not in samples:
                raise ValueError(f"samples hold no site {site!r}; they hold {sorted(samples)[:8]}")
            shape = tuple(samples[site].shape[2:])
            chosen.extend((site, index) for index in np.ndindex(*shape) if len(chosen) < max_panels)
    for site, index in chosen:
        if site not in samples:
            raise ValueError(f"samples hold no site {site!r}; they hold {sorted(samples)[:8]}")
        _check_draws(samples[site], f"samples[{site!r}]")
        shape = tuple(samples[site].shape[2:])
        if len(index) != len(shape) or any(not 0 <= i < n for i, n in zip(index, shape, strict=True)):
            raise ValueError(f"index {index} does not fit site {site!r} of shape {shape}")
    if not chosen:
        raise ValueError("no scalar to plot")
    return chosen[:max_panels]


def _check_draws(value: torch.Tensor | np.ndarray, name: str) -> None:
    """One line for draws that are not ``(chain, draw, *site_shape)`` with at least one of each: a 1-D tensor was
    indexed as (chain, draw) (IndexError), and no draws reached np.percentile over nothing (IndexError)."""
    shape = tuple(value.shape)
    if len(shape) < 2 or shape[0] * shape[1] == 0:
        raise ValueError(
            f"{name} has shape {shape}; expected draws (chain, draw, *site_shape) with at least one chain and one draw"
        )


def plot_marginals(
    samples: Mapping[str, torch.Tensor],
    sites: str | Sequence[str] | None = None,
    *,
    indices: Sequence[tuple[str, tuple[int, ...]]] | None = None,
    comparison: Mapping[str, torch.Tensor] | None = None,
    comparison_label: str = "VI",
    max_panels: int = 12,
    columns: int = 4,
    bins: int = 40,
    title: str | None = None,
) -> Figure:
    """Histograms of chosen weights' marginals, one colour per chain, with the Normal fitted to all chains' draws.

    Each panel's title names the scalar and gives the pooled draws' excess kurtosis (about 0 for a Normal, near
    -2 for two separated equal modes), so a multimodal or heavy-tailed marginal stands out.

    Args:
        samples: ``{site: (chain, draw, *site_shape)}``, e.g. NUTS draws (aligned across chains, ideally).
        sites: Sites whose first scalars fill the panels (default all, in order) when ``indices`` is None; one str
            is one site.
        indices: Exactly which scalars: ``[(site, index tuple), ...]``.
        comparison: Draws of the same sites from another posterior, ``{site: (chain, draw, *site_shape)}``
            (e.g. VI, aligned to ``samples``), drawn pooled as a grey histogram.
        comparison_label: Legend label of ``comparison``.
        max_panels: At most this many panels.
        columns: Panels per row.
        bins: Histogram bins (shared by the chains of a panel).
        title: Figure title.

    Returns:
        The figure.

    Raises:
        ValueError: a site or index that is not in ``samples``, a drawn site (in ``samples`` or ``comparison``)
            that is not ``(chain, draw, *site_shape)`` with at least one chain and one draw, a ``comparison`` site
            whose shape differs from the same site's in ``samples``, or nothing to plot.
    """
    mapping(samples, "samples", "a mapping {site: (chain, draw, *site_shape) draws}")
    chosen = _scalars(samples, sites, indices, max_panels)
    if comparison is not None:
        mapping(comparison, "comparison", "a mapping {site: (chain, draw, *site_shape) draws}")
        for site in dict.fromkeys(site for site, _ in chosen):
            if site in comparison:
                _check_draws(comparison[site], f"comparison[{site!r}]")
            if site in comparison and tuple(comparison[site].shape[2:]) != tuple(samples[site].shape[2:]):
                raise ValueError(
                    f"comparison[{site!r}] has site shape {tuple(comparison[site].shape[2:])}, samples[{site!r}] "
                    f"{tuple(samples[site].shape[2:])}; the same site must have the same shape in both"
                )
    columns = max(1, min(columns, len(chosen)))
    rows = math.ceil(len(chosen) / columns)
    figure = Figure(figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows + 0.4), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).reshape(-1)
    for ax, (site, index) in zip(axes, chosen, strict=False):
        draws = _numpy(samples[site][(slice(None), slice(None), *index)])  # (chain, draw)
        pooled = draws.reshape(-1)
        other = None
        if comparison is not None and site in comparison:
            other = _numpy(comparison[site][(slice(None), slice(None), *index)]).reshape(-1)
        low, high = np.percentile(np.concatenate([pooled, other]) if other is not None else pooled, [0.1, 99.9])
        pad = 0.05 * (high - low) if high > low else 1.0
        edges = np.linspace(low - pad, high + pad, bins + 1)
        if other is not None:
            ax.hist(other, bins=edges, density=True, color="0.75", label=comparison_label)
        for chain, chain_draws in enumerate(draws):
            ax.hist(
                chain_draws, bins=edges, density=True, histtype="step", color=f"C{chain % 10}", label=f"chain {chain}"
            )
        mean, sd = pooled.mean(), pooled.std()
        grid = np.linspace(edges[0], edges[-1], 200)
        if sd > 0:
            density = np.exp(-0.5 * ((grid - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
            ax.plot(grid, density, color="k", linestyle="--", linewidth=1.0, label="fitted Normal")
            kurtosis = np.mean(((pooled - mean) / sd) ** 4) - 3.0
            ax.set_title(f"{site}{list(index)}  kurt {kurtosis:+.2f}", fontsize="small")
        else:
            ax.set_title(f"{site}{list(index)}", fontsize="small")
        ax.tick_params(labelsize="x-small")
        ax.set_yticks([])
    for ax in axes[len(chosen) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize="xx-small", loc="upper left")
    if title is not None:
        figure.suptitle(title)
    return figure


def _mean_sd(
    probs: torch.Tensor | np.ndarray, class_index: int, name: str = "probs"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean and sd over samples of ``p(class)`` from ``(S, N, C)``; ``(N,)`` values are a mean with no sd."""
    values = _numpy(probs)
    if values.ndim == 1:
        return values, None
    if values.ndim != 3:
        raise ValueError(f"probs must be (S, N, C) or (N,), got shape {values.shape}")
    if values.shape[0] == 0:  # a mean over no samples is NaN, which contourf's levels refused
        raise ValueError(f"{name} must hold at least one sample (S, N, C), got shape {values.shape}")
    classes = values.shape[-1]
    if isinstance(class_index, bool) or not isinstance(class_index, numbers.Integral):
        raise ValueError(f"class_index must be an int, got {class_index!r}")
    if not -classes <= class_index < classes:
        raise ValueError(f"class_index must lie in [-{classes}, {classes}) for {classes} classes, got {class_index}")
    per_sample = values[..., class_index]
    return per_sample.mean(0), per_sample.std(0)


def plot_vi_vs_nuts(
    probs_nuts: torch.Tensor | np.ndarray,
    probs_vi: torch.Tensor | np.ndarray,
    *,
    inputs: torch.Tensor | np.ndarray | None = None,
    grid_shape: tuple[int, int] | None = None,
    x_train: torch.Tensor | np.ndarray | None = None,
    y_train: torch.Tensor | np.ndarray | None = None,
    class_index: int = 1,
    labels: tuple[str, str] = ("NUTS", "VI"),
    title: str | None = None,
) -> Figure:
    """Two posterior predictives of a classifier side by side: maps over a 2-D input grid, or a per-point scatter.

    With ``inputs`` on a grid (``grid_shape``) the top row shows the mean ``p(class)`` of each method and their
    difference (second minus first), and, given samples, the bottom row the same for the standard deviation of
    ``p(class)`` over posterior samples (the epistemic spread; mean-field VI typically shrinks it away from the
    data), with the training points overlaid. Without a grid, one scatter of the two mean ``p(class)`` per point
    (error bars: +- one sd over samples) against the diagonal.

    Args:
        probs_nuts: ``(S, N, C)`` class probabilities per sample, or ``(N,)`` mean ``p(class)``.
        probs_vi: The same for the other method.
        inputs: ``(N, 2)`` input points; with ``grid_shape`` they are a row-major ``meshgrid`` (``N = H W``).
        grid_shape: ``(H, W)`` of the grid, or None for the scatter.
        x_train: ``(M, 2)`` training inputs to overlay on the maps.
        y_train: ``(M,)`` their labels (colour).
        class_index: The class whose probability is shown.
        labels: Names of the two methods.
        title: Figure title.

    Returns:
        The figure.

    Raises:
        ValueError: probabilities that are not ``(S, N, C)`` with ``S >= 1`` or ``(N,)``, a ``class_index`` out of
            range, two predictives over different points, a ``grid_shape`` that is not ``(H, W)`` with
            ``H, W >= 2``, or ``inputs`` that do not fit it; one line.
    """
    mean_a, sd_a = _mean_sd(probs_nuts, class_index, "probs_nuts")
    mean_b, sd_b = _mean_sd(probs_vi, class_index, "probs_vi")
    if mean_a.shape != mean_b.shape:
        raise ValueError(f"the two predictives cover different points: {mean_a.shape} and {mean_b.shape}")
    if grid_shape is None:
        figure = Figure(figsize=(4.2, 4.0), layout="constrained")
        ax = figure.add_subplot()
        ax.errorbar(mean_a, mean_b, xerr=sd_a, yerr=sd_b, fmt="o", markersize=2.5, alpha=0.5, elinewidth=0.5)
        ax.plot([0, 1], [0, 1], color="0.3", linestyle="--", linewidth=1.0)
        ax.set_xlabel(f"{labels[0]}: p(class {class_index})")
        ax.set_ylabel(f"{labels[1]}: p(class {class_index})")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if title is not None:
            ax.set_title(title)
        return figure
    pair = tuple(grid_shape) if isinstance(grid_shape, (Sequence, np.ndarray, torch.Size)) else ()
    if len(pair) != 2 or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2 for n in pair):
        # contourf needs a 2 x 2 grid at least (a TypeError from matplotlib for (1, 1) or (1, W))
        raise ValueError(f"grid_shape must be (H, W) with H, W ints >= 2 (a filled contour map), got {grid_shape!r}")
    if inputs is None:
        raise ValueError("a map needs the grid's inputs (N, 2)")
    points = _numpy(inputs)
    height, width = (int(n) for n in pair)
    if points.shape != (height * width, 2) or mean_a.shape != (height * width,):
        raise ValueError(f"inputs {points.shape} and predictions {mean_a.shape} do not fit grid_shape {grid_shape}")
    gx, gy = points[:, 0].reshape(height, width), points[:, 1].reshape(height, width)
    rows = [("mean", mean_a, mean_b)]
    if sd_a is not None and sd_b is not None:
        rows.append(("sd", sd_a, sd_b))
    figure = Figure(figsize=(MAP_SIZE[0] * 3, MAP_SIZE[1] * len(rows)), layout="constrained")
    axes = figure.subplots(len(rows), 3, squeeze=False)
    train = _numpy(x_train) if x_train is not None else None
    colours = _numpy(y_train) if y_train is not None else None
    for row, (stat, a, b) in enumerate(rows):
        top = 1.0 if stat == "mean" else max(float(a.max()), float(b.max()), 1e-6)
        diff = b - a
        limit = max(float(np.abs(diff).max()), 1e-6)
        panels = [
            (a, f"{labels[0]}: {stat} p(class {class_index})", "viridis", 0.0, top),
            (b, f"{labels[1]}: {stat} p(class {class_index})", "viridis", 0.0, top),
            (diff, f"{labels[1]} - {labels[0]}: {stat}", "RdBu_r", -limit, limit),
        ]
        for ax, (value, name, cmap, low, high) in zip(axes[row], panels, strict=True):
            levels = np.linspace(low, high, 21)  # one colour scale for both methods' panels
            image = ax.contourf(gx, gy, value.reshape(height, width).clip(low, high), levels=levels, cmap=cmap)
            figure.colorbar(image, ax=ax, shrink=0.85)
            if train is not None:
                ax.scatter(train[:, 0], train[:, 1], c=colours, s=4, cmap="coolwarm", edgecolors="none", alpha=0.6)
            ax.set_title(name, fontsize="small")
            ax.tick_params(labelsize="x-small")
    if title is not None:
        figure.suptitle(title)
    return figure


__all__ = ["plot_marginals", "plot_vi_vs_nuts"]
