"""Shared building blocks of the zoo: the sequential net base class, hidden-layer blocks, argument checks."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

from pyro_bnn.checks import positive_int, positive_ints  # noqa: F401 - also importable from here, as before
from pyro_bnn.nn import ActivationLike, make_activation

MAX_WIDTH = 2**31 - 1
"""The largest number a model string takes (a hidden width, a width multiplier, a WRN depth or widen factor):
2**31 - 1, the largest int32. A larger one made torch's layer constructors fail with a C++ stack trace."""


_WIDTH = re.compile(r"[1-9][0-9]*")
"""A number of a model string: ASCII digits, no leading zero (``str.isdecimal`` also took ``'١٦'``, Arabic-Indic
16, and ``'016'``, which ``lenet``'s own pattern refused)."""


def width_argument(arg: str, name: str, refusal: str) -> int:
    """The number ``arg`` of a model string (a width, a width multiplier, a WRN depth or widen factor) as an int, by
    one rule for every model: a positive int in ASCII digits without a leading zero, at most :data:`MAX_WIDTH`.

    Raises:
        ValueError: the caller's one-line ``refusal`` when ``arg`` is no such number, with the rule added when it
            reads as a positive number otherwise (``'016'``, ``'١٦'``); :func:`bounded_width`'s when too large.
    """
    if _WIDTH.fullmatch(arg):
        return bounded_width(arg, name)
    if arg.isdecimal() and any(unicodedata.decimal(c) for c in arg):
        refusal += " (ASCII digits without a leading zero)"
    raise ValueError(refusal)


def bounded_width(arg: str, name: str) -> int:
    """The decimal string ``arg`` (checked to be one by the caller) as an int, if at most :data:`MAX_WIDTH`;
    ``"{name} must be at most 2147483647 (2**31 - 1), got '99999999999'"`` otherwise (no huge int is made)."""
    digits = arg.lstrip("0") or "0"
    if len(digits) > len(str(MAX_WIDTH)) or int(digits) > MAX_WIDTH:
        raise ValueError(f"{name} must be at most {MAX_WIDTH} (2**31 - 1), got {arg!r}")
    return int(digits)


def dropout_probability(dropout: float) -> float:
    """Returns ``dropout`` as a float if it lies in ``[0, 1)``, else raises ``ValueError``.

    1 is rejected although ``nn.Dropout`` accepts it: it zeroes every hidden unit, so the net's output would
    no longer depend on its input.
    """
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not math.isfinite(dropout):
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")
    return float(dropout)


def hidden_activation(index: int, activation: ActivationLike, dropout: float) -> list[tuple[str, nn.Module]]:
    """Returns the named layers after hidden layer ``index``: its activation and, if ``dropout > 0``, dropout.

    Args:
        index: 1-based position of the hidden layer, used in the names ``act{index}`` and ``drop{index}``.
        activation: Anything ``make_activation`` accepts; a fresh module is built for this layer.
        dropout: Dropout probability; 0 adds no module, so the deterministic nets carry no no-op layers.

    Returns:
        ``[("act{index}", activation)]`` plus ``("drop{index}", nn.Dropout(dropout))`` when ``dropout > 0``.
    """
    layers: list[tuple[str, nn.Module]] = [(f"act{index}", make_activation(activation))]
    if dropout > 0:
        layers.append((f"drop{index}", nn.Dropout(dropout)))
    return layers


class SequentialNet(nn.Sequential):
    """An ``nn.Sequential`` with named layers that records its per-example input shape and output size.

    Layer names (``fc1``, ``conv2``, ``act1``, ``out``, ...) make parameter names such as ``out.weight`` that
    a prior's ``select(name, module)`` predicate can match. The forward pass is a pure function of parameters
    and input, so ``torch.func.functional_call`` and ``torch.vmap`` over stacked parameters apply directly.

    Args:
        layers: ``(name, module)`` pairs in order.
        input_shape: Shape of one example without the batch dimension.
        num_classes: Size of the last dimension of the output (classes, or outputs for regression).

    Attributes:
        input_shape: Per-example input shape, a tuple of ints.
        num_classes: Output size.
    """

    def __init__(
        self, layers: Sequence[tuple[str, nn.Module]], *, input_shape: tuple[int, ...], num_classes: int
    ) -> None:
        super().__init__(OrderedDict(layers))
        self.input_shape = input_shape
        self.num_classes = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Runs the layers in order.

        Args:
            x: Inputs, shape ``(batch, *input_shape)``.

        Returns:
            Logits (or regression outputs), shape ``(batch, num_classes)``.
        """
        return super().forward(x)

    def __getitem__(self, index: int | slice) -> nn.Module:
        """Returns one layer, or a slice as a plain ``nn.Sequential`` (``net[:-1]`` is the feature extractor).

        ``nn.Sequential`` rebuilds slices with ``self.__class__``, which the zoo's constructors cannot take.
        """
        if isinstance(index, slice):
            return nn.Sequential(OrderedDict(list(self._modules.items())[index]))
        return super().__getitem__(index)

    def extra_repr(self) -> str:
        return f"input_shape={self.input_shape}, num_classes={self.num_classes}"
