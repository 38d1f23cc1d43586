"""The priors paper's MNIST CNN: two 5x5 conv + max-pool stages, a 64-unit dense layer, all tanh."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.models.base import SequentialNet, dropout_probability, hidden_activation
from pyro_bnn.models.registry import register_model
from pyro_bnn.models.shapes import SpatialStage, as_image_shape, final_spatial_size
from pyro_bnn.nn import ActivationLike

_CONV5: SpatialStage = (5, 1, 0)
_POOL2: SpatialStage = (2, 2, 0)


@register_model("tanh-cnn")
class TanhCNN(SequentialNet):
    """``Conv(C, 32, 5), act, MaxPool 2, Conv(32, 32, 5), act, MaxPool 2, Flatten, Dense 64, act, Dense``.

    Valid padding: 28 -> 24 -> 12 -> 8 -> 4, so 32 * 4 * 4 = 512 features for MNIST and 59,946 parameters;
    images need sides of at least 16. The paper's softmax is left to the likelihood; this net returns logits.
    Dropout, when used, follows the activation (before the pooling). Layer names: ``conv1``, ``act1``,
    ``pool1``, ``conv2``, ``act2``, ``pool2``, ``flatten``, ``fc1``, ``act3``, ``out`` (plus ``drop{i}``).

    Args:
        input_shape: ``(channels, height, width)``, e.g. ``(1, 28, 28)``.
        num_classes: Output size.
        activation: Hidden activation; None means tanh.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.

    Raises:
        ValueError: If ``input_shape`` is not 3-D or too small for the kernels, or another argument is
            invalid.
    """

    default_activation = "tanh"
    """What ``activation=None`` builds (:func:`~pyro_bnn.models.default_activation`)."""

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
    ) -> None:
        shape = as_image_shape(input_shape, "tanh-cnn")
        num_classes = positive_int(num_classes, "num_classes")
        dropout = dropout_probability(dropout)
        if activation is None:
            activation = self.default_activation
        height, width = final_spatial_size(shape, [_CONV5, _POOL2, _CONV5, _POOL2], "tanh-cnn")

        layers: list[tuple[str, nn.Module]] = [
            ("conv1", nn.Conv2d(shape[0], 32, 5)),
            *hidden_activation(1, activation, dropout),
            ("pool1", nn.MaxPool2d(2)),
            ("conv2", nn.Conv2d(32, 32, 5)),
            *hidden_activation(2, activation, dropout),
            ("pool2", nn.MaxPool2d(2)),
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(32 * height * width, 64)),
            *hidden_activation(3, activation, dropout),
            ("out", nn.Linear(64, num_classes)),
        ]
        super().__init__(layers, input_shape=shape, num_classes=num_classes)
