"""Likelihood slices with their fitted Gaussian and plateau, and the fraction of weights with a plateau per layer.

Built with matplotlib's object API (``matplotlib.figure.Figure``), never through ``pyplot``, like the other plots.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pyro_bnn.diagnostics.plateaus import Plateau, PlateauSummary, find_plateau
from pyro_bnn.diagnostics.slices import LikelihoodSlice

SLICE_SIZE = (4.8, 3.4)
"""Width and height in inches of one slice panel."""


def _index_text(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def plot_likelihood_slice(slice_: LikelihoodSlice, ax: Axes | None = None, *, plateau: Plateau | bool = True) -> Figure:
    """The normalised likelihood ``exp(ll - max)`` against the weight, the fitted Gaussian dashed, the plateau shaded.

    The Gaussian is scaled to the slice's mass on the grid (both sum to the same over the grid points), the
    normalisation its TV distance uses.

    Args:
        slice_: The slice.
        ax: Axes to draw into; ``None`` makes a new figure.
        plateau: ``True`` shades :func:`~pyro_bnn.diagnostics.plateaus.find_plateau`'s result with its defaults,
            a :class:`~pyro_bnn.diagnostics.plateaus.Plateau` shades that one, ``False`` none.

    Returns:
        The figure (``ax``'s figure when ``ax`` is given).
    """
    if ax is None:
        figure = Figure(figsize=SLICE_SIZE, layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = ax.figure.figure  # the root figure also when ax lives in a SubFigure
    if plateau is True:
        plateau = find_plateau(slice_)
    grid = slice_.grid.detach().double().cpu().numpy()
    p = slice_.normalised.detach().double().cpu().numpy()

    if isinstance(plateau, Plateau):
        side = " (open: reaches the capped edge)" if plateau.open else ""
        ax.axvspan(plateau.start, plateau.end, color="C2", alpha=0.15, linewidth=0, label=f"plateau{side}")
    dense = np.linspace(grid[0], grid[-1], 400)
    shape = lambda w: np.exp(-0.5 * ((w - slice_.gaussian_mean) / slice_.gaussian_sd) ** 2)  # noqa: E731
    on_grid = shape(grid).sum()
    scale = p.sum() / on_grid if on_grid > 0 else 0.0
    ax.plot(grid, p, marker="o", markersize=3, color="C0", linewidth=1.2, label="exp(ll − max ll)")
    ax.plot(
        dense,
        scale * shape(dense),
        linestyle="--",
        color="C3",
        linewidth=1.2,
        label=f"Gaussian fit (mean {slice_.gaussian_mean:.3g}, sd {slice_.gaussian_sd:.3g})",
    )
    ax.axvline(slice_.w0, color="0.5", linestyle=":", linewidth=1.0, label="w0 (current value)")
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(0.0, 1.05 * max(1.0, float(np.max(scale * shape(dense)))))
    ax.set_xlabel(f"{slice_.name}{_index_text(slice_.index)}")
    ax.set_ylabel("normalised likelihood")
    ax.set_title(f"{slice_.name}{_index_text(slice_.index)}   TV = {slice_.tv_distance:.3f}", fontsize="medium")
    ax.legend(fontsize="x-small", loc="best")
    return figure


def plot_plateau_fractions(
    summaries: Mapping[str, PlateauSummary] | Mapping[str, Mapping[str, PlateauSummary]], *, title: str | None = None
) -> Figure:
    """One bar per layer: the fraction of sampled weights whose slice has a plateau, labelled ``flagged/sampled``.

    Args:
        summaries: :func:`~pyro_bnn.diagnostics.plateaus.plateau_fractions`'s result, or ``{run label: result}``
            for grouped bars (e.g. ``{"ReLU": ..., "Leaky ReLU -0.5": ...}``), layers in the first run's order.
        title: Axes title.

    Raises:
        ValueError: no summaries.
    """
    if not summaries:
        raise ValueError("plot_plateau_fractions needs at least one summary")
    first = next(iter(summaries.values()))
    runs = {"": summaries} if isinstance(first, PlateauSummary) else dict(summaries)
    layers: list[str] = []
    for run in runs.values():
        layers += [layer for layer in run if layer not in layers]
    figure = Figure(figsize=(max(4.0, 1.1 * len(layers) * max(1, len(runs)) + 1.5), 3.4), layout="constrained")
    ax = figure.add_subplot()
    positions = np.arange(len(layers))
    width = 0.8 / len(runs)
    for k, (label, run) in enumerate(runs.items()):
        offsets = positions - 0.4 + width * (k + 0.5)
        fractions = [run[layer].fraction if layer in run else np.nan for layer in layers]
        bars = ax.bar(offsets, fractions, width=width * 0.95, color=f"C{k}", label=label or None)
        counts = [f"{run[layer].num_flagged}/{run[layer].num_sampled}" if layer in run else "" for layer in layers]
        ax.bar_label(bars, labels=counts, fontsize="x-small", padding=2)
    ax.set_xticks(positions, layers, rotation=30 if len(layers) > 4 else 0, ha="right" if len(layers) > 4 else "center")
    ax.set_ylim(0.0, 1.1)
    ax.set_ylabel("fraction of weights with a plateau")
    ax.grid(axis="y", alpha=0.3)
    if len(runs) > 1 or next(iter(runs)):
        ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return figure


__all__ = ["plot_likelihood_slice", "plot_plateau_fractions"]
