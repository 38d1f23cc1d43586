"""1-D regression: the predictive mean with a ``mean ± num_sd * sd`` band over a test grid, the training data and
the true function, with the stretches of the input axis that hold no training data shaded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

ArrayLike = torch.Tensor | np.ndarray | Sequence[float]

FIGURE_SIZE = (6.4, 4.2)
"""Width and height in inches of a regression figure."""

GAP_FACTOR = 10.0
"""A step between neighbouring (sorted) training inputs wider than this many times the median step is shaded as
a region without training data."""


def _column(values: ArrayLike, name: str, length: int | None = None, *, finite: bool = True) -> np.ndarray:
    """``values`` of shape ``(M,)`` or ``(M, 1)`` as a float64 vector; checks the length when given, and with
    ``finite`` that every value is finite (matplotlib fails on a NaN axis limit, far from its cause)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(f"{name} must have shape (M,) or (M, 1) (one input and one output); got {array.shape}")
    if length is not None and len(array) != length:
        raise ValueError(f"{name} must hold {length} values, one per point of its x; got {len(array)}")
    if finite and not np.isfinite(array).all():
        index = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name} must be finite numbers; found {array[index]:.6g} at index {index}")
    return array


def training_gaps(x_train: np.ndarray, factor: float = GAP_FACTOR) -> list[tuple[float, float]]:
    """Intervals between neighbouring training inputs that are wider than ``factor`` times the median spacing.

    Args:
        x_train: ``(N,)`` training inputs, any order.
        factor: How many median spacings make a gap.

    Returns:
        ``[(left, right), ...]`` in increasing order; empty with fewer than three distinct inputs.
    """
    x = np.unique(np.asarray(x_train, dtype=np.float64))
    if len(x) < 3:
        return []
    steps = np.diff(x)
    wide = np.flatnonzero(steps > factor * np.median(steps))
    return [(float(x[i]), float(x[i + 1])) for i in wide]


def plot_regression(
    x_test: ArrayLike,
    mean: ArrayLike,
    std: ArrayLike,
    x_train: ArrayLike | None = None,
    y_train: ArrayLike | None = None,
    y_true: ArrayLike | None = None,
    *,
    num_sd: float = 2.0,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """The predictive mean and its ``mean ± num_sd * std`` band over a 1-D test grid.

    Training points are drawn as dots, the true function as a dashed line, and stretches without training data
    (see :func:`training_gaps`) as grey bands, so the gap of a data set such as cubic shows.

    Args:
        x_test: ``(M,)`` or ``(M, 1)`` test inputs (sorted here for drawing).
        mean: ``(M,)`` or ``(M, 1)`` predictive mean at ``x_test``.
        std: ``(M,)`` or ``(M, 1)`` predictive standard deviation at ``x_test`` (noise included).
        x_train: ``(N,)`` or ``(N, 1)`` training inputs, or ``None``.
        y_train: ``(N,)`` or ``(N, 1)`` training targets; needed with ``x_train``.
        y_true: ``(M,)`` or ``(M, 1)`` noiseless targets at ``x_test``, or ``None``.
        num_sd: Half-width of the band in standard deviations.
        title: Axes title.
        ax: Axes to draw into; ``None`` makes a new figure.

    Returns:
        The figure (``ax``'s figure when ``ax`` is given).

    Raises:
        ValueError: A shape does not fit (more than one input or output dimension, lengths that differ), only
            one of ``x_train`` / ``y_train`` is given, ``x_test`` is empty, a value is not finite (NaN or
            infinite), or ``std`` has a negative entry.
    """
    x = _column(x_test, "x_test")
    if len(x) == 0:
        raise ValueError("x_test holds no point; plot_regression needs at least one")
    mean_ = _column(mean, "mean", len(x))
    std_ = _column(std, "std", len(x), finite=False)
    if not ((std_ >= 0) & np.isfinite(std_)).all():  # NaN fails too
        raise ValueError(
            f"std must be non-negative finite numbers; found {std_[~((std_ >= 0) & np.isfinite(std_))][0]:.6g}"
        )
    if (x_train is None) != (y_train is None):
        raise ValueError("x_train and y_train go together: pass both or neither")
    order = np.argsort(x, kind="stable")
    x, mean_, std_ = x[order], mean_[order], std_[order]

    if ax is None:
        figure = Figure(figsize=FIGURE_SIZE, layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = ax.figure.figure
    if x_train is not None:
        x_data = _column(x_train, "x_train")
        y_data = _column(y_train, "y_train", len(x_data))
        for index, (left, right) in enumerate(training_gaps(x_data)):
            ax.axvspan(left, right, color="0.92", zorder=0, label="no training data" if index == 0 else None)
    ax.fill_between(
        x,
        mean_ - num_sd * std_,
        mean_ + num_sd * std_,
        color="C0",
        alpha=0.25,
        linewidth=0,
        label=f"mean ± {num_sd:g} sd",
    )
    ax.plot(x, mean_, color="C0", linewidth=1.5, label="predictive mean")
    if y_true is not None:
        truth = _column(y_true, "y_true", len(order))[order]
        ax.plot(x, truth, color="0.2", linestyle="--", linewidth=1.0, label="true function")
    if x_train is not None:
        ax.scatter(x_data, y_data, s=6, color="C3", alpha=0.6, linewidths=0, label="training data", zorder=3)
    ax.set_xlim(x[0], x[-1])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    if title is not None:
        ax.set_title(title)
    return figure
