"""Which inputs to show: the most confident mistakes and the least confident predictions of a classifier, with the
numbers a gallery prints under each image (:func:`pyro_bnn.plots.plot_gallery` draws them).

Confidence is the posterior-mean probability of the predicted class, ``max_c mean_s p_s(c)``; its spread is the
standard deviation of that class's probability over the posterior samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.evaluation._validation import check_labels, check_probs


@dataclass(frozen=True)
class GalleryEntry:
    """One input of a gallery.

    Attributes:
        index: Its position in the scored inputs.
        label: Its true class.
        predicted: The class of the posterior-mean prediction.
        probability: The posterior-mean probability of ``predicted`` (the confidence).
        spread: The standard deviation of that probability over the posterior samples (0 for one sample).
    """

    index: int
    label: int
    predicted: int
    probability: float
    spread: float


def _entries(samples: torch.Tensor, labels: torch.Tensor, order: torch.Tensor) -> list[GalleryEntry]:
    mean = samples.mean(0)
    predicted = mean.argmax(-1)
    chosen = samples.gather(-1, predicted.view(1, -1, 1).expand(samples.shape[0], -1, 1)).squeeze(-1)  # (S, N)
    spread = chosen.std(0, unbiased=False)
    return [
        GalleryEntry(int(i), int(labels[i]), int(predicted[i]), float(mean[i, predicted[i]]), float(spread[i]))
        for i in order.tolist()
    ]


def _checked(probs: torch.Tensor, labels: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    count = positive_int(count, "count")
    checked = check_probs(probs)
    samples = checked if checked.dim() == 3 else checked.unsqueeze(0)
    labels = check_labels(labels, num_points=samples.shape[1], num_classes=samples.shape[2], device=samples.device)
    return samples, labels


def most_confident_mistakes(probs: torch.Tensor, labels: torch.Tensor, count: int) -> list[GalleryEntry]:
    """The ``count`` wrong predictions with the highest confidence, most confident first (fewer when there are
    fewer mistakes; ties keep input order).

    Args:
        probs: ``(S, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        count: How many to return (>= 1).
    """
    samples, labels = _checked(probs, labels, count)
    mean = samples.mean(0)
    confidence, predicted = mean.max(-1)
    wrong = torch.nonzero(predicted != labels).reshape(-1)
    order = wrong[torch.sort(confidence[wrong], descending=True, stable=True).indices][:count]
    return _entries(samples, labels, order)


def least_confident(probs: torch.Tensor, labels: torch.Tensor, count: int) -> list[GalleryEntry]:
    """The ``count`` predictions with the lowest confidence, least confident first (ties keep input order).

    Args:
        probs: ``(S, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        count: How many to return (>= 1).
    """
    samples, labels = _checked(probs, labels, count)
    confidence = samples.mean(0).max(-1).values
    order = torch.sort(confidence, stable=True).indices[:count]
    return _entries(samples, labels, order)


__all__ = ["GalleryEntry", "least_confident", "most_confident_mistakes"]
