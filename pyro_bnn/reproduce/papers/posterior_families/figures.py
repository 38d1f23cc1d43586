"""The figure of ``posterior-families``: the moons predictive maps of every family side by side, NUTS first, drawn
from the maps the runs stored in ``result.json`` (``map``: bounds and a grid of posterior-mean probabilities)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.papers.posterior_families.plan import FAMILIES
from pyro_bnn.reproduce.planned import RunRecord
from pyro_bnn.reproduce.report import select

FIGURE = "moons-predictive-maps.png"
COLUMNS = 5


def _training_points(record: RunRecord) -> tuple[np.ndarray, np.ndarray] | None:
    """The training inputs ``(N, 2)`` and labels ``(N,)`` of a moons run (regenerated from its config: moons is
    drawn from its seed), or None where the data cannot be built."""
    from pyro_bnn.runs.runs import load_data

    try:
        train = load_data(record.config).train
    except (OSError, ValueError):
        return None
    return train.x.numpy(), train.y.numpy()


def moons_maps(records: list[RunRecord], out: Path) -> tuple[str, int] | None:
    """Draws one panel per family of the lowest seed that NUTS finished (NUTS first, then :data:`FAMILIES` order)
    into ``out/moons-predictive-maps.png``; returns ``(file name, seed)``, or None when no moons family has a map."""
    nuts = select(records, dataset="moons", family="nuts")
    seeds = sorted(int(r.spec.tag("seed")) for r in nuts if "map" in r.metrics)
    if not seeds:
        return None
    seed = seeds[0]
    panels = []
    for family in FAMILIES:
        found = [r for r in select(records, dataset="moons", family=family, seed=seed) if "map" in r.metrics]
        if found:
            panels.append((family, found[0]))
    points = _training_points(panels[0][1])
    rows = math.ceil(len(panels) / COLUMNS)
    figure = Figure(figsize=(3.2 * min(len(panels), COLUMNS), 3.0 * rows), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, min(len(panels), COLUMNS), squeeze=False)).reshape(-1)
    image = None
    for ax, (family, record) in zip(axes, panels, strict=False):
        stored = record.metrics["map"]
        (x0, x1), (y0, y1) = stored["bounds"]
        probability = np.asarray(stored["probability"], dtype=float)
        image = ax.imshow(probability, origin="lower", extent=(x0, x1, y0, y1), vmin=0, vmax=1, cmap="RdBu_r",
                          aspect="auto")  # fmt: skip
        xs, ys = np.linspace(x0, x1, probability.shape[1]), np.linspace(y0, y1, probability.shape[0])
        ax.contour(xs, ys, probability, levels=[0.5], colors="k", linewidths=1)
        if points is not None:
            x, y = points
            ax.scatter(x[:, 0], x[:, 1], c=y, cmap="RdBu_r", s=4, edgecolors="k", linewidths=0.2, vmin=0, vmax=1)
        kl = record.metrics.get("kl_to_nuts")
        suffix = "" if kl is None or family == "nuts" else f"\nKL {kl:.3f}"
        ax.set_title(f"{family}{suffix}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    if image is not None:
        figure.colorbar(image, ax=axes.tolist(), shrink=0.8, label="p(class 1)")
    save_figure(figure, out / FIGURE)
    return FIGURE, seed
