"""Reading a guide's posterior parameters, whatever the guide, through public routes only."""

from __future__ import annotations

from operator import attrgetter

import torch
from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal
from torch.distributions import biject_to

from pyro_bnn.guides.capabilities import NormalMixturePosterior


def posterior_loc_scale(guide: AutoGuide) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each latent site's variational location and scale, in the site's unconstrained space.

    Works for any guide with a public ``loc_scale()`` method (:class:`~pyro_bnn.guides.BayesByBackprop`: scale =
    softplus(rho)), for :class:`~pyro.infer.autoguide.AutoNormal` (its ``locs`` and ``scales`` submodules, where
    each site sits at the dots of its name) and for :class:`~pyro.infer.autoguide.AutoDelta` (scale 0). The guide
    must have been run once.

    Returns:
        ``{site name: (loc, scale)}`` with tensors of the site's (unconstrained) shape, detached.

    Raises:
        ValueError: The guide has not been run yet, or is of a kind this function does not know.
    """
    loc_scale = getattr(guide, "loc_scale", None)
    if not callable(loc_scale) and not isinstance(guide, (AutoNormal, AutoDelta)):
        raise ValueError(
            f"posterior_loc_scale does not know the guide type {type(guide).__name__}: give it a loc_scale() method "
            "returning {site: (loc, scale)}"
        )
    if getattr(guide, "prototype_trace", False) is None:
        raise ValueError("the guide has no parameters yet: run it (or train) once before reading them")
    if callable(loc_scale):
        pairs = loc_scale()
    elif isinstance(guide, AutoNormal):
        pairs = {
            name: (attrgetter(name)(guide.locs), attrgetter(name)(guide.scales))
            for name, _ in guide.prototype_trace.iter_stochastic_nodes()
        }
    else:  # an AutoDelta (any other kind was refused above)
        pairs = {}
        for name, median in guide.median().items():
            loc = biject_to(guide.prototype_trace.nodes[name]["fn"].support).inv(median)
            pairs[name] = (loc, torch.zeros_like(loc))
    # Copies, so a result taken before training is a snapshot rather than a view of parameters that keep moving.
    return {name: (loc.detach().clone(), scale.detach().clone()) for name, (loc, scale) in pairs.items()}


def mean_posterior_scale(guide: AutoGuide, bnn) -> tuple[float, dict[str, float]]:
    """Mean variational standard deviation over all random weights of ``bnn``, and per layer.

    Args:
        guide: A trained guide: any that :func:`posterior_loc_scale` reads, or a mixture of Normals
            (:class:`~pyro_bnn.guides.capabilities.NormalMixturePosterior`: the mean over its components' sigmas).
        bnn: Its :class:`~pyro_bnn.BNN`; layers are the modules that own the random parameters (weight and bias
            together).

    Returns:
        ``(overall mean, {layer name: mean})``, each the mean of sigma over every scalar weight it covers.
    """
    if isinstance(guide, NormalMixturePosterior):
        scales = guide.split(guide.component_loc_scale()[1].detach())  # {site: (K, *site_shape)}
    else:
        scales = {name: scale for name, (_, scale) in posterior_loc_scale(guide).items()}
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for site in bnn.sites:
        scale = scales[site.name]
        sums[site.layer] = sums.get(site.layer, 0.0) + float(scale.double().sum())
        counts[site.layer] = counts.get(site.layer, 0) + scale.numel()
    total = sum(counts.values())
    overall = sum(sums.values()) / total if total else 0.0
    return overall, {layer: sums[layer] / counts[layer] for layer in sums}


def normal_quantiles(
    loc: torch.Tensor, scale: torch.Tensor, support, quantiles: torch.Tensor | list[float]
) -> torch.Tensor:
    """Quantiles of ``biject_to(support)(Normal(loc, scale))``, the family of every mean-field Normal guide here.

    Args:
        loc, scale: Unconstrained location and scale, ``site_shape``.
        support: The site's support (a torch constraint).
        quantiles: Levels in (0, 1), ``(q,)``.

    Returns:
        ``(q, *site_shape)`` values in the site's own space.
    """
    levels = torch.as_tensor(quantiles, dtype=loc.dtype, device=loc.device).reshape((-1,) + (1,) * loc.dim())
    return biject_to(support)(torch.distributions.Normal(loc, scale).icdf(levels))


class SetUpOnDemand:
    """For an ``AutoGuide`` whose summaries (``median``, ``quantiles``) take the model's arguments: ``_set_up`` runs
    the guide's prototype on them where it has not run yet, and without them refuses in one line (mixed in ahead of
    the Pyro base)."""

    def _set_up(self, *args, **kwargs) -> None:
        if self.prototype_trace is None:
            if not (args or kwargs):
                raise ValueError(
                    f"{type(self).__name__} has no parameters yet: run it (or train) once before reading them"
                )
            self._setup_prototype(*args, **kwargs)


class NormalQuantiles(SetUpOnDemand):
    """Posterior quantiles of a mean-field Normal guide, from its ``loc_scale()``: mixed into
    :class:`~pyro_bnn.guides.FlatMeanField` and :class:`~pyro_bnn.guides.BayesByBackprop` ahead of their Pyro base
    (``_set_up(*args, **kwargs)`` runs the guide first where it has not run yet)."""

    @torch.no_grad()
    def quantiles(self, quantiles: torch.Tensor | list[float], *args, **kwargs) -> dict[str, torch.Tensor]:
        """Posterior quantiles of each latent site in its own space, e.g. ``guide.quantiles([0.05, 0.5, 0.95])``.

        Args:
            quantiles: Levels in (0, 1), shape ``(q,)``.
            *args: The model's arguments, needed only when the guide has not run yet.
            **kwargs: Likewise.

        Returns:
            ``{site name: values}`` with values of shape ``(q, *site_shape)``, detached.
        """
        self._set_up(*args, **kwargs)
        nodes = self.prototype_trace.nodes
        return {
            name: normal_quantiles(loc, scale, nodes[name]["fn"].support, quantiles)
            for name, (loc, scale) in self.loc_scale().items()
        }
