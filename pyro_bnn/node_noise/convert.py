"""Node noise: multiplicative latent noise on the inputs of a network's layers (implicit BNNs, Trinh et al.).

:func:`add_node_noise` gives every selected ``nn.Linear`` a noise vector ``input_noise`` of shape
``(in_features,)`` and every selected convolution one of shape ``(in_channels,)`` (one scalar per input channel,
shared over the spatial positions), and optionally one scalar ``bias_noise`` per layer that multiplies the bias.
The layer then computes

    ``y = layer(x * z) + (b - 1) * bias  =  U (x * z) + b * bias``

(the authors' ``x * z``, the op without bias, then ``+ bias * b``). The noise tensors are registered as parameters
named ``"<layer>.input_noise"`` / ``"<layer>.bias_noise"`` so that a prior selects them like any weight
(:func:`is_node_noise`): wrapped in a :class:`~pyro_bnn.BNN` with :class:`NodeNoisePrior` (or ``NormalPrior(1, s,
select=is_node_noise)``) they become Pyro sample sites, while the weights and biases stay ordinary parameters that
the trainer optimises. At their initial value 1 the network computes exactly what it computed before.

The hooks that apply the noise read the layer's current ``input_noise``/``bias_noise`` attribute, which is what
``torch.func.functional_call`` replaces, so the noise can be a global value ``(C,)``, one value per sample inside a
``vmap``, or one value per row of the batch ``(R, C)`` (how the mixture objective gives every row its own draw).
A convolution also takes one unbatched example ``(C, *spatial)``, as torch's do (global noise only: per-row noise
needs rows).

A pretrained network: load its state dict *before* converting (the converted network's state dict has the noise
parameters too, until a :class:`~pyro_bnn.BNN` turns them into non-persistent buffers; after that the network's
state dict has exactly the original keys again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parameter import is_lazy

INPUT_NOISE = "input_noise"
"""Attribute (and last part of the site name) of a layer's input-noise vector."""

BIAS_NOISE = "bias_noise"
"""Attribute (and last part of the site name) of a layer's bias-noise scalar."""

NOISY_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
"""Layers node noise applies to: the noise multiplies their input's feature / channel dimension."""

LayerSelect = Callable[[str, nn.Module], bool]
"""``select(layer_name, module) -> bool``: which layers get node noise."""


def every_layer(name: str, module: nn.Module) -> bool:
    """Selects every ``nn.Linear`` and convolution (the default)."""
    return True


def is_node_noise(name: str, module: nn.Module) -> bool:
    """Parameter selector (:mod:`pyro_bnn.priors.selection`) choosing exactly the node-noise tensors."""
    return name.rsplit(".", 1)[-1] in (INPUT_NOISE, BIAS_NOISE) and isinstance(module, NOISY_TYPES)


def _unbatched(module: nn.Module, ndim: int) -> bool:
    """Whether a layer input of ``ndim`` dimensions holds one example without a batch dimension: ``(C, *spatial)``
    for a ConvNd (``ndim == N + 1``, which torch's convolutions accept), ``(C,)`` for a Linear."""
    return ndim == (1 if isinstance(module, nn.Linear) else len(module.kernel_size) + 1)


def _refuse_rows_unbatched(module: nn.Module, value: torch.Tensor, shape: torch.Size) -> None:
    """Per-row noise gives each row of a batch its own draw; an input of one example has no rows to give them to."""
    if _unbatched(module, len(shape)):
        raise ValueError(
            f"per-row node noise {tuple(value.shape)} (one draw per row) needs a batched input, got an unbatched "
            f"input of shape {tuple(shape)} for {type(module).__name__}; add the batch dimension (x[None])"
        )


def _broadcastable(value: torch.Tensor, module: nn.Module, shape: torch.Size) -> torch.Tensor:
    """A noise value ``(C,)`` (global) or ``(R, C)`` (one per row) shaped to multiply a layer input of ``shape``:
    ``(R, ..., C)`` for a Linear; ``(R, C, *spatial)`` for a convolution, or ``(C, *spatial)`` for its unbatched
    input (one example), which takes global noise only (:func:`_refuse_rows_unbatched`)."""
    ndim = len(shape)
    if value.dim() == 2:
        _refuse_rows_unbatched(module, value, shape)
    if isinstance(module, nn.Linear):
        return value.reshape(value.shape[0], *[1] * (ndim - 2), value.shape[1]) if value.dim() == 2 else value
    # The channel dimension is the first of an unbatched input, the second of a batched one.
    spatial = ndim - 1 if _unbatched(module, ndim) else ndim - 2
    return value.reshape(*value.shape, *[1] * spatial)


