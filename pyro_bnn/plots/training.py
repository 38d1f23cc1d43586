"""Training curves: validation metrics per epoch for several runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from pyro_bnn.plots._inputs import mapping, panel_names

_LABELS = {
    "val_accuracy": "validation accuracy",
    "val_ece": "validation ECE",
    "val_nll": "validation NLL",
    "loss": "negative ELBO",
    "data_term": "data term",
    "kl_term": "β·KL term (weighted)",  # the trainer records the KL as it entered the loss, times the KL weight
}


def plot_training_curves(
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    keys: str | Sequence[str] = ("val_accuracy", "val_ece"),
    *,
    title: str | None = None,
) -> Figure:
    """One panel per metric, one line per run, epoch on the x axis.

    Each run keeps one colour in every panel (``C0`` for the first run, ``C1`` for the second, ...), and the
    legend of the first panel names every run, also one that has no value of that panel's metric.

    Args:
        histories: ``{run label: trainer history}`` (lists of per-epoch records, each a mapping with ``"epoch"``).
        keys: Record keys to plot, one panel each, e.g. ``("val_accuracy", "val_ece")``; one str is one key.
        title: Figure title.

    Raises:
        ValueError: ``histories`` is no mapping or is empty, a record without ``"epoch"``, no key, or a key that
            no history records.
    """
    mapping(histories, "histories", "a mapping {run label: trainer history}")
    keys = panel_names(keys, "keys")
    if not histories:
        raise ValueError("plot_training_curves needs at least one history")
    for label, history in histories.items():
        missing = next((i for i, record in enumerate(history) if "epoch" not in record), None)
        if missing is not None:
            raise ValueError(f"record {missing} of history {label!r} has no 'epoch'; trainer histories have one")
    recorded = {key for history in histories.values() for record in history for key in record}
    absent = [key for key in keys if key not in recorded]
    if absent:
        raise ValueError(f"no history records key {absent[0]!r}; they record {sorted(recorded)}")
    figure = Figure(figsize=(4.2 * len(keys), 3.4), layout="constrained")
    axes = figure.subplots(1, len(keys), squeeze=False)[0]
    # A run's colour follows its place in ``histories``, not each panel's colour cycle (which skips runs without
    # the panel's key, so the same colour would name different runs in different panels).
    colours = {label: f"C{index % 10}" for index, label in enumerate(histories)}
    for ax, key in zip(axes, keys, strict=True):
        for label, history in histories.items():
            points = [(r["epoch"], r[key]) for r in history if key in r]
            if points:
                epochs, values = zip(*points, strict=True)
                ax.plot(epochs, values, marker="o", markersize=3, color=colours[label], label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel(_LABELS.get(key, key))
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=colour, marker="o", markersize=3, label=label) for label, colour in colours.items()]
    axes[0].legend(handles=handles)
    if title:
        figure.suptitle(title)
    return figure
