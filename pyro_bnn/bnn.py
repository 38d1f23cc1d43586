"""Making a plain network Bayesian: :class:`BNN` turns selected parameters into Pyro sample sites."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from functools import partial

import pyro
import torch
from torch import nn
from torch.func import functional_call

from pyro_bnn.likelihoods.base import Likelihood
from pyro_bnn.local_latents import LocalLatent
from pyro_bnn.models.shapes import check_input_shape, check_output_batch
from pyro_bnn.nn.modes import has_running_statistics, network_mode
from pyro_bnn.priors.base import ParameterSite, Prior, join_name

_RANDOM_MARK = "_pyro_bnn_random_parameters"
"""Attribute a :class:`BNN` sets on every layer whose parameters it turned into buffers: the attribute names it turned.

Nothing else tells such a stand-in buffer from a network's own non-persistent buffer, so a second BNN would find no
parameter there and silently leave those weights deterministic. It is an attribute of the layer itself (not a
registry of ids) so that it travels with the layer's copies (``copy.deepcopy``, ``torch.save``), which hold the same
buffers; a copy that puts parameters back (:func:`pyro_bnn.laplace.map_network`) is not refused, since only names
that are buffers still count."""


def _converted_parameters(net: nn.Module, prior: Prior) -> list[str]:
    """Names of the tensors of ``net`` that a :class:`BNN` turned from parameters into buffers, that are buffers
    still and that ``prior`` selects (empty for a network no BNN made Bayesian, one whose prior selected nothing, or
    a prior that wants none of them: a deterministic copy, a new head on a wrapped body)."""
    names = []
    for layer_name, layer in net.named_modules():
        buffers = dict(layer.named_buffers(recurse=False))
        for attr in getattr(layer, _RANDOM_MARK, ()):
            name = join_name(layer_name, attr)
            if attr in buffers and prior.select(name, layer):
                names.append(name)
    return names


def _forget_conversion(net: nn.Module) -> None:
    """Removes every layer's ``_RANDOM_MARK`` from ``net`` (a copy whose stand-in buffers a new BNN is to take as
    they are, e.g. an ensemble's template)."""
    for layer in net.modules():
        if _RANDOM_MARK in vars(layer):
            delattr(layer, _RANDOM_MARK)


