"""How raw pixel values become network inputs: the ``Normalization`` enum and the one function applying it."""

from __future__ import annotations

from enum import Enum

import torch

from pyro_bnn.data.images import MNIST_MEAN_STD

BBB_DIVISOR = 126.0
"""Blundell et al. (2015, Bayes by Backprop) divide MNIST's 0..255 pixels by 126: inputs in [0, ~2.02]."""

_EIGHT_BIT_MAX = 255.0


class Normalization(str, Enum):
    """Input scalings for image data sets with pixels ``0 .. max_value`` (255 for MNIST, 16 for digits).

    2-D synthetic sets (moons, circles) are not images and ignore it.
    """

    UNIT = "unit"
    """``x / max_value``: inputs in [0, 1] (the default); ``x / 255`` for MNIST, ``x / 16`` for digits."""

    STANDARD = "standard"
    """``(x / max_value - mean) / std`` with each data set's own mean and std per channel on the [0, 1] scale:
    the usual MNIST 0.1307 / 0.3081 and Fashion-MNIST 0.2860 / 0.3530 (one grey channel), CIFAR's published
    (R, G, B) constants (``pyro_bnn.data.cifar.CIFAR_MEAN_STD``); for digits, computed from its training split."""

    BBB = "bbb"
    """``x / 126`` on the 0..255 scale, the Bayes-by-Backprop paper's choice. Data sets on another scale are
    mapped onto 0..255 first, i.e. ``x / (max_value * 126 / 255)``."""

    MNIST_STANDARD = "mnist-standard"
    """``(x / max_value - 0.1307) / 0.3081`` on every data set (every channel): MNIST's mean and sd, which some
    papers' code applies to Fashion-MNIST too (the One Simple Trick authors' ``Normalize([0.1307], [0.3081])``).
    On MNIST it equals ``STANDARD``."""

    @classmethod
    def _missing_(cls, value: object) -> Normalization:
        if isinstance(value, str):
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        raise ValueError(f"unknown normalization {value!r}; expected one of {', '.join(repr(m.value) for m in cls)}")


def normalize_pixels(
    pixels: torch.Tensor,
    normalization: Normalization | str,
    *,
    max_value: float,
    mean: float | tuple[float, ...] | None = None,
    std: float | tuple[float, ...] | None = None,
) -> torch.Tensor:
    """Scales raw pixel values to network inputs.

    Args:
        pixels: ``(N, C, H, W)`` raw pixel values, any real or integer dtype, in ``0 .. max_value``.
        normalization: The scaling (a ``Normalization`` or its string value).
        max_value: The brightest possible pixel value (255 or 16).
        mean: Mean pixel on the [0, 1] scale, one number or one per channel (C of them); required for
            ``STANDARD``, ignored by the others (``MNIST_STANDARD`` uses MNIST's 0.1307).
        std: Pixel standard deviation on the [0, 1] scale, one number or one per channel; required (and positive)
            for ``STANDARD``, ignored by the others (``MNIST_STANDARD`` uses MNIST's 0.3081).

    Returns:
        ``(N, C, H, W)`` float32 inputs.

    Raises:
        ValueError: If ``normalization`` is unknown, ``max_value`` is not positive, or ``STANDARD`` is asked
            for without a mean and a positive std.
    """
    normalization = Normalization(normalization)
    if not max_value > 0:
        raise ValueError(f"max_value must be positive, got {max_value!r}")
    pixels = pixels.to(torch.float32)
    if normalization is Normalization.UNIT:
        return pixels / max_value
    if normalization is Normalization.BBB:
        return pixels / (max_value * BBB_DIVISOR / _EIGHT_BIT_MAX)
    if normalization is Normalization.MNIST_STANDARD:
        mnist_mean, mnist_std = MNIST_MEAN_STD
        return (pixels / max_value - mnist_mean) / mnist_std
    if mean is None or std is None or not all(v > 0 for v in (std if isinstance(std, tuple) else (std,))):
        raise ValueError(f"standard normalization needs a mean and a positive std, got mean={mean!r}, std={std!r}")
    if isinstance(mean, tuple) or isinstance(std, tuple):
        channels = pixels.shape[1]
        shape = (1, channels, *([1] * (pixels.dim() - 2)))
        stats = []
        for name, value in (("mean", mean), ("std", std)):
            values = value if isinstance(value, tuple) else (value,) * channels
            if len(values) != channels:
                raise ValueError(f"{name} has {len(values)} values for {channels} channels: {value!r}")
            stats.append(torch.tensor(values, dtype=torch.float32).view(shape))
        mean, std = stats
    return (pixels / max_value - mean) / std
