"""The One Simple Trick paper's CONV net: two strided convolutions, no pooling, one linear layer."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.models.base import SequentialNet, dropout_probability, hidden_activation
from pyro_bnn.models.registry import register_model
from pyro_bnn.models.shapes import SpatialStage, as_image_shape, final_spatial_size
from pyro_bnn.nn import ActivationLike

# Kernel 5, stride 2, padding 2 maps a side of n to ceil(n / 2) for every n >= 1.
_STRIDED_CONV: SpatialStage = (5, 2, 2)


@register_model("conv")
class ConvNet(SequentialNet):
    """``Conv(C, 128, 5, s2, p2), act, Conv(128, 256, 5, s2, p2), act, Flatten, Linear(256 H' W', K)``.

    ``H' = ceil(ceil(H / 2) / 2)`` (28 -> 7), likewise ``W'``; 948,234 parameters for MNIST. The reference
    code sizes the linear layer as ``256 (H / 4)^2``, which agrees for sides divisible by 4; here it is
    computed exactly, so any image size works. Layer names: ``conv1``, ``act1``, ``drop1``, ``conv2``,
    ``act2``, ``drop2``, ``flatten``, ``out`` (dropout only if > 0).

    Args:
        input_shape: ``(channels, height, width)``, e.g. ``(1, 28, 28)``.
        num_classes: Output size.
        activation: Hidden activation; None means ReLU.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.
        channels: Output channels of the two convolutions.

    Raises:
        ValueError: If ``input_shape`` is not 3-D, or another argument is invalid.
    """

    default_activation = "relu"
    """What ``activation=None`` builds (:func:`~pyro_bnn.models.default_activation`)."""

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
        channels: tuple[int, int] = (128, 256),
    ) -> None:
        shape = as_image_shape(input_shape, "conv")
        num_classes = positive_int(num_classes, "num_classes")
        dropout = dropout_probability(dropout)
        if isinstance(channels, (str, bytes)) or not isinstance(channels, Sequence) or len(channels) != 2:
            raise ValueError(f"channels must be a sequence of two positive ints, got {channels!r}")
        first, second = (positive_int(c, "every entry of channels") for c in channels)
        if activation is None:
            activation = self.default_activation
        height, width = final_spatial_size(shape, [_STRIDED_CONV] * 2, "conv")

        kernel, stride, padding = _STRIDED_CONV
        layers: list[tuple[str, nn.Module]] = [
            ("conv1", nn.Conv2d(shape[0], first, kernel, stride=stride, padding=padding)),
            *hidden_activation(1, activation, dropout),
            ("conv2", nn.Conv2d(first, second, kernel, stride=stride, padding=padding)),
            *hidden_activation(2, activation, dropout),
            ("flatten", nn.Flatten()),
            ("out", nn.Linear(second * height * width, num_classes)),
        ]
        super().__init__(layers, input_shape=shape, num_classes=num_classes)
