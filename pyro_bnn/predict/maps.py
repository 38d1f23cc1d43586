"""Predictive maps of 2-D classifiers: the class probability and the uncertainty over a grid covering the data.

:func:`predictive_map` predicts every point of a regular grid with any parameter source (a guide, samples, an
ensemble) and keeps, per point, the posterior-mean probability of one class, the standard deviation of that
probability over the posterior samples, and the mutual information between the label and the weights;
:func:`pyro_bnn.plots.plot_predictive_map` draws them with the training points on top.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.evaluation import entropy_decomposition
from pyro_bnn.predict.predictive import predict

Bounds = tuple[tuple[float, float], tuple[float, float]]
"""``((x_low, x_high), (y_low, y_high))`` of a map."""


@dataclass(frozen=True, eq=False)
class PredictiveMap:
    """A classifier's predictive over a ``H x W`` grid of 2-D inputs.

    Attributes:
        x: ``(W,)`` grid coordinates along the first input.
        y: ``(H,)`` grid coordinates along the second input.
        probability: ``(H, W)`` posterior-mean probability of :attr:`positive_class`; row i is ``y[i]``.
        sd: ``(H, W)`` standard deviation of that probability over the posterior samples (0 for a point network).
        mutual_information: ``(H, W)`` mutual information between the label and the weights, in nats.
        positive_class: The class whose probability is mapped.
        num_samples: Posterior samples behind each point.
    """

    x: torch.Tensor
    y: torch.Tensor
    probability: torch.Tensor
    sd: torch.Tensor
    mutual_information: torch.Tensor
    positive_class: int
    num_samples: int


def map_bounds(points: torch.Tensor, margin: float = 0.5) -> Bounds:
    """The box around ``points (N, 2)``, widened by ``margin`` on every side."""
    if points.dim() != 2 or points.shape[1] != 2 or points.shape[0] == 0:
        raise ValueError(f"points must be (N, 2) with N >= 1, got shape {tuple(points.shape)}")
    low, high = points.min(0).values.tolist(), points.max(0).values.tolist()
    return (low[0] - margin, high[0] + margin), (low[1] - margin, high[1] + margin)


def _check_bounds(bounds: Bounds) -> Bounds:
    try:
        (x0, x1), (y0, y1) = bounds
        values = [float(v) for v in (x0, x1, y0, y1)]
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be ((x_low, x_high), (y_low, y_high)), got {bounds!r}") from None
    if not (values[0] < values[1] and values[2] < values[3]):
        raise ValueError(f"bounds must have low < high on both axes, got {bounds!r}")
    return (values[0], values[1]), (values[2], values[3])


def predictive_map(
    bnn: BNN,
    source,
    bounds: Bounds,
    *,
    resolution: int = 100,
    num_samples: int | None = None,
    positive_class: int = 1,
) -> PredictiveMap:
    """Predicts a ``resolution x resolution`` grid over ``bounds`` and maps probability and uncertainty.

    Args:
        bnn: A classifier of 2-D inputs.
        source: Its parameter source (what :func:`~pyro_bnn.predict.predict` takes).
        bounds: ``((x_low, x_high), (y_low, y_high))``, e.g. :func:`map_bounds` of the training inputs.
        resolution: Grid points per axis (>= 2).
        num_samples: Posterior samples (None: ``predict``'s default for the source).
        positive_class: The class whose probability is mapped.

    Returns:
        The map, on the CPU.

    Raises:
        ValueError: bad bounds, resolution or class; a model that is not a classifier of 2-D inputs.
    """
    (x0, x1), (y0, y1) = _check_bounds(bounds)
    if isinstance(resolution, bool) or not isinstance(resolution, numbers.Integral) or resolution < 2:
        raise ValueError(f"resolution must be an int >= 2, got {resolution!r}")
    xs = torch.linspace(x0, x1, int(resolution))
    ys = torch.linspace(y0, y1, int(resolution))
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")  # (H, W) each
    inputs = torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=1)  # (H W, 2)
    prediction = predict(bnn, source, inputs, num_samples=num_samples)
    if not prediction.is_classification:
        raise ValueError("a predictive map needs a classifier; this model predicts regression means")
    probs = prediction.probs.detach().cpu()  # (S, H W, C)
    classes = probs.shape[-1]
    if isinstance(positive_class, bool) or not isinstance(positive_class, numbers.Integral):
        raise ValueError(f"positive_class must be an int in [0, {classes}), got {positive_class!r}")
    if not 0 <= positive_class < classes:
        raise ValueError(f"positive_class must be an int in [0, {classes}), got {positive_class!r}")
    shape = grid_x.shape
    positive = probs[..., positive_class]  # (S, H W)
    return PredictiveMap(
        x=xs,
        y=ys,
        probability=positive.mean(0).reshape(shape),
        sd=positive.std(0, unbiased=False).reshape(shape),
        mutual_information=entropy_decomposition(probs).epistemic.reshape(shape),
        positive_class=int(positive_class),
        num_samples=probs.shape[0],
    )


__all__ = ["Bounds", "PredictiveMap", "map_bounds", "predictive_map"]
