"""Input-shape validation: per-example shapes, conv/pool size arithmetic and the pre-training check."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pyro_bnn.checks import positive_ints

SpatialStage = tuple[int, int, int]
"""A conv or pooling stage as ``(kernel, stride, padding)``; PyTorch's floor arithmetic, dilation 1."""


def as_input_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    """Normalises a per-example input shape to a tuple of positive ints.

    Args:
        input_shape: Shape of one example, without the batch dimension, e.g. ``(1, 28, 28)`` or ``(2,)``.

    Returns:
        The shape as a tuple of Python ints.

    Raises:
        ValueError: If ``input_shape`` is not a non-empty sequence of positive ints.
    """
    error = ValueError(
        "input_shape must be a non-empty tuple of positive ints giving one example's shape without the batch "
        f"dimension, e.g. (1, 28, 28) or (2,); got {input_shape!r}"
    )
    try:
        shape = positive_ints(input_shape, "input_shape")
    except ValueError:
        raise error from None
    if not shape:
        raise error
    return shape


def as_image_shape(input_shape: Sequence[int], model: str) -> tuple[int, int, int]:
    """Normalises and checks an image shape ``(channels, height, width)``.

    Args:
        input_shape: Shape of one example, without the batch dimension.
        model: The model's name, for the error message.

    Returns:
        ``(channels, height, width)`` as ints.

    Raises:
        ValueError: If the shape is invalid or not 3-D.
    """
    shape = as_input_shape(input_shape)
    if len(shape) != 3:
        raise ValueError(
            f"{model} expects an image input_shape (channels, height, width), e.g. (1, 28, 28); "
            f"got {shape} ({len(shape)}-D)"
        )
    return shape  # type: ignore[return-value]


def stage_output_size(size: int, stage: SpatialStage) -> int:
    """Returns the spatial size after one conv/pool stage; 0 or less means the input was too small.

    Args:
        size: Input height or width.
        stage: ``(kernel, stride, padding)``.

    Returns:
        ``floor((size + 2 * padding - kernel) / stride) + 1``.
    """
    kernel, stride, padding = stage
    return (size + 2 * padding - kernel) // stride + 1


def spatial_sizes(size: int, stages: Sequence[SpatialStage]) -> list[int]:
    """Returns the height (or width) before and after every stage; any entry below 1 means it does not fit."""
    sizes = [size]
    for stage in stages:
        sizes.append(stage_output_size(sizes[-1], stage))
    return sizes


def minimum_size(stages: Sequence[SpatialStage]) -> int:
    """Returns the smallest height (or width) that leaves every stage with an output of at least 1."""
    size = 1
    while min(spatial_sizes(size, stages)) < 1:
        size += 1
    return size


def final_spatial_size(
    image_shape: tuple[int, int, int], stages: Sequence[SpatialStage], model: str
) -> tuple[int, int]:
    """Returns the ``(height, width)`` after all stages, raising if the image is too small for them.

    Args:
        image_shape: ``(channels, height, width)``.
        stages: The model's conv and pooling stages in order.
        model: The model's name, for the error message.

    Returns:
        Final ``(height, width)``, both at least 1.

    Raises:
        ValueError: If either side shrinks below 1; the message names the shape and the minimum size.
    """
    finals = []
    for side in image_shape[1:]:
        sizes = spatial_sizes(side, stages)
        if min(sizes) < 1:
            smallest = minimum_size(stages)
            trace = " -> ".join(str(s) for s in spatial_sizes(smallest, stages))
            raise ValueError(
                f"{model} needs images of at least {smallest}x{smallest} (sizes {trace} through its conv and "
                f"pooling stages); got input_shape {image_shape}"
            )
        finals.append(sizes[-1])
    return finals[0], finals[1]


def check_input_shape(net: nn.Module, x: torch.Tensor) -> None:
    """Checks that a batch matches the net's per-example ``input_shape``.

    The Bayesian wrapper calls this once before training, so a mis-shaped dataset fails with a readable
    message instead of a matmul error deep inside a vmapped forward pass. Nets without an ``input_shape``
    attribute (plain user modules) are not checked.

    Args:
        net: A network, normally from ``build_model``, with ``input_shape`` (a tuple without batch dimension).
        x: A batch of inputs, shape ``(batch, *net.input_shape)``.

    Raises:
        ValueError: If ``x.shape[1:] != net.input_shape``; names the found and expected per-example shapes.
    """
    expected = getattr(net, "input_shape", None)
    if expected is None:
        return
    expected = tuple(expected)
    found = tuple(x.shape[1:])
    if found == expected:
        return
    hint = ""
    if tuple(x.shape) == expected:
        hint = "; it looks like a single example without the batch dimension"
    raise ValueError(
        f"{type(net).__name__} expects inputs of shape (batch, {', '.join(map(str, expected))}), i.e. "
        f"per-example shape {expected}; found per-example shape {found} (x.shape = {tuple(x.shape)}){hint}"
    )


def check_output_batch(x: torch.Tensor, output: torch.Tensor) -> None:
    """Checks that the network's output on inputs ``(N, *input_shape)`` is ``(N, ...)``, with at least two axes.

    The model's data plate has ``x.shape[0]`` examples and the likelihoods read outputs as ``(..., N, outputs)``. A
    single example without the batch axis (``x`` of shape ``(D,)``) passes :func:`check_input_shape` for a net
    without ``input_shape``, since ``nn.Linear`` takes 1-D inputs; its output ``(C,)`` was read as C examples
    (``predict``'s probabilities ``(S, C)``) or failed deep inside laplace-torch. Outputs ``(N,)`` without an
    outputs axis failed in training (an IndexError) and predicted means ``(S, N)``.

    Raises:
        ValueError: one line naming both shapes and the expected ``(N, ...)``.
    """
    n = x.shape[0] if x.dim() else None
    if output.dim() < 2 or output.shape[0] != n:
        raise ValueError(
            f"inputs of shape {tuple(x.shape)} give network outputs of shape {tuple(output.shape)}, not "
            f"(N, outputs) with N = {n}, the inputs' first axis: pass a batch of inputs (N, *input_shape) (a single "
            "example x as x.unsqueeze(0)) to a network whose outputs are (N, outputs) (one output: (N, 1))"
        )