def _apply_latent(latent: LocalLatent, value: torch.Tensor, module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: replaces the target module's first input by ``latent.apply(input, value)``."""
    return (latent.apply(args[0], value), *args[1:])


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

    Per-example latent variables (:class:`~pyro_bnn.local_latents.LocalLatent`, e.g. node noise) are sampled inside
    the likelihood's data plate, one value per row, and enter the network through a forward pre-hook on their target
    submodule that exists only while the BNN runs the network. Dimensions follow :mod:`pyro_bnn.sites`.

    Args:
        net: Any network whose forward is a function of its parameters and input (no in-place parameter updates).
            One BNN per network: a network (or a copy, or a part of it) whose parameters another BNN already turned
            into buffers is refused; wrap ``copy.deepcopy(net)`` made before the first BNN.
        prior: Chooses the random parameters and their prior (e.g. ``NormalPrior(0, 1)``).
        likelihood: Owns the data site and plate (e.g. ``Categorical(dataset_size=60_000)``).
        local_latents: Per-example latent sites, sampled in this order.

    Shapes:
        ``x``: ``(B, *input_shape)``; ``y``: ``(B,)`` class labels or ``(B, D)`` regression targets.
    """

    def __init__(
        self, net: nn.Module, prior: Prior, likelihood: Likelihood, local_latents: Sequence[LocalLatent] = ()
    ) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise ValueError(f"net must be a torch.nn.Module, got {type(net).__name__}")
        if not isinstance(prior, Prior):
            raise ValueError(f"prior must be a pyro_bnn.priors.Prior, got {type(prior).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise ValueError(f"likelihood must be a pyro_bnn.likelihoods.Likelihood, got {type(likelihood).__name__}")
        converted = _converted_parameters(net, prior)
        if converted:
            raise ValueError(
                f"net is already Bayesian in another BNN ({len(converted)} of the parameters this prior selects, e.g. "
                f"{converted[0]!r}, are that BNN's buffers now, and this prior would find none of them): give each "
                "BNN its own copy, made before the first wraps it: BNN(copy.deepcopy(net), prior, likelihood)"
            )
        self.net = net
        self.prior = prior
        self.likelihood = likelihood
        self.sites: list[ParameterSite] = prior.parameter_sites(net)
        self._layers = list(dict.fromkeys(site.layer for site in self.sites))
        # Checked before the network changes, so that a refused call leaves it as it was.
        self.local_latents = nn.ModuleList(self._check_local_latents(local_latents))
        for site in self.sites:
            layer = net.get_submodule(site.layer)
            param = getattr(layer, site.attr)
            delattr(layer, site.attr)  # nn.Module's public route to drop a registered parameter
            layer.register_buffer(site.attr, param.detach().clone(), persistent=False)
            setattr(layer, _RANDOM_MARK, (*getattr(layer, _RANDOM_MARK, ()), site.attr))

    def _check_local_latents(self, latents: Sequence[LocalLatent]) -> list[LocalLatent]:
        latents = list(latents)
        taken = set(self.site_names)
        for latent in latents:
            if not isinstance(latent, LocalLatent):
                raise ValueError(f"local_latents must be pyro_bnn LocalLatent modules, got {type(latent).__name__}")
            if latent.name in taken or latent.name in ("data", "obs"):
                raise ValueError(f"local latent site name {latent.name!r} is already used by another site")
            taken.add(latent.name)
            try:
                self.net.get_submodule(latent.target)
            except AttributeError:
                raise ValueError(
                    f"local latent {latent.name!r} targets {latent.target!r}, which is not a submodule of the network"
                ) from None
        return latents

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

    @property
    def local_site_names(self) -> list[str]:
        """Names of the per-example latent sites."""
        return [latent.name for latent in self.local_latents]

    def initial_values(self) -> dict[str, torch.Tensor]:
        """The network's initial value of every random parameter, ``{site name: tensor of the parameter's shape}``."""
        return {site.name: self.net.get_buffer(site.name) for site in self.sites}

    @torch.no_grad()
    def set_initial_values(self, values: Mapping[str, torch.Tensor]) -> None:
        """Replaces the initial value of the random parameters named in ``values`` (e.g. by a MAP warm start), which
        guides built afterwards start from (:class:`~pyro_bnn.guides.init_to_network`).

        Raises:
            ValueError: a name that is not a weight site, or a value of another shape.
        """
        current = self.initial_values()
        for name, value in values.items():
            if name not in current:
                raise ValueError(f"{name!r} is not a weight site of this model; sites: {self.site_names[:5]}...")
            if value.shape != current[name].shape:
                raise ValueError(
                    f"value for {name!r} has shape {tuple(value.shape)}, expected {tuple(current[name].shape)}"
                )
            current[name].copy_(value)

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

    def sample_local_latents(
        self, batch_size: int, device: torch.device | None = None, *, plate: pyro.plate | None = None
    ) -> dict[str, torch.Tensor]:
        """Samples every per-example latent inside the data plate; returns ``{name: (B, *event_shape)}`` (with a
        leading ``(S,)`` under a sample plate). ``plate``: the data plate to reuse (one model enters it once per
        site, but creates it once)."""
        if not self.local_latents:
            return {}
        with plate if plate is not None else self.likelihood.plate(batch_size, device):
            return {latent.name: pyro.sample(latent.name, latent.prior(batch_size)) for latent in self.local_latents}

    def point_local_values(self, batch_size: int) -> dict[str, torch.Tensor]:
        """Every per-example latent at its :meth:`~LocalLatent.point_value`, ``{name: (B, *event_shape)}``."""
        return {latent.name: latent.point_value(batch_size) for latent in self.local_latents}

    def apply_parameters(
        self,
        x: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        local_values: Mapping[str, torch.Tensor] | None = None,
        *,
        sample_shape: tuple[int, ...] = (),
    ) -> torch.Tensor:
        """Runs the network with the given values of its random parameters and per-example latents.

        Args:
            x: Inputs ``(B, *input_shape)``.
            params: ``{site name: value}``; each value has the parameter's shape, optionally preceded by sample
                dimensions ``(*S, 1)`` where the trailing 1 is the slot of the data plate (:mod:`pyro_bnn.sites`).
            local_values: ``{latent name: value}`` of shape ``(B, *event_shape)`` or ``(*S, B, *event_shape)``;
                None puts every latent at its point value.
            sample_shape: Run the network this many times even where no value varies (a network whose dropout
                stays on draws a fresh mask for each run).

        Returns:
            Network output ``(B, out)``, or ``(*S, B, out)`` where the values (or ``sample_shape``) carry sample
            dimensions.
        """
        batch_size = x.shape[0]
        if local_values is None:
            local_values = self.point_local_values(batch_size)
        weight_lead = {s.name: params[s.name].shape[: params[s.name].dim() - len(s.shape)] for s in self.sites}
        local_lead = {
            latent.name: local_values[latent.name].shape[: local_values[latent.name].dim() - len(latent.event_shape)]
            for latent in self.local_latents
        }
        for lead in weight_lead.values():
            if lead and lead[-1] != 1:
                raise ValueError(
                    f"sampled parameters have leading shape {tuple(lead)}; expected (*sample_dims, 1) with the last "
                    "dimension reserved for the data plate (dim=-1)"
                )
        for name, lead in local_lead.items():
            if not lead or lead[-1] != batch_size:
                raise ValueError(
                    f"local latent {name!r} has leading shape {tuple(lead)}; expected (*sample_dims, {batch_size}) "
                    "with one value per row of the batch"
                )
        sample_shape = torch.broadcast_shapes(
            torch.Size(sample_shape), *(lead[:-1] for lead in (*weight_lead.values(), *local_lead.values()))
        )
        num = math.prod(sample_shape)
        self.check_vectorised_draws(num)
        if num == 1:
            weights = {s.name: params[s.name].reshape(s.shape) for s in self.sites}
            latents = {
                latent.name: local_values[latent.name].reshape(batch_size, *latent.event_shape)
                for latent in self.local_latents
            }
            output = self._run(x, weights, latents)
            return output.reshape(sample_shape + output.shape)

        # Values that vary over the samples are flattened to (num, ...) and vmapped; the others are shared.
        def split(values, leads, shapes, slot):
            varying, shared = {}, {}
            for name, value in values.items():
                if leads[name][:-1].numel() > 1:
                    varying[name] = value.expand(sample_shape + (slot,) + shapes[name]).reshape(
                        num, *([] if slot == 1 else [slot]), *shapes[name]
                    )
                else:
                    shared[name] = value.reshape(*([] if slot == 1 else [slot]), *shapes[name])
            return varying, shared

        w_varying, w_shared = split(
            {s.name: params[s.name] for s in self.sites}, weight_lead, {s.name: s.shape for s in self.sites}, 1
        )
        l_varying, l_shared = split(
            {latent.name: local_values[latent.name] for latent in self.local_latents},
            local_lead,
            {latent.name: latent.event_shape for latent in self.local_latents},
            batch_size,
        )

        def run_one(w_var, l_var, _):
            return self._run(x, {**w_shared, **w_var}, {**l_shared, **l_var})

        index = torch.arange(num, device=x.device)  # gives vmap a batched input when nothing else varies
        output = torch.vmap(run_one, randomness="different")(w_varying, l_varying, index)
        return output.reshape(sample_shape + output.shape[1:])

    def run_network(self, x: torch.Tensor, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One pass of the network with the random sites at ``values``, taken as given: no sample dimensions are
        read and nothing is reshaped, so a value may have any shape the network's own code broadcasts (node noise
        ``(B, C)``, one draw per row: :class:`~pyro_bnn.infer.MixtureMeanKL`). Per-example latents sit at their
        point values.

        Returns:
            The network's output, ``(B, out)``.
        """
        return self._run(x, values, self.point_local_values(x.shape[0]))

    def _run(
        self, x: torch.Tensor, weights: Mapping[str, torch.Tensor], local_values: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """One network pass: ``weights`` by site name, latents ``(B, *event_shape)`` hooked onto their targets."""
        if not self.local_latents:
            return functional_call(self.net, dict(weights), (x,))
        handles = [
            self.net.get_submodule(latent.target).register_forward_pre_hook(
                partial(_apply_latent, latent, local_values[latent.name])
            )
            for latent in self.local_latents
        ]
        try:
            return functional_call(self.net, dict(weights), (x,))
        finally:
            for handle in handles:
                handle.remove()

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """The Pyro model: samples weights (and per-example latents), runs the network, scores ``y``."""
        params = self.sample_parameters()
        if not self.local_latents:
            return self.likelihood(self.apply_parameters(x, params), y)
        plate = self.likelihood.plate(x.shape[0], x.device)
        local_values = self.sample_local_latents(x.shape[0], plate=plate)
        return self.likelihood(self.apply_parameters(x, params, local_values), y, plate=plate)

    @torch.no_grad()
    def validate_batch(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Checks one batch against the network and likelihood before training (clear errors, not a crash later).

        Returns:
            The network's output on ``x`` at its initial values (evaluation mode).

        Raises:
            ValueError: when the input shape differs from ``net.input_shape`` (where the net declares one), the
                network cannot run on ``x`` (naming the dtypes when ``x``'s is not the parameters'), its output is not
                ``(N, ...)`` for ``x`` of N examples (a single example ``(D,)`` without its batch axis), or ``y`` does
                not fit the likelihood (e.g. labels >= num_classes).
        """
        check_input_shape(self.net, x)
        # In eval mode: a check must not update batch norm's running statistics (nor spectral norm's vectors).
        with network_mode(self.net):
            try:
                output = self.apply_parameters(x, self.initial_values())
            except RuntimeError as err:
                tensors = itertools.chain(self.net.parameters(), self.net.buffers())
                dtype = next((t.dtype for t in tensors if t.is_floating_point()), x.dtype)
                if x.dtype != dtype:  # torch's words ("mat1 and mat2 must have the same dtype") name no input
                    said = str(err).partition("\n")[0]
                    raise ValueError(
                        f"the network cannot run on inputs of dtype {x.dtype}: the network's parameters are {dtype} "
                        f"(convert the inputs with x.to({dtype})); torch: {said}"
                    ) from err
                raise ValueError(f"the network cannot run on inputs of shape {tuple(x.shape)}: {err}") from err
        check_output_batch(x, output)  # a single example without its batch axis runs through nn.Linear
        if y is not None:
            self.likelihood.check_targets(output, y)
        return output

    def validate_targets(self, x: torch.Tensor, targets: torch.Tensor) -> None:
        """:meth:`validate_batch` of ``x``, then every target of a data set at once against the likelihood (labels
        >= C, wrong dtype or shape).

        Args:
            x: A batch of inputs ``(B, *input_shape)``; the network's output on it gives the likelihood its output
                shape (a whole batch: batch norm without running statistics normalises by the batch even in
                evaluation mode, and cannot on one example).
            targets: ``(N,)`` or ``(N, D_out)``, all of them.
        """
        output = self.validate_batch(x)
        # check_targets compares the batch dimension too, so hand it an output with as many rows as targets.
        self.likelihood.check_targets(output[:1].expand(len(targets), *output.shape[1:]), targets.to(output.device))

    def check_vectorised_draws(self, num: int, *, training: bool = False) -> None:
        """Refuses ``num`` > 1 weight draws in one vectorised pass through batch norm in training mode that keeps
        running statistics (one tensor for all draws), in one line; ``training``: as a training step would run the
        network (every module in training mode), whatever its modes are now."""
        if num > 1 and any(has_running_statistics(m) and (training or m.training) for m in self.net.modules()):
            raise ValueError(
                f"batch norm in training mode cannot run {num} weight draws in one vectorised pass (its running "
                "statistics are one tensor for all of them): use one draw per pass (num_particles=1, or the trace "
                "objective with vectorize_particles=False), or batch norm with track_running_stats=False"
            )

    def extra_repr(self) -> str:
        text = f"random parameters: {len(self.sites)} tensors, {self.num_random_parameters():,} weights"
        if self.local_latents:
            per_example = sum(latent.event_shape.numel() for latent in self.local_latents)
            text += f"; per-example latents: {len(self.local_latents)} sites, {per_example:,} values per example"
        return text
