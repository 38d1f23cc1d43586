"""The implicit-BNN paper's LeNet (conv 6, conv 16, conv 120 with a 4x4 kernel, fc 64)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from pyro_bnn.models.base import SequentialNet, dropout_probability, hidden_activation, positive_int
from pyro_bnn.models.registry import register_model
from pyro_bnn.models.shapes import SpatialStage, as_image_shape, final_spatial_size
from pyro_bnn.nn import ActivationLike

_CONV5: SpatialStage = (5, 1, 0)
_CONV4: SpatialStage = (4, 1, 0)
_POOL2: SpatialStage = (2, 2, 0)


@register_model("lenet")
class LeNet(SequentialNet):
    """``Conv(C, 6, 5), act, MaxPool 2, Conv(6, 16, 5), act, MaxPool 2, Conv(16, 120, 4), act, Flatten,
    Linear(120, 64), act, Linear(64, num_classes)``.

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

    Raises:
        ValueError: If ``input_shape`` is not 3-D or too small for the kernels, or another argument is
            invalid.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
    ) -> None:
        shape = as_image_shape(input_shape, "lenet")
        num_classes = positive_int(num_classes, "num_classes")
        dropout = dropout_probability(dropout)
        if activation is None:
            activation = "relu"
        height, width = final_spatial_size(shape, [_CONV5, _POOL2, _CONV5, _POOL2, _CONV4], "lenet")

        layers: list[tuple[str, nn.Module]] = [
            ("conv1", nn.Conv2d(shape[0], 6, 5)),
            *hidden_activation(1, activation, dropout),
            ("pool1", nn.MaxPool2d(2)),
            ("conv2", nn.Conv2d(6, 16, 5)),
            *hidden_activation(2, activation, dropout),
            ("pool2", nn.MaxPool2d(2)),
            ("conv3", nn.Conv2d(16, 120, 4)),
            *hidden_activation(3, activation, dropout),
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(120 * height * width, 64)),
            *hidden_activation(4, activation, dropout),
            ("out", nn.Linear(64, num_classes)),
        ]
        super().__init__(layers, input_shape=shape, num_classes=num_classes)
