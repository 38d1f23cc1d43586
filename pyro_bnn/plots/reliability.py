"""Reliability diagrams: accuracy per confidence bin against the diagonal, with a histogram of confidences.

Figures are built with the object API (``matplotlib.figure.Figure``), never through ``pyplot``: nothing here
picks or switches a backend, so the functions are safe in scripts, on headless machines and in notebooks
alike, and a figure that is not shown is freed like any other object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from mpl_toolkits.axes_grid1 import make_axes_locatable

from pyro_bnn.checks import int_below
from pyro_bnn.evaluation.calibration import DEFAULT_NUM_BINS, CalibrationResult, calibration
from pyro_bnn.plots._inputs import mapping

if TYPE_CHECKING:  # the plots take a Prediction without importing the prediction machinery (pyro, the model)
    from pyro_bnn.predict import Prediction

PANEL_SIZE = (4.5, 5.0)
"""Width and height in inches of one reliability panel, histogram included."""

_HISTOGRAM_HEIGHT = "28%"
"""Height of the confidence histogram below a diagram, relative to the diagram's axes."""

LEGEND_HEADROOM = 0.25
"""The diagram's y axis runs to ``1 + LEGEND_HEADROOM``: the legend sits in that strip above accuracy 1, where no
bar reaches (accuracy and confidence are at most 1), so it hides none (in the upper left it hid a
low-confidence bin's bar at accuracy 1)."""


def _root_figure(ax: Axes) -> Figure:
    """The top-level figure of ``ax``, also when ``ax`` lives in a ``SubFigure``."""
    # ax.figure is the SubFigure for axes inside one; a SubFigure's .figure is its root, a Figure's itself.
    return ax.figure.figure


def _check_result(result: object, name: str, hint: str = "") -> CalibrationResult:
    """``result`` if it is a :class:`CalibrationResult`; else a one-line ``ValueError`` naming ``name``."""
    if not isinstance(result, CalibrationResult):
        raise ValueError(
            f"{name} must be a CalibrationResult (pyro_bnn.evaluation.calibration), got {type(result).__name__}{hint}"
        )
    return result


def _draw_reliability(ax: Axes, result: CalibrationResult, *, title: str | None, label: str | None) -> Axes:
    """Draws one reliability diagram into ``ax`` and a confidence histogram in a new axes below it.

    Args:
        ax: axes for the diagram; it gives up the bottom part of its area to the histogram.
        result: the binned statistics to draw.
        title: axes title, or ``None`` for none.
        label: legend label of the accuracy bars (``"accuracy"`` when ``None``); the ECE and its bin count are
            appended, e.g. ``"accuracy, ECE (10 bins) 0.026"``.

    Returns:
        The histogram's axes.
    """
    edges = result.bin_edges.detach().cpu().double().numpy()
    counts = result.bin_counts.detach().cpu().numpy()
    accuracy = result.bin_accuracy.detach().cpu().double().numpy()
    confidence = result.bin_confidence.detach().cpu().double().numpy()
    widths = np.diff(edges)
    centers = edges[:-1] + widths / 2
    # Empty bins have NaN statistics; they get no bar rather than a misleading zero-height one.
    filled = counts > 0

    ax.plot([0.0, 1.0], [0.0, 1.0], linestyle="--", color="0.35", linewidth=1.0, label="perfect calibration")
    ax.bar(
        centers[filled],
        accuracy[filled],
        width=widths[filled],
        color="C0",
        edgecolor="white",
        linewidth=0.5,
        label=f"{label or 'accuracy'}, ECE ({result.n_bins} bins) {result.ece:.3f}",
    )
    # The gap bar spans accuracy to confidence: above the accuracy bar where the model is overconfident, into
    # it where it is underconfident.
    ax.bar(
        centers[filled],
        confidence[filled] - accuracy[filled],
        bottom=accuracy[filled],
        width=widths[filled],
        color="C3",
        alpha=0.3,
        edgecolor="C3",
        hatch="//",
        linewidth=0.5,
        label="gap to confidence",
    )
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0 + LEGEND_HEADROOM)
    ax.set_yticks(np.linspace(0.0, 1.0, 6))
    ax.set_ylabel("accuracy")
    ax.legend(loc="upper left", fontsize="x-small", ncols=2, borderaxespad=0.3, handlelength=1.5, columnspacing=1.0)
    if title is not None:
        ax.set_title(title)

    histogram_ax = make_axes_locatable(ax).append_axes("bottom", size=_HISTOGRAM_HEIGHT, pad=0.1, sharex=ax)
    histogram_ax.bar(centers, counts, width=widths, color="0.55", edgecolor="white", linewidth=0.5)
    histogram_ax.set_xlabel("confidence")
    histogram_ax.set_ylabel("count")
    ax.tick_params(labelbottom=False)
    return histogram_ax


