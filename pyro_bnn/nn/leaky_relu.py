"""Leaky ReLU with any finite slope, including the negative slopes of the One Simple Trick paper."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def validate_slope(slope: float) -> float:
    """Returns ``slope`` as a float, raising if it is not a finite real number.

    Args:
        slope: The negative-side slope of a leaky ReLU.

    Returns:
        The slope as a Python float.

    Raises:
        ValueError: If ``slope`` is not a real number, or is NaN or infinite.
    """
    # bool is an int subclass; ``leaky:True`` is a typo, not a slope of 1.
    if isinstance(slope, bool):
        raise ValueError(f"leaky ReLU slope must be a finite real number, got {slope!r}")
    try:
        value = float(slope)
    except (TypeError, ValueError):
        raise ValueError(f"leaky ReLU slope must be a finite real number, got {slope!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"leaky ReLU slope must be finite, got {slope!r}")
    return value


class LeakyReLU(nn.Module):
    """Elementwise ``f(x) = x`` for ``x >= 0`` and ``f(x) = slope * x`` for ``x < 0``.

    Unlike the usual reading of leaky ReLU, ``slope`` may be any finite number: ``-1`` gives ``|x|``, ``0``
    ReLU, ``1`` the identity, and the One Simple Trick paper's best calibrated nets use ``-0.5``. The slope is
    a fixed hyperparameter (a Python float, not a parameter or buffer), so a prior that walks
    ``named_parameters`` never makes it random.

    At ``x = 0`` the gradient is ``slope`` (PyTorch's ``leaky_relu`` convention), so slope 0 matches
    ``nn.ReLU`` exactly, gradient included; for slope -1 this differs from ``torch.abs``, whose gradient at 0
    is 0.

    Args:
        slope: Multiplier for negative inputs; any finite float.

    Raises:
        ValueError: If ``slope`` is NaN, infinite or not a number.
    """

    def __init__(self, slope: float) -> None:
        super().__init__()
        self.slope = validate_slope(slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies the activation.

        Args:
            x: Input of any shape ``(*)``.

        Returns:
            Tensor of shape ``(*)``, same dtype and device as ``x``.
        """
        # F.leaky_relu accepts negative and >1 slopes, is out of place, and has a vmap batching rule.
        return F.leaky_relu(x, negative_slope=self.slope)

    def extra_repr(self) -> str:
        return f"slope={self.slope!r}"
