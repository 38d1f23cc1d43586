"""Training curves: validation metrics per epoch for several runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

_LABELS = {
    "val_accuracy": "validation accuracy",
    "val_ece": "validation ECE",
    "val_nll": "validation NLL",
    "loss": "negative ELBO",
    "data_term": "data term",
    "kl_term": "KL term",
}


def plot_training_curves(
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    keys: Sequence[str] = ("val_accuracy", "val_ece"),
    *,
    title: str | None = None,
) -> Figure:
    """One panel per metric, one line per run, epoch on the x axis.

    Args:
        histories: ``{run label: trainer history}`` (lists of per-epoch records).
        keys: Record keys to plot, e.g. ``("val_accuracy", "val_ece")``.
        title: Figure title.

    Raises:
        ValueError: no history, or a record without ``"epoch"``.
    """
    if not histories:
        raise ValueError("plot_training_curves needs at least one history")
    for label, history in histories.items():
        missing = next((i for i, record in enumerate(history) if "epoch" not in record), None)
        if missing is not None:
            raise ValueError(f"record {missing} of history {label!r} has no 'epoch'; trainer histories have one")
    figure = Figure(figsize=(4.2 * len(keys), 3.4), layout="constrained")
    axes = figure.subplots(1, len(keys), squeeze=False)[0]
    for ax, key in zip(axes, keys, strict=True):
        for label, history in histories.items():
            points = [(r["epoch"], r[key]) for r in history if key in r]
            if points:
                epochs, values = zip(*points, strict=True)
                ax.plot(epochs, values, marker="o", markersize=3, label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel(_LABELS.get(key, key))
        ax.grid(alpha=0.3)
    axes[0].legend()
    if title:
        figure.suptitle(title)
    return figure
