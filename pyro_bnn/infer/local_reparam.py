"""Local reparameterisation for the fast objective: random ``nn.Linear`` layers sample their pre-activations
(mean ``x @ mu.T + mu_b``, variance ``x^2 @ sigma^2.T + sigma_b^2``) instead of their weights."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.flat import FlatMeanField, FlatSite


@dataclass
class LinearLayer:
    """An ``nn.Linear`` whose weight (and bias, if random) the local reparameterisation samples as pre-activations."""

    module: nn.Linear
    weight: FlatSite
    bias: FlatSite | None


def linear_layers(model: BNN, guide: FlatMeanField, is_closed_form: Callable[[FlatSite], bool]) -> list[LinearLayer]:
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


def _local_noise_hook(
    layer: LinearLayer, scales: Mapping[str, torch.Tensor], calls: list[int], module, args, output
) -> torch.Tensor:
    """Forward hook on an ``nn.Linear`` run with its mean weights: adds ``sqrt(x^2 @ sigma_W^2.T + sigma_b^2) * eps``
    to the mean pre-activation ``output: (B, out)``, one eps per row and unit."""
    calls[0] += 1
    x = args[0]
    if calls[0] > 1 or x.dim() != 2:
        raise ValueError(
            f"local reparameterisation needs each random nn.Linear applied once per example to a (B, in) input; "
            f"{layer.weight.name!r} was applied to {tuple(x.shape)}"
            + (" more than once" if calls[0] > 1 else "")
            + ": use FastMeanFieldELBO(local_reparameterization=False)"
        )
    variance = x.square() @ scales[layer.weight.name].square().T
    if layer.bias is not None:
        variance = variance + scales[layer.bias.name].square()
    # Clamped so that a zero input row with a deterministic bias gives sqrt'(0) = 0, not 0 * inf.
    std = variance.clamp_min(torch.finfo(variance.dtype).tiny).sqrt()
    return output + std * torch.randn_like(output)


def run_with_local_noise(
    model: BNN,
    x: torch.Tensor,
    params: dict[str, torch.Tensor],
    layers: list[LinearLayer],
    scales: Mapping[str, torch.Tensor],
    num: int,
) -> torch.Tensor:
    """Runs the network with mean weights on the locally reparameterised layers, whose hooks add the noise."""
    handles = []
    try:
        for layer in layers:
            hook = partial(_local_noise_hook, layer, scales, [0])
            handles.append(layer.module.register_forward_hook(hook))
        # sample_shape makes P runs (vmapped, fresh noise each) even when no weight varies over particles.
        return model.apply_parameters(x, params, sample_shape=(num,) if num > 1 else ())
    finally:
        for handle in handles:
            handle.remove()
