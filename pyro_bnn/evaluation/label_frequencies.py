"""Class probabilities as frequencies of sampled labels (the "One Simple Trick" predictive).

Instead of averaging the sampled probability vectors, draw one label from each posterior sample and use the
per-class frequency of the draws as the predictive. The result is an ordinary ``(N, C)`` probability tensor,
so every metric in ``pyro_bnn.evaluation`` accepts it.
"""

from __future__ import annotations

import torch

from pyro_bnn.checks import positive_int
from pyro_bnn.evaluation._validation import check_probs, check_sampled_labels


def label_frequencies_from_samples(
    sampled_labels: torch.Tensor, num_classes: int, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Per-class frequency of labels already drawn, one per posterior sample.

    Args:
        sampled_labels: ``(num_samples, N)`` integer labels in ``[0, num_classes)``.
        num_classes: number of classes C.
        dtype: floating dtype of the result; ``None`` uses torch's default dtype.

    Returns:
        ``(N, C)`` frequencies on ``sampled_labels``' device; each row sums to 1.

    Raises:
        ValueError: ``sampled_labels`` is not a non-empty rank-2 integer tensor with values in
            ``[0, num_classes)``, ``num_classes`` is not an int >= 1, or ``dtype`` is not floating.
    """
    num_classes = positive_int(num_classes, "num_classes")
    sampled_labels = check_sampled_labels(sampled_labels, num_classes=num_classes)
    if dtype is None:
        dtype = torch.get_default_dtype()
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype for frequencies; got {dtype}")

    num_samples, num_points = sampled_labels.shape
    counts = torch.zeros(num_points, num_classes, dtype=torch.int64, device=sampled_labels.device)
    # scatter_add over an (N, S) index keeps memory at O(N S), where a one-hot tensor would need O(S N C).
    counts.scatter_add_(1, sampled_labels.T, torch.ones_like(sampled_labels.T))
    return counts.to(dtype) / num_samples


def label_frequencies(probs: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draws one label per posterior sample and returns the per-class frequency of the draws.

    For every sample s and data point n a label is drawn from ``Categorical(probs[s, n])``; as the number of
    samples grows the frequencies converge to the sample-mean probabilities ``probs.mean(0)``.

    Args:
        probs: ``(num_samples, N, C)`` posterior samples of class probabilities.
        generator: random generator for the draws, on ``probs``' device; ``None`` uses torch's global one.

    Returns:
        ``(N, C)`` frequencies in ``probs``' dtype (float32 for half precision) on its device.

    Raises:
        ValueError: ``probs`` fails validation (see ``pyro_bnn.evaluation``) or is not rank 3.
    """
    probs = check_probs(probs, ranks=(3,))
    num_samples, num_points, num_classes = probs.shape
    # multinomial renormalises each row, so rows that sum to 1 only within the validation tolerance are fine,
    # and a class of probability exactly 0 is never drawn.
    draws = torch.multinomial(probs.reshape(-1, num_classes), num_samples=1, generator=generator)
    sampled_labels = draws.view(num_samples, num_points)
    return label_frequencies_from_samples(sampled_labels, num_classes, dtype=probs.dtype)
