"""Making a plain network Bayesian: :class:`BNN` turns selected parameters into Pyro sample sites."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pyro
import torch
from torch import nn
from torch.func import functional_call

from pyro_bnn.likelihoods.base import Likelihood
from pyro_bnn.models.shapes import check_input_shape
from pyro_bnn.priors.base import ParameterSite, Prior, join_name


class BNN(nn.Module):
    """A Bayesian neural network as a Pyro model: ``bnn(x, y=None)``.

    The network stays a plain ``nn.Module``. The prior picks its random parameters; each becomes a Pyro sample site
    named like the parameter (``"0.weight"``) and the network runs on the sampled values through
    :func:`torch.func.functional_call`. In the network the chosen parameter is replaced by a non-persistent buffer
    holding its initial value (so ``net[0].weight`` still exists, is not optimised and is not saved); guides can
    start from it. Parameters the prior
    does not select stay ordinary deterministic ``nn.Parameter`` s that the trainer optimises (point estimates).

    Because weights enter only through ``functional_call``, several weight samples run in one vectorised call
    (``torch.vmap``): vectorised ELBO particles and predictive sampling both use it.

    Args:
        net: Any network whose forward is a function of its parameters and input (no in-place parameter updates).
        prior: Chooses the random parameters and their prior (e.g. ``NormalPrior(0, 1)``).
        likelihood: Owns the data site and plate (e.g. ``Categorical(dataset_size=60_000)``).

    Shapes:
        ``x``: ``(B, *input_shape)``; ``y``: ``(B,)`` class labels or ``(B, D)`` regression targets.
    """

    def __init__(self, net: nn.Module, prior: Prior, likelihood: Likelihood) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise ValueError(f"net must be a torch.nn.Module, got {type(net).__name__}")
        if not isinstance(prior, Prior):
            raise ValueError(f"prior must be a pyro_bnn.priors.Prior, got {type(prior).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise ValueError(f"likelihood must be a pyro_bnn.likelihoods.Likelihood, got {type(likelihood).__name__}")
        self.net = net
        self.prior = prior
        self.likelihood = likelihood
        self.sites: list[ParameterSite] = prior.parameter_sites(net)
        self._layers = list(dict.fromkeys(site.layer for site in self.sites))
        for site in self.sites:
            layer = net.get_submodule(site.layer)
            param = layer._parameters.pop(site.attr)
            layer.register_buffer(site.attr, param.detach().clone(), persistent=False)

    @property
    def site_names(self) -> list[str]:
        """Names of the weight sample sites, in network order."""
        return [site.name for site in self.sites]

    @property
    def hyper_site_names(self) -> list[str]:
        """Names of the hyperprior sites (hierarchical priors), in layer order."""
        return [
            join_name(layer, f"prior_{key}") for layer in self._layers for key in self.prior.layer_hyperpriors(layer)
        ]

    def initial_values(self) -> dict[str, torch.Tensor]:
        """The network's initial value of every random parameter, ``{site name: tensor of the parameter's shape}``."""
        return {site.name: self.net.get_buffer(site.name) for site in self.sites}

    def num_random_parameters(self) -> int:
        """Number of scalar weights that are random."""
        return sum(math.prod(site.shape) for site in self.sites)

    def sample_parameters(self) -> dict[str, torch.Tensor]:
        """Samples the hyperprior and weight sites (Pyro ``sample`` statements) and returns the weights by name."""
        hyper = {}
        for layer in self._layers:
            hyper[layer] = {
                key: pyro.sample(join_name(layer, f"prior_{key}"), d)
                for key, d in self.prior.layer_hyperpriors(layer).items()
            }
        return {
            site.name: pyro.sample(site.name, self.prior.distribution(site, hyper[site.layer])) for site in self.sites
        }

    def apply_parameters(self, x: torch.Tensor, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Runs the network with the given values of its random parameters.

        Args:
            x: Inputs ``(B, *input_shape)``.
            params: ``{site name: value}``; each value has the parameter's shape, optionally preceded by sample
                dimensions ``(*S, 1)`` where the trailing 1 is the slot of the data plate (the layout that Pyro's
                vectorised particle plate and :func:`pyro_bnn.predict.predict` produce).

        Returns:
            Network output ``(B, out)``, or ``(*S, B, out)`` when the parameters carry sample dimensions.
        """
        leading = (
            torch.broadcast_shapes(*(params[s.name].shape[: params[s.name].dim() - len(s.shape)] for s in self.sites))
            if self.sites
            else torch.Size()
        )
        if math.prod(leading) == 1:
            flat = {s.name: params[s.name].reshape(s.shape) for s in self.sites}
            return functional_call(self.net, flat, (x,))
        if leading[-1] != 1:
            raise ValueError(
                f"sampled parameters have leading shape {tuple(leading)}; expected (*sample_dims, 1) with the last "
                "dimension reserved for the data plate (dim=-1)"
            )
        stacked = {s.name: params[s.name].expand(leading + s.shape).reshape(-1, *s.shape) for s in self.sites}
        output = torch.vmap(lambda p: functional_call(self.net, p, (x,)), randomness="different")(stacked)
        return output.reshape(leading[:-1] + output.shape[1:])

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """The Pyro model: samples weights, runs the network, scores ``y`` under the likelihood."""
        return self.likelihood(self.apply_parameters(x, self.sample_parameters()), y)

    @torch.no_grad()
    def validate_batch(self, x: torch.Tensor, y: torch.Tensor | None = None) -> None:
        """Checks one batch against the network and likelihood before training (clear errors, not a crash later).

        Raises:
            ValueError: when the input shape differs from ``net.input_shape`` (where the net declares one), the
                network cannot run on ``x``, or ``y`` does not fit the likelihood (e.g. labels >= num_classes).
        """
        check_input_shape(self.net, x)
        try:
            output = self.apply_parameters(x, self.initial_values())
        except RuntimeError as err:
            raise ValueError(f"the network cannot run on inputs of shape {tuple(x.shape)}: {err}") from err
        if y is not None:
            self.likelihood.check_targets(output, y)

    def extra_repr(self) -> str:
        return f"random parameters: {len(self.sites)} tensors, {self.num_random_parameters():,} weights"