def plot_reliability(
    result: CalibrationResult,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    label: str | None = None,
) -> Figure:
    """Reliability diagram of one predictive.

    Bars show the accuracy of each non-empty confidence bin against the diagonal of perfect calibration,
    shaded bars the gap from accuracy to the bin's mean confidence, and a lower panel the number of data
    points per bin. The ECE, with its number of bins, is part of the accuracy bars' legend entry (``"accuracy, ECE
    (10 bins) 0.026"``), so a diagram's ECE is not mistaken for one binned otherwise. The legend sits above
    accuracy 1 (the y axis runs to ``1 + LEGEND_HEADROOM``), where it covers no bar.

    Args:
        result: binned statistics from ``pyro_bnn.evaluation.calibration``; its tensors may be on any device.
        ax: axes to draw into (the lower part of its area goes to the histogram); ``None`` makes a new
            figure.
        title: title of the diagram.
        label: legend label of the accuracy bars, e.g. the model's name; ``"accuracy"`` when ``None``.

    Returns:
        The figure holding the diagram (``ax``'s top-level figure when ``ax`` is given).

    Raises:
        ValueError: ``result`` is no :class:`~pyro_bnn.evaluation.CalibrationResult` (several go to
            :func:`plot_reliability_grid`).
    """
    _check_result(result, "result", "; for several, use plot_reliability_grid" if isinstance(result, Mapping) else "")
    if ax is None:
        figure = Figure(figsize=PANEL_SIZE)
        ax = figure.add_subplot()
        figure.subplots_adjust(left=0.15, right=0.96, bottom=0.1, top=0.93 if title else 0.97)
    else:
        figure = _root_figure(ax)
    _draw_reliability(ax, result, title=title, label=label)
    return figure


def plot_reliability_grid(results: Mapping[str, CalibrationResult], *, title: str | None = None) -> Figure:
    """Reliability diagrams of several predictives side by side, one titled panel per entry.

    Args:
        results: panel title (e.g. ``"ReLU"``, ``"Leaky ReLU"``) to binned statistics, drawn left to right in
            the mapping's order.
        title: title over all panels.

    Returns:
        A new figure with one diagram (and its histogram) per entry.

    Raises:
        ValueError: ``results`` is no mapping, is empty, or holds a value that is no
            :class:`~pyro_bnn.evaluation.CalibrationResult` (e.g. a probability tensor: bin it with
            :func:`~pyro_bnn.evaluation.calibration` first).
    """
    mapping(results, "results", "a mapping {panel title: CalibrationResult}")
    for name, result in results.items():
        _check_result(result, f"results[{name!r}]", "; bin probabilities with calibration(probs, labels) first")
    if len(results) == 0:
        raise ValueError("results must hold at least one CalibrationResult to plot; got an empty mapping")
    num_panels = len(results)
    width, height = PANEL_SIZE
    figure = Figure(figsize=(width * num_panels, height))
    axes = figure.subplots(1, num_panels, squeeze=False)[0]
    top = 0.88 if title else 0.93
    figure.subplots_adjust(left=0.15 / num_panels, right=1 - 0.04 / num_panels, bottom=0.1, top=top, wspace=0.3)
    for ax, (name, result) in zip(axes, results.items(), strict=True):
        _draw_reliability(ax, result, title=name, label=None)
    if title is not None:
        figure.suptitle(title)
    return figure


def plot_reliability_comparison(
    prediction: Prediction,
    *,
    n_bins: int = DEFAULT_NUM_BINS,
    sample: int = 0,
    title: str | None = None,
) -> Figure:
    """Reliability diagrams of one posterior sample, the posterior-mean network and the ensemble, side by side.

    The three predictives a Bayes-by-Backprop evaluation compares: one network drawn from the posterior
    (``prediction.probs[sample]``, ``(N, C)``), the source's point network (``prediction.point.probs``,
    ``(1, N, C)``) and the model average over all S samples (``prediction.probs``, ``(S, N, C)``, averaged
    before binning). Each panel's title gives its accuracy (:meth:`~pyro_bnn.predict.Prediction.accuracies`);
    the bins come from :func:`pyro_bnn.evaluation.calibration`.

    Args:
        prediction: A classification prediction with targets; ``probs (S, N, C)``, ``targets (N,)``. Without a
            point network (``prediction.point`` is None, e.g. ``predict`` was not called with ``point=True``) the
            posterior-mean panel is left out.
        n_bins: Equal-width confidence bins of every diagram.
        sample: Index of the single posterior sample to draw, in ``[0, S)``.
        title: Title over all panels.

    Returns:
        A new figure with three panels (two without a point network), each a diagram with its confidence
        histogram below it (so twice as many axes as panels).

    Raises:
        ValueError: for a regression prediction, one without targets, or a ``sample`` out of range.
    """
    accuracies = prediction.accuracies()  # raises for regression or missing targets
    num_samples = prediction.num_samples
    int_below(sample, "sample", num_samples)
    targets = prediction.targets
    results = {
        f"sample {sample} (accuracy {accuracies.per_sample[sample]:.2%})": calibration(
            prediction.probs[sample], targets, n_bins
        )
    }
    if prediction.point is not None:
        results[f"posterior mean (accuracy {accuracies.posterior_mean:.2%})"] = calibration(
            prediction.point.probs, targets, n_bins
        )
    results[f"ensemble of {num_samples} (accuracy {accuracies.ensemble:.2%})"] = calibration(
        prediction.probs, targets, n_bins
    )
    return plot_reliability_grid(results, title=title)
