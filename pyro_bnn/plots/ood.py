"""Out-of-distribution detection: histograms of an uncertainty score on in-distribution and OOD inputs.

Built with the object API (``matplotlib.figure.Figure``), never through ``pyplot``, like every plot here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from pyro_bnn.plots._inputs import panel_names

NUM_BINS = 40
"""Histogram bins per panel, shared by both sides so that their bars line up."""

_LABELS = {
    "entropy": "predictive entropy (nats)",
    "mutual_information": "mutual information (nats)",
    "max_probability": "1 - max mean probability",
}


def _values(scores: Mapping[str, torch.Tensor], name: str, side: str) -> np.ndarray:
    if name not in scores:
        raise ValueError(f"{side} has no score {name!r}; it holds {sorted(scores)}")
    values = torch.as_tensor(scores[name]).detach().cpu().double().reshape(-1).numpy()
    if len(values) == 0 or not np.isfinite(values).all():
        raise ValueError(f"{side}[{name!r}] must hold at least one score, all finite; got {len(values)} values")
    return values


def plot_ood_histograms(
    in_scores: Mapping[str, torch.Tensor],
    out_scores: Mapping[str, torch.Tensor],
    *,
    names: str | Sequence[str] = ("entropy", "mutual_information"),
    in_label: str = "in-distribution",
    out_label: str = "out-of-distribution",
    metrics: Mapping[str, Mapping[str, float]] | None = None,
    title: str | None = None,
) -> Figure:
    """One panel per score: overlaid density histograms of the in-distribution and the OOD inputs' scores.

    Args:
        in_scores: ``{score name: (N_in,) tensor}``, e.g. :func:`pyro_bnn.evaluation.ood_scores` of the
            in-distribution predictive; tensors may be on any device.
        out_scores: ``{score name: (N_out,) tensor}`` of the OOD inputs.
        names: The scores to draw, left to right; one str is one score.
        in_label: Legend label of the in-distribution histogram.
        out_label: Legend label of the OOD histogram, e.g. the OOD set's name.
        metrics: :func:`pyro_bnn.evaluation.ood_metrics`' result, or None; where given, each panel's title
            carries its score's AUROC and FPR at 95 % TPR.
        title: Title over all panels.

    Returns:
        A new figure. Both sides share the bins of a panel and are normalised to unit area, so that sets of
        different sizes compare.

    Raises:
        ValueError: ``names`` is empty, names a score one side lacks, or a side's score is empty or not finite.
    """
    names = panel_names(names, "names")
    figure = Figure(figsize=(4.4 * len(names), 3.4), layout="constrained")
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        inside, outside = _values(in_scores, name, "in_scores"), _values(out_scores, name, "out_scores")
        low, high = min(inside.min(), outside.min()), max(inside.max(), outside.max())
        # A score that is constant on both sides (mutual information of a deterministic network is 0) would give
        # zero-width bins.
        edges = np.linspace(low, high if high > low else low + 1.0, NUM_BINS + 1)
        ax.hist(inside, bins=edges, density=True, alpha=0.55, color="C0", label=f"{in_label} (n={len(inside)})")
        ax.hist(outside, bins=edges, density=True, alpha=0.55, color="C3", label=f"{out_label} (n={len(outside)})")
        ax.set_xlabel(_LABELS.get(name, name))
        ax.set_ylabel("density")
        if metrics is not None and name in metrics:
            ax.set_title(f"AUROC {metrics[name]['auroc']:.3f}, FPR@95 {metrics[name]['fpr_at_95_tpr']:.3f}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure
