"""Wide residual networks (Zagoruyko & Komodakis, 2016), pre-activation, as in the implicit-BNN paper's WRN-28x10."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.models.base import SequentialNet, dropout_probability, width_argument
from pyro_bnn.models.registry import ModelArguments, register_model
from pyro_bnn.models.shapes import as_image_shape
from pyro_bnn.nn import ActivationLike, make_activation

WRN_BASE_WIDTHS = (16, 32, 64)
"""Output channels of the three groups before widening (the stem has 16)."""


def wrn_blocks_per_group(depth: int) -> int:
    """Returns the number of residual blocks per group of a WRN of ``depth`` layers: ``(depth - 4) / 6``.

    Raises:
        ValueError: If ``depth`` is not an int with ``(depth - 4) % 6 == 0`` and at least 10.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 10 or (depth - 4) % 6 != 0:
        raise ValueError(f"wrn depth must be an int 6 n + 4 >= 10 (10, 16, 22, 28, ...), got {depth!r}")
    return (depth - 4) // 6


def _parse_depth_and_widen(args: list[str]) -> dict[str, object]:
    """``["16", "4"]`` -> ``{"depth": 16, "widen_factor": 4}``, the arguments of ``wrn:DEPTH,WIDEN``."""
    if len(args) != 2:
        raise ValueError(f"wrn takes two arguments, DEPTH and WIDEN, got {len(args)}")
    depth, widen = (
        width_argument(arg, label, f"{label} must be a positive int, got {arg!r}")
        for label, arg in zip(("DEPTH", "WIDEN"), args, strict=True)
    )
    wrn_blocks_per_group(depth)
    return {"depth": depth, "widen_factor": widen}


class WideBasicBlock(nn.Module):
    """A pre-activation residual block: ``BN, act, conv3x3 (stride), BN, act, [dropout], conv3x3`` plus shortcut.

    Where the shape changes (channels or stride) the shortcut is a 1x1 convolution of the pre-activated input
    (``bn1``, ``act1`` applied), as in the reference WRN code; otherwise it is the identity on the raw input.
    Convolutions have no bias (BatchNorm follows them). Submodules: ``bn1``, ``act1``, ``conv1``, ``bn2``,
    ``act2``, ``drop`` (only if dropout > 0), ``conv2``, ``shortcut`` (only for a shape change).

    Args:
        in_channels: Input channels.
        out_channels: Output channels.
        stride: Stride of ``conv1`` and the shortcut.
        activation: Anything ``make_activation`` accepts; one module per use.
        dropout: Probability of the dropout between the two convolutions; 0 adds none.
    """

    def __init__(
        self, in_channels: int, out_channels: int, stride: int, activation: ActivationLike, dropout: float
    ) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.act1 = make_activation(activation)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.act2 = make_activation(activation)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        if in_channels != out_channels or stride != 1:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=stride, padding=0, bias=False)
        else:
            self.shortcut = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.act1(self.bn1(x))
        y = self.act2(self.bn2(self.conv1(pre)))
        if self.drop is not None:
            y = self.drop(y)
        y = self.conv2(y)
        identity = x if self.shortcut is None else self.shortcut(pre)
        return y + identity


@register_model("wrn", arguments=ModelArguments("DEPTH,WIDEN", _parse_depth_and_widen))
class WideResNet(SequentialNet):
    """Pre-activation Wide-ResNet-DEPTH-WIDEN (Zagoruyko & Komodakis); a bare ``wrn`` is WRN-28-10.

    ``conv1`` (3x3, 16 channels), then three groups (``group1`` .. ``group3``) of ``(depth - 4) / 6``
    :class:`WideBasicBlock` s (``block1``, ...) with ``16 k``, ``32 k``, ``64 k`` channels (k = widen factor) and
    strides 1, 2, 2; then ``bn``, ``act``, ``pool`` (global average), ``flatten``, ``out`` =
    ``Linear(64 k, num_classes)``. BatchNorm is deterministic (it has running statistics: call ``eval()`` for
    predictions). ``wrn:16,4`` gives depth 16, widen factor 4 (2,748,890 parameters for 32x32x3, 10 classes);
    ``wrn`` and ``wrn28x10`` give 36,479,194. Any image size works (global pooling); the design is for 32x32.
    Convolutions are initialised He-normal (fan out), as in the reference code.

    Args:
        input_shape: ``(channels, height, width)``, e.g. ``(3, 32, 32)``.
        num_classes: Output size.
        activation: Activation after every BatchNorm; None means ReLU.
        dropout: Probability of an ``nn.Dropout`` between the two convolutions of every block; 0 adds none.
        depth: Number of layers; ``(depth - 4) % 6 == 0``, at least 10.
        widen_factor: Width multiplier k.

    Raises:
        ValueError: If ``input_shape`` is not 3-D, ``depth`` is not of the form ``6 n + 4``, or another
            argument is invalid.
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
        depth: int = 28,
        widen_factor: int = 10,
    ) -> None:
        shape = as_image_shape(input_shape, "wrn")
        num_classes = positive_int(num_classes, "num_classes")
        dropout = dropout_probability(dropout)
        blocks = wrn_blocks_per_group(depth)
        widen_factor = positive_int(widen_factor, "widen_factor")
        if activation is None:
            activation = self.default_activation

        stem_width = 16
        layers: list[tuple[str, nn.Module]] = [
            ("conv1", nn.Conv2d(shape[0], stem_width, 3, stride=1, padding=1, bias=False))
        ]
        in_channels = stem_width
        for group, (base, stride) in enumerate(zip(WRN_BASE_WIDTHS, (1, 2, 2), strict=True), start=1):
            out_channels = base * widen_factor
            group_blocks = []
            for index in range(blocks):
                block = WideBasicBlock(in_channels, out_channels, stride if index == 0 else 1, activation, dropout)
                group_blocks.append((f"block{index + 1}", block))
                in_channels = out_channels
            layers.append((f"group{group}", nn.Sequential(OrderedDict(group_blocks))))
        layers += [
            ("bn", nn.BatchNorm2d(in_channels)),
            ("act", make_activation(activation)),
            ("pool", nn.AdaptiveAvgPool2d(1)),
            ("flatten", nn.Flatten()),
            ("out", nn.Linear(in_channels, num_classes)),
        ]
        super().__init__(layers, input_shape=shape, num_classes=num_classes)
        self.depth = depth
        self.widen_factor = widen_factor
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(self.out.bias)

    def extra_repr(self) -> str:
        return f"depth={self.depth}, widen_factor={self.widen_factor}, {super().extra_repr()}"


@register_model("wrn28x10")
def wrn28x10(
    *, input_shape: Sequence[int], num_classes: int, activation: ActivationLike | None = None, dropout: float = 0.0
) -> WideResNet:
    """Wide-ResNet-28-10, pre-activation, the implicit-BNN paper's CIFAR net (same as ``wrn:28,10``).

    36,479,194 parameters for 32x32x3 inputs and 10 classes. See :class:`WideResNet`.
    """
    return WideResNet(input_shape, num_classes, activation=activation, dropout=dropout, depth=28, widen_factor=10)
