"""The starts of :func:`~pyro_bnn.diagnostics.nuts.run_nuts`'s chains: a prior draw (:func:`prior_draw`), or the
``init_values`` a caller gives, checked against the model's sites (:func:`check_init_values`) and split between the
chains where they hold one start per chain (:func:`chain_init`)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from pyro import poutine

from pyro_bnn.bnn import BNN


def prior_draw(bnn: BNN) -> dict[str, torch.Tensor]:
    """One draw of every hyperparameter and weight site from the prior (under the current RNG state)."""
    with torch.no_grad(), poutine.block(), poutine.trace() as tracer:
        bnn.sample_parameters()
    return {name: node["value"].detach() for name, node in tracer.trace.nodes.items() if node["type"] == "sample"}


def site_shapes(bnn: BNN) -> dict[str, tuple[int, ...]]:
    """The shape of every weight and hyperparameter site (the latter read off one prior draw, the caller's random
    state left as it was; a hyperprior that cannot be sampled leaves its site's shape unchecked)."""
    shapes = {site.name: tuple(site.shape) for site in bnn.sites}
    if bnn.hyper_site_names:
        try:
            with torch.random.fork_rng(devices=[]):
                draw = prior_draw(bnn)
        except NotImplementedError:
            draw = {}
        shapes.update({name: tuple(draw[name].shape) for name in bnn.hyper_site_names if name in draw})
    return shapes


def check_init_values(
    init_values: object, bnn: BNN, num_chains: int
) -> tuple[dict[str, torch.Tensor] | None, dict[str, tuple[int, ...]]]:
    """``init_values`` checked, and the sites' shapes: a dict of tensors naming the model's weight, hyperparameter
    or per-example latent sites, each weight or hyperparameter of the site's shape or ``(num_chains, *shape)``
    (a latent's shape follows the data and is left to the model); one line naming the first that is not."""
    if init_values is None:
        return None, {}
    if not isinstance(init_values, Mapping):
        raise ValueError(f"init_values must be a dict {{site: tensor}}, got {type(init_values).__name__}")
    known = bnn.hyper_site_names + bnn.site_names + bnn.local_site_names
    unknown = [name for name in init_values if name not in known]
    if unknown:
        raise ValueError(
            f"init_values names {unknown[0]!r}, which is not a site of the model; its sites are {known[:8]}"
        )
    shapes = site_shapes(bnn)
    for name, value in init_values.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"init_values[{name!r}] must be a torch.Tensor, got {type(value).__name__}")
        shape = shapes.get(name)
        if shape is None:
            continue
        if tuple(value.shape) != shape and tuple(value.shape) != (num_chains, *shape):
            raise ValueError(
                f"init_values[{name!r}] has shape {tuple(value.shape)}; the site's is {shape} (one start for every "
                f"chain) or {(num_chains, *shape)} (one per chain)"
            )
    return dict(init_values), shapes


def chain_init(
    init_values: Mapping[str, torch.Tensor] | None, shapes: Mapping[str, tuple[int, ...]], chain: int, num_chains: int
):
    """Chain ``chain``'s start from ``init_values`` (one value for all chains, or one per chain where a site's
    ``shapes`` entry says so), or None."""
    if init_values is None:
        return None
    init = {}
    for name, value in init_values.items():
        shape = shapes.get(name)
        per_chain = shape is not None and value.dim() == len(shape) + 1
        if per_chain and value.shape[0] != num_chains:
            raise ValueError(f"init_values[{name!r}] holds {value.shape[0]} chains' starts, not {num_chains}")
        init[name] = (value[chain] if per_chain else value).detach().clone()
    return init


__all__ = ["chain_init", "check_init_values", "prior_draw", "site_shapes"]
