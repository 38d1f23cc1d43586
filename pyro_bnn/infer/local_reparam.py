"""Per-example noise for the random ``nn.Linear`` layers of the fast objective.

Both options run each such layer with its mean weights and add the noise in a forward hook:

- local reparameterisation (Kingma et al., 2015): the pre-activations are drawn directly, mean
  ``x @ mu.T + mu_b``, variance ``x^2 @ sigma^2.T + sigma_b^2``, independently for every row;
- flipout (Wen et al., 2018): one weight perturbation ``dW = sigma * eps`` is shared by the batch, decorrelated per
  row by random signs ``s`` (inputs) and ``r`` (outputs): ``((x * s) @ dW.T + d_b) * r``. Row i then sees the weights
  ``mu + dW * (r_i s_i^T)``, which are distributed as ``q`` because ``dW`` is symmetric, so the expected objective is
  unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.capabilities import FlatNormalPosterior
from pyro_bnn.guides.flat import FlatSite


@dataclass
class LinearLayer:
    """An ``nn.Linear`` whose weight (and bias, if random) the local reparameterisation samples as pre-activations."""

    module: nn.Linear
    weight: FlatSite
    bias: FlatSite | None


def linear_layers(
    model: BNN, guide: FlatNormalPosterior, is_closed_form: Callable[[FlatSite], bool]
) -> list[LinearLayer]:
    """The ``nn.Linear`` modules whose weight is random with a Normal prior (``is_closed_form``) and whose bias is
    random with one, or not random at all."""
    sites = {site.name: site for site in guide.sites}

    layers = []
    for name, module in model.net.named_modules():
        if type(module) is not nn.Linear:
            continue
        prefix = f"{name}." if name else ""
        weight, bias = sites.get(prefix + "weight"), sites.get(prefix + "bias")
        if weight is None or not is_closed_form(weight):
            continue
        if bias is not None and not is_closed_form(bias):
            continue
        layers.append(LinearLayer(module, weight, bias))
    return layers


def _checked_input(layer: LinearLayer, calls: list[int], args, option: str) -> torch.Tensor:
    """The layer's input ``(B, in)``; refuses a second application or another input shape, naming the option."""
    calls[0] += 1
    x = args[0]
    if calls[0] > 1 or x.dim() != 2:
        raise ValueError(
            f"{option} needs each random nn.Linear applied once per example to a (B, in) input; "
            f"{layer.weight.name!r} was applied to {tuple(x.shape)}"
            + (" more than once" if calls[0] > 1 else "")
            + ": use FastMeanFieldELBO without it"
        )
    return x


def local_noise_hook(
    layer: LinearLayer, scales: Mapping[str, torch.Tensor], calls: list[int], module, args, output
) -> torch.Tensor:
    """Forward hook on an ``nn.Linear`` run with its mean weights: adds ``sqrt(x^2 @ sigma_W^2.T + sigma_b^2) * eps``
    to the mean pre-activation ``output: (B, out)``, one eps per row and unit."""
    x = _checked_input(layer, calls, args, "local reparameterisation")
    variance = x.square() @ scales[layer.weight.name].square().T
    if layer.bias is not None:
        variance = variance + scales[layer.bias.name].square()
    # Clamped so that a zero input row with a deterministic bias gives sqrt'(0) = 0, not 0 * inf.
    std = variance.clamp_min(torch.finfo(variance.dtype).tiny).sqrt()
    return output + std * torch.randn_like(output)


def _random_signs(like: torch.Tensor) -> torch.Tensor:
    """Independent +1 / -1 with probability 1/2 each, shaped like ``like``."""
    return torch.empty_like(like).bernoulli_(0.5).mul_(2).sub_(1)


def flipout_hook(
    layer: LinearLayer, deltas: Mapping[str, torch.Tensor], calls: list[int], module, args, output
) -> torch.Tensor:
    """Forward hook on an ``nn.Linear`` run with its mean weights: adds ``((x * s) @ dW.T + d_b) * r`` to the mean
    pre-activation ``output: (B, out)``, with the shared perturbations ``deltas`` (``dW: (out, in)``, ``d_b:
    (out,)``) and fresh random signs ``s: (B, in)``, ``r: (B, out)``."""
    x = _checked_input(layer, calls, args, "flipout")
    perturbation = (x * _random_signs(x)) @ deltas[layer.weight.name].T
    if layer.bias is not None:
        perturbation = perturbation + deltas[layer.bias.name]
    return output + perturbation * _random_signs(output)


def run_with_linear_noise(
    model: BNN,
    x: torch.Tensor,
    params: dict[str, torch.Tensor],
    layers: list[LinearLayer],
    hook: Callable,
    tensors: Mapping[str, torch.Tensor],
    num: int,
) -> torch.Tensor:
    """Runs the network with mean weights on ``layers``, whose forward hooks add the noise.

    Args:
        model: The BNN.
        x: Inputs ``(B, *input_shape)``.
        params: Every weight site's value: the means for ``layers``, drawn weights for the other sites.
        layers: The linear layers that get the noise.
        hook: :func:`local_noise_hook` (``tensors``: per-site scales) or :func:`flipout_hook` (``tensors``: per-site
            perturbations).
        tensors: What ``hook`` reads, by site name.
        num: Particles (more than 1 runs the network ``num`` times, vmapped, with fresh noise each).
    """
    handles = []
    try:
        for layer in layers:
            handles.append(layer.module.register_forward_hook(partial(hook, layer, tensors, [0])))
        # sample_shape makes P runs (vmapped, fresh noise each) even when no weight varies over particles.
        return model.apply_parameters(x, params, sample_shape=(num,) if num > 1 else ())
    finally:
        for handle in handles:
            handle.remove()
