"""Plots of the posterior's weight statistics over training and of the pruning experiment, built with matplotlib's
object API (no pyplot state).

* :func:`plot_weight_statistics`: per layer, histograms of mu, sigma and the signal-to-noise ratio (dB) at the first
  and the last recorded epoch, overlaid, from :class:`~pyro_bnn.diagnostics.weight_stats.WeightStatsRecorder`.
* :func:`plot_pruning`: test error against the proportion of weights removed, one line per ranking, from
  :func:`~pyro_bnn.diagnostics.pruning.pruning_table`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pyro_bnn.diagnostics.weight_stats import Histogram, LayerStats, WeightStatsRecorder, statistics_from_dict

_QUANTITIES = (("mu", "posterior mean μ"), ("sigma", "posterior std σ"), ("snr_db", "SNR |μ|/σ (dB)"))
_RANKING_LABELS = {"snr": "signal-to-noise |μ|/σ", "magnitude": "magnitude |μ|"}


def _entries(history) -> list[tuple[str, dict[str, LayerStats]]]:
    """``[(label, {layer: LayerStats})]`` of the first and last recorded epoch (one entry if they coincide)."""
    if isinstance(history, WeightStatsRecorder):
        history = history.history
    if isinstance(history, Mapping):  # one snapshot, as weight_statistics returns it
        return [("", {k: v if isinstance(v, LayerStats) else LayerStats.from_dict(v) for k, v in history.items()})]
    if not history:
        raise ValueError("plot_weight_statistics needs at least one recorded epoch")
    chosen = [history[0]] if len(history) == 1 else [history[0], history[-1]]
    return [(f"epoch {entry['epoch']}", statistics_from_dict(entry["layers"])) for entry in chosen]


def _draw_histogram(ax: Axes, histogram: Histogram, *, label: str, color: str) -> None:
    counts = np.asarray(histogram.counts, dtype=float)
    edges = np.asarray(histogram.edges, dtype=float)
    total = counts.sum()
    # Shares of the layer's weights, so epochs (and layers) of any size compare on one axis.
    ax.stairs(counts / total if total else counts, edges, label=label, color=color, fill=False, linewidth=1.4)


def plot_weight_statistics(
    history: Sequence[Mapping[str, Any]] | WeightStatsRecorder | Mapping[str, Any],
    *,
    part: str = "weights",
    title: str | None = None,
) -> Figure:
    """One row per layer, one column per quantity (mu, sigma, SNR in dB): the histograms of the first and last
    recorded epoch overlaid, as shares of the layer's weights.

    Args:
        history: :attr:`WeightStatsRecorder.history` (or the recorder itself), or one snapshot ``{layer:
            LayerStats}`` from :func:`~pyro_bnn.diagnostics.weight_stats.weight_statistics`.
        part: ``"weights"`` or ``"biases"``; layers without that part are skipped.
        title: Figure title.

    Raises:
        ValueError: an empty history, an unknown ``part``, or no layer with that part.
    """
    if part not in ("weights", "biases"):
        raise ValueError(f"part must be 'weights' or 'biases', got {part!r}")
    entries = _entries(history)
    layers = [layer for layer, stats in entries[-1][1].items() if getattr(stats, part) is not None]
    if not layers:
        raise ValueError(f"no layer has random {part} to plot")
    figure = Figure(figsize=(4.0 * len(_QUANTITIES), 2.6 * len(layers)), layout="constrained")
    axes = figure.subplots(len(layers), len(_QUANTITIES), squeeze=False)
    for row, layer in enumerate(layers):
        for column, (key, label) in enumerate(_QUANTITIES):
            ax = axes[row, column]
            for index, (epoch_label, stats) in enumerate(entries):
                summary = getattr(stats.get(layer), part, None)
                if summary is not None:
                    _draw_histogram(ax, getattr(summary, key), label=epoch_label or None, color=f"C{index}")
            if key == "snr_db":
                ax.axvline(0.0, color="0.35", linestyle="--", linewidth=1.0)  # SNR = 1
            ax.set_xlabel(label)
            ax.grid(alpha=0.3)
            if column == 0:
                last = getattr(entries[-1][1][layer], part)
                ax.set_ylabel(f"layer {layer or '(root)'} {part}\nshare of {last.count:,}")
        summary = getattr(entries[-1][1][layer], part)
        axes[row, -1].set_title(
            f"{entries[-1][0] or 'snapshot'}: median SNR {summary.median_snr:.3g}, "
            f"SNR < 1: {100 * summary.fraction_snr_below_1:.1f} %",
            fontsize="small",
        )
    if any(label for label, _ in entries):
        axes[0, 0].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure


def plot_pruning(rows: Sequence[Mapping[str, Any]], *, title: str | None = None) -> Figure:
    """Test error (%) against the proportion of weights removed (%), one line per ranking.

    Args:
        rows: :func:`~pyro_bnn.diagnostics.pruning.pruning_table` output: one ``{"fraction": share of weights
            removed, "error_<ranking>": test error, ...}`` per pruning level, shares and errors in ``[0, 1]``.
        title: Axes title.

    Raises:
        ValueError: no rows, rows without ``error_*`` columns, or a row without ``"fraction"`` or one of the first
            row's ``error_*`` columns.
    """
    if not rows:
        raise ValueError("plot_pruning needs at least one row")
    rankings = [key[len("error_") :] for key in rows[0] if key.startswith("error_")]
    if not rankings:
        raise ValueError("plot_pruning needs rows with error_<ranking> columns (pruning_table's output)")
    needed = ["fraction", *(f"error_{ranking}" for ranking in rankings)]
    for index, row in enumerate(rows):
        missing = [key for key in needed if key not in row]
        if missing:
            raise ValueError(f"row {index} has no {missing[0]!r}; pruning_table's rows have {needed}")
    ordered = sorted(rows, key=lambda row: row["fraction"])
    fractions = [100 * row["fraction"] for row in ordered]
    figure = Figure(figsize=(5.0, 3.6), layout="constrained")
    ax = figure.subplots()
    for ranking in rankings:
        errors = [100 * row[f"error_{ranking}"] for row in ordered]
        ax.plot(fractions, errors, marker="o", markersize=4, label=_RANKING_LABELS.get(ranking, ranking))
    ax.set_xlabel("weights removed (%)")
    ax.set_ylabel("test error (%)")
    ax.grid(alpha=0.3)
    ax.legend(title="pruned by", fontsize="small")
    if title:
        ax.set_title(title)
    return figure


__all__ = ["plot_pruning", "plot_weight_statistics"]
