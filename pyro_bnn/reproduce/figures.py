"""Figures that more than one reproduction draws from the values its runs stored in ``result.json``."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure


def reliability_figure(reliability: dict, title: str) -> Figure:
    """Reliability diagrams (bin accuracy against bin confidence) of one sample, the posterior mean and the
    ensemble, from the bins a run's ``accuracies`` measurement stored."""
    figure = Figure(figsize=(12, 4), layout="constrained")
    axes = figure.subplots(1, 3)
    for ax, (name, label) in zip(
        axes, (("sample", "one sample"), ("posterior_mean", "posterior mean"), ("ensemble", "ensemble")), strict=True
    ):
        bins = reliability[name]
        n = len(bins["counts"])
        centres = (np.arange(n) + 0.5) / n
        accuracy = np.array([np.nan if v is None else v for v in bins["accuracy"]], dtype=float)
        ax.bar(centres, np.nan_to_num(accuracy), width=1 / n, edgecolor="k", alpha=0.7, label="accuracy")
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.set_title(f"{label}: ECE {bins['ece']:.3f}", fontsize=10)
        ax.set_xlabel("confidence")
        ax.set_ylabel("accuracy")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    figure.suptitle(f"Reliability, {title}")
    return figure
