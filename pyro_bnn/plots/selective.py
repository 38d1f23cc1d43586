"""Selective prediction: risk-coverage curves of one or more uncertainty scores, built with the object API."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from pyro_bnn.evaluation import RiskCoverageCurve

_LABELS = {
    "max_probability": "1 - max probability",
    "entropy": "predictive entropy",
    "mutual_information": "mutual information",
}


def plot_risk_coverage(
    curves: Sequence[RiskCoverageCurve], *, labels: Sequence[str] | None = None, title: str | None = None
) -> Figure:
    """Risk (error rate of the kept inputs) against coverage (their share), one line per curve, AURC in the legend.

    Args:
        curves: :func:`pyro_bnn.evaluation.risk_coverage_curve` results, e.g. one per score or per model.
        labels: Legend label of each curve (default: its score's name).
        title: Title of the figure.

    Returns:
        A new figure; coverage runs from the most confident input alone (left) to every input (right, the overall
        error rate).

    Raises:
        ValueError: no curves, or a number of labels other than of curves.
    """
    if len(curves) == 0:
        raise ValueError("curves must hold at least one risk-coverage curve; got none")
    if labels is not None and len(labels) != len(curves):
        raise ValueError(f"labels must name each of the {len(curves)} curves; got {len(labels)} labels")
    figure = Figure(figsize=(5.0, 3.6), layout="constrained")
    ax = figure.subplots()
    for index, curve in enumerate(curves):
        name = labels[index] if labels is not None else _LABELS.get(curve.score.value, curve.score.value)
        ax.plot(curve.coverage, curve.risk, label=f"{name} (AURC {curve.aurc:.4f})")
    ax.set_xlabel("coverage (share of inputs kept)")
    ax.set_ylabel("risk (error rate on kept inputs)")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(bottom=0.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return figure
