"""Dropout in batched runs: each run's masks drawn from its own noise and given to the stacked network.

``nn.Dropout`` draws its masks from torch's global generator inside the forward pass, so R runs in one vectorised
pass would share one stream. In the stacked network every ``nn.Dropout`` becomes a :class:`MaskedDropout` that
multiplies its input by a mask given per run (a value of :meth:`~.stack.RunStack.outputs`), and
:func:`dropout_masks` makes those masks from standard normal draws of each run's own generator: a value is kept, at
``1 / (1 - p)``, where its draw exceeds the p-quantile of N(0, 1), which it does with probability ``1 - p``, as
``nn.Dropout`` keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import torch
from torch import nn
from torch.func import functional_call

from pyro_bnn.nn.modes import DROPOUT_TYPES

DROPOUTS = DROPOUT_TYPES
"""torch's dropout modules; batched runs draw the masks of ``nn.Dropout`` only (the others' masks are per channel or
change the values otherwise)."""


class MaskedDropout(nn.Module):
    """Dropout whose mask is given: ``x * mask``, the mask a buffer that :meth:`~.stack.RunStack.outputs` sets per
    run (:func:`dropout_masks`), of the input's shape with the kept values at ``1 / (1 - p)`` as ``nn.Dropout``
    scales them in training. Its own mask, a scalar 1, switches dropout off (evaluation mode)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)
        self.register_buffer("mask", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask

    def extra_repr(self) -> str:
        return f"p={self.p}"


@dataclass(frozen=True)
class DropoutLayer:
    """One dropout layer of a stacked network: its name, probability and the shape of one example's input to it."""

    name: str
    p: float
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        """Values of one example's mask."""
        return math.prod(self.shape)


def mask_dropout(net: nn.Module, device: torch.device) -> list[str]:
    """Replaces every dropout layer of ``net`` with ``p > 0`` by a :class:`MaskedDropout` in place; returns their
    names (empty: ``net`` has none).

    Raises:
        ValueError: A dropout layer other than ``nn.Dropout`` (one line naming it).
    """
    dropout = [(name, m) for name, m in net.named_modules() if isinstance(m, DROPOUTS) and m.p > 0]
    other = [(name, m) for name, m in dropout if type(m) is not nn.Dropout]
    if other:
        raise ValueError(
            f"run 0's network has {type(other[0][1]).__name__} ({other[0][0]}), whose masks batched runs do not draw "
            "(nn.Dropout only): train it alone"
        )
    for name, module in dropout:
        net.set_submodule(name, MaskedDropout(module.p).to(device))
    return [name for name, _ in dropout]


def find_dropout_layers(
    net: nn.Module, values: Mapping[str, torch.Tensor], x: torch.Tensor
) -> tuple[DropoutLayer, ...]:
    """The :class:`MaskedDropout` layers of ``net``, each with the shape of one example's input to it, found by one
    pass of ``net`` under ``values`` (one run's parameters and buffers) on ``x`` ``(1, *input_shape)``; () without
    dropout (and no pass).

    Raises:
        ValueError: The network calls a dropout layer more than once a pass (one mask per layer cannot serve both).
    """
    modules = [(name, m) for name, m in net.named_modules() if type(m) is MaskedDropout]
    if not modules:
        return ()
    shapes: dict[str, tuple[int, ...]] = {}

    def record(name: str, args: tuple) -> None:  # a pre-hook that returns nothing leaves the input as it is
        if name in shapes:
            raise ValueError(
                f"the network calls its dropout layer {name!r} more than once a pass; batched runs draw one mask per "
                "layer: train it alone"
            )
        shapes[name] = tuple(args[0].shape[1:])

    hooks = [m.register_forward_pre_hook(lambda _, args, name=name: record(name, args)) for name, m in modules]
    try:
        with torch.no_grad():
            functional_call(net, dict(values), (x,))
    finally:
        for hook in hooks:
            hook.remove()
    return tuple(DropoutLayer(name, m.p, shapes[name]) for name, m in modules)


def dropout_masks(eps: torch.Tensor, layers: Sequence[DropoutLayer]) -> dict[str, torch.Tensor]:
    """Dropout masks from standard normal draws: a value is kept (at ``1 / (1 - p)``) where its draw exceeds the
    p-quantile of N(0, 1), which it does with probability 1 - p, as ``nn.Dropout`` keeps it.

    Args:
        eps: ``(R', B, M)``, M the layers' mask sizes summed (one example's).
        layers: The network's dropout layers (:meth:`~.stack.RunStack.dropout_layers`).

    Returns:
        ``{"<layer>.mask": (R', B, *shape)}``, for :meth:`~.stack.RunStack.outputs`' ``per_run`` values.
    """
    masks = {}
    pieces = eps.split([layer.size for layer in layers], dim=-1)
    for layer, piece in zip(layers, pieces, strict=True):
        keep = piece > NormalDist().inv_cdf(layer.p)
        masks[f"{layer.name}.mask"] = (keep.to(eps.dtype) / (1 - layer.p)).reshape(*eps.shape[:2], *layer.shape)
    return masks
