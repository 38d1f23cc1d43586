"""The per-pair set-up of the fast objective: which weights have a closed-form KL, which a Monte Carlo one, and which
linear layers get local noise; built once per model and guide and rebuilt when the prior's buffers change."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch.distributions import Distribution

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.capabilities import FlatNormalPosterior
from pyro_bnn.guides.flat import FlatSite
from pyro_bnn.infer.fused_draw import NormalSegment, normal_parameters
from pyro_bnn.infer.local_reparam import LinearLayer, linear_layers
from pyro_bnn.nn.modes import has_batch_norm


@dataclass
class ScoringPlan:
    """What one (model, guide) pair needs per step, built once and rebuilt when the prior's buffers change.

    Attributes:
        model, guide: Weak references to the pair the plan was built for.
        key: :func:`prior_key` at build time.
        closed_form: Runs of the flat vectors with a Normal prior (their KL in closed form).
        monte_carlo: The other sites with their prior (their KL by Monte Carlo).
        linear: Linear layers that get local reparameterisation or flipout.
        weight_sampled: Sites drawn weight by weight (all but those of ``linear``).
        couples_rows: The network has batch normalisation, whose statistics couple the rows of a batch (so an
            antithetic pair, which runs each half separately, would change the model).
    """

    model: weakref.ref
    guide: weakref.ref
    key: tuple
    closed_form: list[NormalSegment]
    monte_carlo: list[tuple[FlatSite, Distribution]]
    linear: list[LinearLayer] = field(default_factory=list)
    # Sites drawn weight by weight (every site unless the local reparameterisation samples it as a pre-activation).
    weight_sampled: list[FlatSite] = field(default_factory=list)
    couples_rows: bool = False


def prior_key(model: BNN, guide: FlatNormalPosterior) -> tuple:
    """Changes when the prior's buffers are replaced (``.to(device)``) or modified in place, or the guide is set up
    again."""
    buffers = tuple((id(b), b.data_ptr(), b._version, b.dtype, b.device) for b in model.prior.buffers())
    loc = guide.flat_parameters()[0]
    return buffers, id(guide.sites), loc.dtype, loc.device


def _compact(value: torch.Tensor) -> torch.Tensor:
    """A 0-dim tensor where ``value`` is one number broadcast over the site (every stride 0), else ``(n,)``."""
    broadcast = all(stride == 0 or size == 1 for stride, size in zip(value.stride(), value.shape, strict=True))
    if value.numel() > 0 and broadcast:
        return torch.as_strided(value, (), (), value.storage_offset()).detach().clone()
    return value.detach().reshape(-1).clone()


def _same_scalar(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == 0 and b.dim() == 0 and bool(a == b)


def build_plan(model: BNN, guide: FlatNormalPosterior, *, closed_form_kl: bool, linear_noise: bool) -> ScoringPlan:
    """The :class:`ScoringPlan` of a model and its flat guide (the pair already checked by the objective).

    Args:
        model: The BNN.
        guide: Its set-up flat guide.
        closed_form_kl: Use the closed-form KL where the prior is Normal.
        linear_noise: Local reparameterisation or flipout is on (find the linear layers it applies to).

    Raises:
        ValueError: The guide was built for another model, or a prior has a batch shape.
    """
    if guide.site_names != model.site_names:
        raise ValueError(
            f"the guide covers the sites {guide.site_names[:4]}..., the model has {model.site_names[:4]}...: "
            "build the guide for this model"
        )
    closed_form, monte_carlo = [], []
    for flat_site, model_site in zip(guide.sites, model.sites, strict=True):
        prior = model.prior.distribution(model_site, {})
        if prior.event_shape != model_site.shape or prior.batch_shape != torch.Size():
            raise ValueError(
                f"the prior of {model_site.name!r} has batch shape {tuple(prior.batch_shape)} and event shape "
                f"{tuple(prior.event_shape)}, expected () and {tuple(model_site.shape)}"
            )
        normal = normal_parameters(prior) if closed_form_kl else None
        if normal is None:
            monte_carlo.append((flat_site, prior))
            continue
        loc, scale = (_compact(p.expand(model_site.shape)) for p in normal)
        last = closed_form[-1] if closed_form else None
        if last is not None and last.stop == flat_site.start and _same_scalar(last.loc, loc):
            if _same_scalar(last.scale, scale):
                last.stop = flat_site.stop  # one run over consecutive sites with the same scalar prior
                continue
        zero_loc = bool((loc == 0).all())
        closed_form.append(NormalSegment(flat_site.start, flat_site.stop, loc, scale, zero_loc))
    linear = (
        linear_layers(
            model, guide, lambda site: any(seg.start <= site.start and site.stop <= seg.stop for seg in closed_form)
        )
        if linear_noise
        else []
    )
    by_lr = {layer.weight.name for layer in linear} | {layer.bias.name for layer in linear if layer.bias}
    return ScoringPlan(
        weakref.ref(model),
        weakref.ref(guide),
        prior_key(model, guide),
        closed_form,
        monte_carlo,
        linear,
        [site for site in guide.sites if site.name not in by_lr],
        has_batch_norm(model.net),
    )
