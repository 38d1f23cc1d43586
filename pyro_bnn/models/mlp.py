"""Fully connected nets: a generic ``MLP`` and the zoo's named MLPs (``3fc``, ``bbb-mlp``, ``tanh-small``).

Every MLP flattens its input, so any ``input_shape`` works. Layer names: ``flatten``, ``fc1``, ``act1``,
``drop1`` (only if dropout > 0), ..., ``out``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from pyro_bnn.checks import positive_int, positive_ints
from pyro_bnn.models.base import SequentialNet, dropout_probability, hidden_activation, width_argument
from pyro_bnn.models.registry import ModelArguments, register_model
from pyro_bnn.models.shapes import as_input_shape
from pyro_bnn.nn import ActivationLike

DEFAULT_MLP_WIDTHS = (256, 256)
"""Hidden widths of a plain ``"mlp"``: two layers of 256 units."""


def _parse_hidden_widths(args: list[str]) -> dict[str, object]:
    """``["256", "256"]`` -> ``{"hidden_widths": (256, 256)}``, the arguments of ``mlp:W1,W2,...``."""
    widths = [width_argument(arg, "hidden widths", f"hidden widths must be positive ints, got {arg!r}") for arg in args]
    return {"hidden_widths": tuple(widths)}


@register_model("mlp", arguments=ModelArguments("W1,W2,...", _parse_hidden_widths))
class MLP(SequentialNet):
    """Flatten, then ``Linear -> activation [-> Dropout]`` per hidden width, then a linear output layer.

    Registered as ``"mlp"``: the model string ``"mlp:256,256"`` gives ``hidden_widths=(256, 256)`` and a bare
    ``"mlp"`` the default :data:`DEFAULT_MLP_WIDTHS`, two hidden layers of 256. With ``hidden_widths=(256,) * 5``
    it is the implicit-BNN paper's 1-D regression net, and with ``hidden_widths=()`` a linear
    (logistic-regression) model.

    Args:
        input_shape: One example's shape without the batch dimension; flattened to ``prod(input_shape)``.
        num_classes: Output size.
        hidden_widths: Width of each hidden layer, in order (may be empty); default two layers of 256.
        activation: Hidden activation (``pyro_bnn.nn.make_activation``); None means ReLU.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.

    Raises:
        ValueError: If a shape, width or the dropout probability is invalid, or the activation cannot be
            built.
    """

    default_activation = "relu"

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        hidden_widths: Sequence[int] = DEFAULT_MLP_WIDTHS,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
    ) -> None:
        shape = as_input_shape(input_shape)
        num_classes = positive_int(num_classes, "num_classes")
        widths = positive_ints(hidden_widths, "hidden_widths")
        dropout = dropout_probability(dropout)
        if activation is None:
            activation = self.default_activation

        layers: list[tuple[str, nn.Module]] = [("flatten", nn.Flatten())]
        fan_in = math.prod(shape)
        for index, width in enumerate(widths, start=1):
            layers.append((f"fc{index}", nn.Linear(fan_in, width)))
            layers.extend(hidden_activation(index, activation, dropout))
            fan_in = width
        layers.append(("out", nn.Linear(fan_in, num_classes)))
        super().__init__(layers, input_shape=shape, num_classes=num_classes)


@register_model("3fc")
class ThreeFC(MLP):
    """The One Simple Trick paper's 3FC: three hidden layers of ``width`` (1000) units.

    ``Linear(in, 1000), act, Linear(1000, 1000), act, Linear(1000, 1000), act, Linear(1000, num_classes)``;
    2,797,010 parameters for MNIST. The paper compares ReLU with leaky ReLU (best slope -0.5).

    Args:
        input_shape: One example's shape without the batch dimension, e.g. ``(1, 28, 28)``.
        num_classes: Output size.
        activation: Hidden activation; None means ReLU.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.
        width: Units per hidden layer.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
        width: int = 1000,
    ) -> None:
        width = positive_int(width, "width")
        super().__init__(input_shape, num_classes, (width,) * 3, activation=activation, dropout=dropout)


@register_model("bbb-mlp")
class BayesByBackpropMLP(MLP):
    """Blundell et al.'s Bayes-by-Backprop MLP: two hidden layers of ``width`` units (400, 800 or 1200 there).

    ``Linear(in, width), act, Linear(width, width), act, Linear(width, num_classes)``.

    Args:
        input_shape: One example's shape without the batch dimension, e.g. ``(1, 28, 28)``.
        num_classes: Output size.
        activation: Hidden activation; None means ReLU.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.
        width: Units per hidden layer.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
        width: int = 400,
    ) -> None:
        width = positive_int(width, "width")
        super().__init__(input_shape, num_classes, (width,) * 2, activation=activation, dropout=dropout)


@register_model("tanh-small")
class TanhSmallMLP(MLP):
    """The priors paper's toy classifier: ``2 -> 5 -> 5 -> 2`` with tanh hidden layers.

    The paper's softmax output layer is left to the likelihood; this net returns logits.

    Args:
        input_shape: One example's shape without the batch dimension, ``(2,)`` in the paper.
        num_classes: Output size, 2 in the paper.
        activation: Hidden activation; None means tanh.
        dropout: Probability of an ``nn.Dropout`` after each hidden activation; 0 adds none.
        widths: Width of each hidden layer.
    """

    default_activation = "tanh"

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
        widths: Sequence[int] = (5, 5),
    ) -> None:
        widths = positive_ints(widths, "widths")  # named as the caller named it, not as MLP's hidden_widths
        super().__init__(input_shape, num_classes, widths, activation=activation, dropout=dropout)