def _multiply_input(module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: ``x -> x * z`` with z the layer's current ``input_noise``."""
    x = args[0]
    return (x * _broadcastable(getattr(module, INPUT_NOISE), module, x.shape), *args[1:])


def _scale_bias(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """Forward hook: adds ``(b - 1) * bias`` so that the bias enters as ``b * bias``."""
    b = getattr(module, BIAS_NOISE)
    if isinstance(module, nn.Linear):
        bias = module.bias
    else:  # the output channels are the first dimension of an unbatched output (C_out, *spatial)
        spatial = output.dim() - 1 if _unbatched(module, output.dim()) else output.dim() - 2
        bias = module.bias.reshape([-1] + [1] * spatial)
    if b.dim() == 1:  # one scalar per row
        _refuse_rows_unbatched(module, b, output.shape)
        b = b.reshape([-1] + [1] * (output.dim() - 1))
    return output + (b - 1) * bias


@dataclass(frozen=True)
class NoisyLayer:
    """One layer that got node noise.

    Attributes:
        name: The layer's dotted name in the network (``"features.0"``).
        kind: ``"linear"`` or ``"conv"``.
        num_inputs: Input features (Linear) or input channels (convolution): the size of its ``input_noise``.
        bias_noise: Whether the layer also has a ``bias_noise`` scalar.
    """

    name: str
    kind: str
    num_inputs: int
    bias_noise: bool


def add_node_noise(net: nn.Module, select: LayerSelect | None = None, *, bias_noise: bool = False) -> nn.Module:
    """Adds node noise to the selected layers of ``net`` in place and returns ``net``.

    Args:
        net: Any network. Its ``nn.Linear`` and ``nn.Conv1d/2d/3d`` layers are candidates, except those inside an
            ``nn.MultiheadAttention`` (it reads their weights without calling them, so noise there would not act).
        select: ``select(layer_name, module) -> bool`` among the candidates; default: all of them (the
            authors' choice for LeNet, VGG and WRN: every conv and linear layer, the first one too).
        bias_noise: Also give every selected layer with a bias one scalar ``bias_noise`` multiplying the bias.

    Returns:
        ``net``, now with parameters ``"<layer>.input_noise"`` ``(C,)`` (ones) and, with ``bias_noise``,
        ``"<layer>.bias_noise"`` ``()`` (one), and the hooks that apply them.

    Raises:
        ValueError: ``net`` is not a module, ``bias_noise`` not a bool, a layer already has node noise or is a
            lazy layer not run yet (nn.LazyLinear: its input size is unknown), or nothing was selected.
    """
    if not isinstance(net, nn.Module):
        raise ValueError(f"add_node_noise needs a torch.nn.Module, got {type(net).__name__}")
    if select is not None and not callable(select):
        raise ValueError(f"select must be a callable select(layer_name, module) -> bool, got {select!r}")
    if not isinstance(bias_noise, bool):
        raise ValueError(f"bias_noise must be True or False, got {bias_noise!r}")
    select = select or every_layer
    # nn.MultiheadAttention multiplies by its out_proj's weight without calling it, so hooks there never run.
    unhooked = tuple(f"{name}." for name, m in net.named_modules() if isinstance(m, nn.MultiheadAttention))
    chosen = [
        (name, m)
        for name, m in net.named_modules()
        if isinstance(m, NOISY_TYPES) and not name.startswith(unhooked) and select(name, m)
    ]
    if not chosen:
        raise ValueError(
            "add_node_noise selected no layer (node noise applies to nn.Linear, nn.Conv1d, nn.Conv2d and nn.Conv3d "
            "layers, not to transposed convolutions)"
        )
    for name, module in chosen:  # checked before any layer changes
        label = name or type(module).__name__
        if hasattr(module, INPUT_NOISE):
            raise ValueError(f"layer {label!r} already has node noise")
        if is_lazy(module.weight):
            raise ValueError(
                f"layer {label!r} ({type(module).__name__}) is not initialised yet, so its number of inputs is "
                "unknown: run the network once on a batch before add_node_noise"
            )
    for _, module in chosen:
        weight = module.weight
        channels = module.in_features if isinstance(module, nn.Linear) else module.in_channels
        module.register_parameter(INPUT_NOISE, nn.Parameter(weight.new_ones(channels)))
        module.register_forward_pre_hook(_multiply_input)
        if bias_noise and module.bias is not None:
            module.register_parameter(BIAS_NOISE, nn.Parameter(weight.new_ones(())))
            module.register_forward_hook(_scale_bias)
    return net


def noisy_layers(net: nn.Module) -> list[NoisyLayer]:
    """The layers of ``net`` that have node noise, in ``named_modules`` order."""
    return [
        NoisyLayer(
            name,
            "linear" if isinstance(module, nn.Linear) else "conv",
            getattr(module, INPUT_NOISE).shape[0],
            hasattr(module, BIAS_NOISE),
        )
        for name, module in net.named_modules()
        if isinstance(module, NOISY_TYPES) and hasattr(module, INPUT_NOISE)
    ]


@dataclass(frozen=True)
class LatentCounts:
    """How many latent scalars node noise puts on a network, against its weights.

    Attributes:
        input_nodes: Scalars of all ``input_noise`` vectors (the implicit-BNN paper's Table 1 counts these).
        bias_scalars: ``bias_noise`` scalars (one per layer with bias noise).
        weights: Scalars of the network's other parameters (weights, biases, batch-norm affines).
    """

    input_nodes: int
    bias_scalars: int
    weights: int

    @property
    def latents(self) -> int:
        """All latent scalars, input nodes plus bias scalars."""
        return self.input_nodes + self.bias_scalars


def count_latents(net: nn.Module) -> LatentCounts:
    """Counts node-noise latents and deterministic weights of a converted network (before or after it is wrapped
    in a :class:`~pyro_bnn.BNN`)."""
    input_nodes = bias_scalars = weights = 0
    for module in net.modules():
        for attr, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if attr == INPUT_NOISE and isinstance(module, NOISY_TYPES):
                input_nodes += tensor.numel()
            elif attr == BIAS_NOISE and isinstance(module, NOISY_TYPES):
                bias_scalars += tensor.numel()
            elif isinstance(tensor, nn.Parameter):
                weights += tensor.numel()
    return LatentCounts(input_nodes, bias_scalars, weights)
