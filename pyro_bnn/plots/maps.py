"""Predictive maps of 2-D classifiers (:class:`~pyro_bnn.predict.PredictiveMap`): the class probability and its
uncertainty as filled contours, the training points on top.

Built with the object API (``matplotlib.figure.Figure``), never through ``pyplot``, like every plot here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from pyro_bnn.plots._inputs import panel_names
from pyro_bnn.predict.maps import PredictiveMap

QUANTITIES = {
    "probability": ("p(class {c})", "RdBu_r", (0.0, 1.0)),
    "sd": ("sd of p(class {c})", "viridis", None),
    "mutual_information": ("mutual information (nats)", "magma", None),
}
"""Mapped quantity -> (colour-bar label, colour map, fixed colour range or None)."""


def plot_predictive_map(
    pmap: PredictiveMap,
    points: torch.Tensor | np.ndarray | None = None,
    labels: torch.Tensor | np.ndarray | None = None,
    *,
    quantities: str | Sequence[str] = ("probability", "sd"),
    title: str | None = None,
) -> Figure:
    """One panel per quantity of ``pmap``, with the 0.5 contour of the probability and the points on top.

    Args:
        pmap: The map.
        points: ``(N, 2)`` inputs to draw (the training data), a tensor or an array, or None.
        labels: ``(N,)`` their classes (colours), a tensor or an array, or None.
        quantities: Names in :data:`QUANTITIES`, one panel each; one str is one name.
        title: The figure's title.

    Raises:
        ValueError: no quantity or an unknown one, or points that are not ``(N, 2)`` with one label each.
    """
    quantities = panel_names(quantities, "quantities")
    unknown = [q for q in quantities if q not in QUANTITIES]
    if unknown:
        raise ValueError(f"unknown map quantity {unknown[0]!r}; expected some of {', '.join(QUANTITIES)}")
    points = None if points is None else torch.as_tensor(points)
    labels = None if labels is None else torch.as_tensor(labels)
    if points is not None and (points.dim() != 2 or points.shape[1] != 2):
        raise ValueError(f"points must be (N, 2), got shape {tuple(points.shape)}")
    if points is not None and labels is not None and labels.shape != points.shape[:1]:
        raise ValueError(f"labels must be ({points.shape[0]},), one per point, got shape {tuple(labels.shape)}")
    figure = Figure(figsize=(4.6 * len(quantities), 4.0), layout="constrained")
    axes = figure.subplots(1, len(quantities), squeeze=False)[0]
    x, y = pmap.x.numpy(), pmap.y.numpy()
    for ax, name in zip(axes, quantities, strict=True):
        label, cmap, limits = QUANTITIES[name]
        values = getattr(pmap, name).numpy()
        levels = 21 if limits is None else [limits[0] + (limits[1] - limits[0]) * i / 20 for i in range(21)]
        filled = ax.contourf(x, y, values, levels=levels, cmap=cmap)
        figure.colorbar(filled, ax=ax, label=label.format(c=pmap.positive_class))
        ax.contour(x, y, pmap.probability.numpy(), levels=[0.5], colors="k", linewidths=0.8)
        if points is not None:
            colours = None if labels is None else labels.cpu().numpy()
            ax.scatter(*points.cpu().numpy().T, c=colours, cmap="coolwarm", s=8, edgecolors="k", linewidths=0.3)
        ax.set_xlim(x[0], x[-1])
        ax.set_ylim(y[0], y[-1])
    if title:
        figure.suptitle(title)
    return figure


__all__ = ["QUANTITIES", "plot_predictive_map"]
