"""The node-noise prior: every noise scalar ~ N(1, s^2), with s per layer."""

from __future__ import annotations

from collections.abc import Mapping

import pyro.distributions as dist
import torch
from pyro.distributions import Distribution

from pyro_bnn.node_noise.convert import is_node_noise
from pyro_bnn.priors.base import ParameterSite, Prior, elementwise, positive_buffer, positive_number
from pyro_bnn.priors.selection import Select


class NodeNoisePrior(Prior):
    """``z ~ N(1, s^2)`` for every node-noise scalar (input noise and bias noise), the implicit-BNN prior.

    The authors use s = 0.3 for VGG16 and 0.1 for WRN-28x10 and the fine-tuned ResNet-50. From the CLI the same
    prior is ``--prior normal:1,S`` (one s for every layer).

    Args:
        scale: s of every layer not named in ``layer_scales``: a finite real number > 0 (an int or float, a NumPy
            scalar or a one-element tensor; not a bool or a string).
        layer_scales: ``{layer name: s}`` for layers with their own s (``{"conv1": 0.3}``), each s of the same
            kinds as ``scale``.
        select: Which parameters are node noise; default :func:`~pyro_bnn.node_noise.is_node_noise`.
    """

    def __init__(
        self, scale: float = 0.1, layer_scales: Mapping[str, float] | None = None, select: Select | None = None
    ) -> None:
        super().__init__(select or is_node_noise)
        positive_buffer(self, "scale", scale)
        if layer_scales is not None and not isinstance(layer_scales, Mapping):
            raise ValueError(
                f"NodeNoisePrior: layer_scales must be a dict {{layer name: scale}} or None, got {layer_scales!r}"
            )
        self._layer_index: dict[str, int] = {}
        values = []
        for i, (layer, value) in enumerate(dict(layer_scales or {}).items()):
            values.append(positive_number(value, f"NodeNoisePrior: layer_scales[{layer!r}]"))
            self._layer_index[layer] = i
        self.register_buffer("layer_scale_values", torch.tensor(values))

    def parameter_sites(self, net):
        """The node-noise sites of ``net``; refuses ``layer_scales`` names that have no node noise there."""
        sites = super().parameter_sites(net)
        unknown = sorted(set(self._layer_index) - {site.layer for site in sites})
        if unknown:
            layers = sorted({site.layer for site in sites})
            raise ValueError(
                f"NodeNoisePrior: layer_scales names {unknown}, which have no node noise (layers: {layers})"
            )
        return sites

    def layer_scale(self, layer: str) -> torch.Tensor:
        """s of one layer, a scalar tensor on the prior's device."""
        index = self._layer_index.get(layer)
        return self.scale if index is None else self.layer_scale_values[index]

    def distribution(self, site: ParameterSite, hyper: Mapping[str, torch.Tensor]) -> Distribution:
        scale = self.layer_scale(site.layer)
        return elementwise(dist.Normal, site.shape, torch.ones_like(scale), scale)

    def extra_repr(self) -> str:
        text = f"loc=1, scale={self.scale.item():g}"
        if self._layer_index:
            text += f", layer_scales={ {k: self.layer_scale_values[i].item() for k, i in self._layer_index.items()} }"
        return text
