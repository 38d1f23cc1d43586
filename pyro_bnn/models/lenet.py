"""The implicit-BNN paper's LeNet (conv 6, conv 16, conv 120 with a 4x4 kernel, fc 64), optionally widened."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.models.base import SequentialNet, dropout_probability, hidden_activation, width_argument
from pyro_bnn.models.registry import ModelArguments, register_model
from pyro_bnn.models.shapes import SpatialStage, as_image_shape, final_spatial_size
from pyro_bnn.nn import ActivationLike

_CONV5: SpatialStage = (5, 1, 0)
_CONV4: SpatialStage = (4, 1, 0)
_POOL2: SpatialStage = (2, 2, 0)


def _parse_width(args: list[str]) -> dict[str, object]:
    """``["2"]`` -> ``{"width": 2}``, the argument of ``lenet:M``."""
    refusal = f"lenet takes one width multiplier, a positive int (lenet:2), got {','.join(args)!r}"
    if len(args) != 1:
        raise ValueError(refusal)
    return {"width": width_argument(args[0], "lenet's width multiplier", refusal)}


@register_model("lenet", arguments=ModelArguments("M", _parse_width))
class LeNet(SequentialNet):
    """``Conv(C, 6M, 5), act, MaxPool 2, Conv(6M, 16M, 5), act, MaxPool 2, Conv(16M, 120M, 4), act, Flatten,
    Linear(120M, 64M), act, Linear(64M, num_classes)`` with width multiplier ``M`` (1 by default).

    The model string ``"lenet:2"`` gives ``width=2``. The implicit-BNN paper grows LeNet's *parameter count* by
    1x, 4x, 16x and 64x at a fixed depth; since all but the first and last layers grow with ``M**2``, those are
    ``M = 1, 2, 4, 8`` (41.8 K, 165 K, 657 K and 2.6 M parameters for 28x28 inputs).

    28 -> 24 -> 12 -> 8 -> 4 -> 1, so the flattened features are 120 for MNIST (41,806 parameters); images
    need sides of at least 28. Larger images are accepted and the first linear layer takes ``120 H' W'``
    features (the reference code only runs 28x28). Dropout, when used, follows each activation. Layer names:
    ``conv1``, ``act1``, ``pool1``, ``conv2``, ``act2``, ``pool2``, ``conv3``, ``act3``, ``flatten``, ``fc1``,
    ``act4``, ``out`` (plus ``drop{i}``).

    Args:
        input_shape: ``(channels, height, width)``, e.g. ``(1, 28, 28)``.
        num_classes: Output size.
        activation: Hidden activation; None means ReLU.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.
        width: Multiplier of every hidden layer's channels or units (a positive int).

    Raises:
        ValueError: If ``input_shape`` is not 3-D or too small for the kernels, or another argument is
            invalid.
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
        width: int = 1,
    ) -> None:
        width = positive_int(width, "width")
        shape = as_image_shape(input_shape, "lenet")
        num_classes = positive_int(num_classes, "num_classes")
        dropout = dropout_probability(dropout)
        if activation is None:
            activation = self.default_activation
        side_h, side_w = final_spatial_size(shape, [_CONV5, _POOL2, _CONV5, _POOL2, _CONV4], "lenet")

        layers: list[tuple[str, nn.Module]] = [
            ("conv1", nn.Conv2d(shape[0], 6 * width, 5)),
            *hidden_activation(1, activation, dropout),
            ("pool1", nn.MaxPool2d(2)),
            ("conv2", nn.Conv2d(6 * width, 16 * width, 5)),
            *hidden_activation(2, activation, dropout),
            ("pool2", nn.MaxPool2d(2)),
            ("conv3", nn.Conv2d(16 * width, 120 * width, 4)),
            *hidden_activation(3, activation, dropout),
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(120 * width * side_h * side_w, 64 * width)),
            *hidden_activation(4, activation, dropout),
            ("out", nn.Linear(64 * width, num_classes)),
        ]
        super().__init__(layers, input_shape=shape, num_classes=num_classes)
