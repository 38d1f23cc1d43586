"""Image galleries: a grid of inputs with their true and predicted labels, the confidence and its spread
(:mod:`pyro_bnn.evaluation.galleries` picks the entries).

Built with the object API (``matplotlib.figure.Figure``), never through ``pyplot``, like every plot here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from pyro_bnn.checks import positive_int
from pyro_bnn.evaluation.galleries import GalleryEntry


def plot_gallery(
    images: torch.Tensor | np.ndarray,
    entries: Sequence[GalleryEntry],
    *,
    class_names: Sequence[str] | None = None,
    columns: int = 5,
    title: str | None = None,
) -> Figure:
    """One panel per entry: ``images[entry.index]`` with "true / predicted" and "p = probability ± spread".

    Args:
        images: ``(N, C, H, W)`` the scored inputs, a tensor or an array (one channel shown grey, three as
            colour; each image is scaled to its own range, so normalised inputs show as they were).
        entries: What to show, in order.
        class_names: A name per class (default: the class numbers).
        columns: Panels per row (>= 1).
        title: The figure's title.

    Raises:
        ValueError: no entry, bad ``columns``, images that are not ``(N, C, H, W)`` with C in {1, 3}, an
            entry whose index is outside ``images``, or ``class_names`` without a name for an entry's class.
    """
    if not entries:
        raise ValueError("a gallery needs at least one entry, got none")
    columns = positive_int(columns, "columns")
    images = torch.as_tensor(images)
    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"images must be (N, C, H, W) with C = 1 or 3, got shape {tuple(images.shape)}")
    bad = [e.index for e in entries if not 0 <= e.index < images.shape[0]]
    if bad:
        raise ValueError(f"entry index {bad[0]} is outside the {images.shape[0]} images")
    if class_names is not None:
        needed = max(max(e.label, e.predicted) for e in entries) + 1
        if len(class_names) < needed:
            raise ValueError(
                f"class_names has {len(class_names)} names; the entries need {needed} (classes 0..{needed - 1})"
            )
    rows = math.ceil(len(entries) / columns)
    figure = Figure(figsize=(1.9 * columns, 2.2 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)

    def name(c: int) -> str:
        return class_names[c] if class_names is not None else str(c)

    for k, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if k >= len(entries):
            continue
        entry = entries[k]
        image = images[entry.index].detach().cpu().double()
        low, high = float(image.min()), float(image.max())
        image = (image - low) / (high - low) if high > low else image * 0
        if image.shape[0] == 1:
            ax.imshow(image[0].numpy(), cmap="gray", vmin=0, vmax=1)
        else:
            ax.imshow(image.permute(1, 2, 0).numpy())
        colour = "tab:green" if entry.label == entry.predicted else "tab:red"
        ax.set_title(
            f"{name(entry.label)} / {name(entry.predicted)}\np = {entry.probability:.2f} ± {entry.spread:.2f}",
            fontsize=8,
            color=colour,
        )
    if title:
        figure.suptitle(title)
    return figure


__all__ = ["plot_gallery"]
