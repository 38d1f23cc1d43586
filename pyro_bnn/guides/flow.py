"""A normalising-flow guide over all weights: inverse autoregressive flows after a standard Normal, then a
per-weight location and scale that start at the network's own weights.

``z = loc + exp(log_scale) * f_K(... f_1(eps))`` with ``eps ~ N(0, I_D)`` and each ``f_k`` an affine autoregressive
transform (Pyro's :class:`~pyro.distributions.transforms.AffineAutoregressive` in its "stable" form, a MADE network
with one hidden layer, a random order of the D scalars per flow). This is Pyro's
:class:`~pyro.infer.autoguide.AutoIAFNormal` with one change: Pyro's guide ignores ``init_loc_fn`` and starts near
``N(0, I)`` over every weight, which saturates any layer wider than a few units; the final elementwise affine here
starts at the network's initialisation with scale ``init_scale``, as the Normal guides do.

A flow's density has no closed-form marginals, so :meth:`IAFNormal.median`, :meth:`IAFNormal.quantiles` and
:meth:`IAFNormal.loc_scale` (marginal means and standard deviations) estimate them from draws. Each MADE network
holds ``3 D H`` weights (``H >= D`` hidden units, Pyro's rule), so the guide family refuses networks above
:data:`MAX_FLOW_WEIGHTS` weights (:func:`check_flow_size`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_transform import ComposeTransformModule, TransformModule
from pyro.distributions.transforms import affine_autoregressive
from pyro.infer.autoguide import AutoContinuous
from torch import nn
from torch.distributions import biject_to

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.guides.capabilities import Capability
from pyro_bnn.guides.flat import split_sites
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.inspect import SetUpOnDemand
from pyro_bnn.guides.multivariate import check_init_scale, default_init_loc_fn, latent_layout
from pyro_bnn.guides.registry import GuideFamily
from pyro_bnn.spec import Arg, Form, Integer, Positive

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec

MAX_FLOW_WEIGHTS = 1024
"""Most random weights the ``iaf`` guide takes: with Pyro's default of ``3 D + 1`` hidden units each flow's MADE
network holds about ``9 D^2`` weights (9.4 M at D = 1024). Larger networks take the ``lowrank`` guide."""

DEFAULT_FLOWS = 2
"""Number of autoregressive flows unless told otherwise (each in its own random order of the weights)."""

SUMMARY_SEED = 0
"""The seed of the draws behind a flow's summaries (median, quantiles, moments)."""

MEDIAN_DRAWS = 1000
"""Draws behind :meth:`IAFNormal.median`, :meth:`IAFNormal.quantiles` and :meth:`IAFNormal.loc_scale`: a sample
median of 1000 draws has a standard error of about 0.04 marginal standard deviations."""


def check_flow_size(num_weights: int, hidden: int | None = None, limit: int = MAX_FLOW_WEIGHTS) -> None:
    """Refuses a network too large for the flow's autoregressive networks, or a hidden width below D.

    Args:
        num_weights: D, the network's random weights (:meth:`pyro_bnn.BNN.num_random_parameters`).
        hidden: H, hidden units of each MADE network (None: Pyro's ``3 D + 1``).
        limit: The largest D accepted.

    Raises:
        ValueError: One line naming D and the limit (or H and D).
    """
    if num_weights > limit:
        raise ValueError(
            f"the iaf guide's autoregressive networks grow as D^2 and this network has D={num_weights:,} random "
            f"weights, above its limit of {limit:,}; use the lowrank guide for this network"
        )
    if hidden is not None and hidden < num_weights:
        raise ValueError(
            f"the iaf guide needs hidden >= D (a MADE network cannot be narrower than its input), got hidden={hidden} "
            f"for D={num_weights:,} random weights"
        )


class ElementwiseAffine(TransformModule):
    """``y = loc + exp(log_scale) * x`` elementwise over the last dimension, with learned ``loc`` and ``log_scale``.

    Args:
        loc: ``(D,)`` initial location.
        scale: Initial scale of every element (> 0).
    """

    domain = constraints.real_vector
    codomain = constraints.real_vector
    bijective = True

    def __init__(self, loc: torch.Tensor, scale: float) -> None:
        # cache_size=1: the guide's log q of its own draw then inverts through the cache, and the flows before it
        # see the very tensors they produced (their own inverses are D sequential passes otherwise).
        super().__init__(cache_size=1)
        self.loc = nn.Parameter(loc.detach().clone())
        self.log_scale = nn.Parameter(torch.full_like(loc, math.log(scale)))

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return self.loc + self.log_scale.exp() * x

    def _inverse(self, y: torch.Tensor) -> torch.Tensor:
        return (y - self.loc) * torch.exp(-self.log_scale)

    def log_abs_det_jacobian(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.log_scale.sum().expand(x.shape[:-1])


class IAFNormal(SetUpOnDemand, AutoContinuous):
    """Inverse autoregressive flows over all D latent scalars, ending in a per-scalar affine that starts at the
    network's weights (module docstring).

    Args:
        model: The Pyro model (a :class:`~pyro_bnn.BNN`).
        num_flows: K >= 1 autoregressive flows.
        hidden: H, hidden units of each flow's MADE network (>= D); None for Pyro's ``3 D + 1``.
        init_loc_fn: Initial locations; default the network's initial weights
            (:class:`~pyro_bnn.guides.init_to_network`).
        init_scale: Scale of the final affine at the start (> 0); each stable flow starts close to a scaling by
            ``sigmoid(2) = 0.88``, so the initial marginal standard deviations are about ``0.88^K init_scale``
            (measured: 0.88, 0.77 and 0.68 times ``init_scale`` for K = 1, 2 (the default) and 3).

    Shapes:
        A draw of the flat latent is ``(*lead, D)``; :meth:`median`: ``{site: site_shape}``; :meth:`quantiles`:
        ``{site: (q, *site_shape)}``.
    """

    def __init__(
        self,
        model: Callable,
        *,
        num_flows: int = DEFAULT_FLOWS,
        hidden: int | None = None,
        init_loc_fn: Callable | None = None,
        init_scale: float = 0.1,
    ) -> None:
        num_flows = positive_int(num_flows, "num_flows")
        if hidden is not None:  # None: Pyro's 3 D + 1
            positive_int(hidden, "hidden")
        self.num_flows = num_flows
        self.hidden = hidden
        self.init_scale = check_init_scale(init_scale)
        self.transform: ComposeTransformModule | None = None
        super().__init__(model, init_loc_fn=default_init_loc_fn(model, init_loc_fn))

    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        self.latent_sites = latent_layout(self.prototype_trace)
        dim = self.latent_dim
        if self.hidden is not None and self.hidden < dim:
            raise ValueError(f"hidden must be >= D={dim} (the number of latent scalars), got {self.hidden}")
        init_loc = torch.cat(
            [
                biject_to(site["fn"].support).inv(site["value"].detach()).reshape(-1)
                for _, site in self.prototype_trace.iter_stochastic_nodes()
            ]
        )
        hidden_dims = [self.hidden if self.hidden is not None else 3 * dim + 1]
        flows = [affine_autoregressive(dim, hidden_dims=hidden_dims, stable=True) for _ in range(self.num_flows)]
        parts = [flow.to(device=init_loc.device, dtype=init_loc.dtype) for flow in flows]
        self.transform = ComposeTransformModule([*parts, ElementwiseAffine(init_loc, self.init_scale)])

    def get_base_dist(self) -> dist.Distribution:
        """The standard Normal over D scalars, on the guide's device."""
        loc = self.transform[-1].loc
        return dist.Normal(torch.zeros_like(loc), torch.ones_like(loc)).to_event(1)

    def get_transform(self, *args, **kwargs) -> ComposeTransformModule:
        """The flows and the final affine, applied in that order to a standard Normal draw."""
        return self.transform

    def _draws(self, num_samples: int, args: tuple, kwargs: dict) -> torch.Tensor:
        self._set_up(*args, **kwargs)
        num_samples = positive_int(num_samples, "num_samples")
        # From a fixed seed: the same guide gives the same summaries (its median is the point network, which must
        # be one network), and the caller's random stream is left where it was.
        device = next(self.parameters()).device
        on_cuda = device.type == "cuda"
        with torch.random.fork_rng(devices=[device] if on_cuda else []):
            if on_cuda:
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(SUMMARY_SEED)  # this device's generator only (manual_seed seeds all)
            else:
                torch.random.default_generator.manual_seed(SUMMARY_SEED)
            return self.get_posterior().sample((num_samples,))  # (S, D)

    @torch.no_grad()
    def loc_scale(self, num_samples: int = MEDIAN_DRAWS) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each latent site's marginal mean and standard deviation in its unconstrained space, estimated from
        ``num_samples`` draws (for weight statistics; a run records no ``mean_posterior_sigma`` for a flow).

        A flow's marginals are not Normal, so these are moments, not the parameters of a Normal: the family does
        not declare ``normal-scales``, and pruning by signal-to-noise and the NUTS comparison refuse it.

        Returns:
            ``{site name: (mean, std)}``, both of the site's unconstrained shape, detached.
        """
        draws = self._draws(num_samples, (), {})
        locs, scales = split_sites(self.latent_sites, draws.mean(0)), split_sites(self.latent_sites, draws.std(0))
        return {name: (locs[name], scales[name]) for name in locs}

    @torch.no_grad()
    def median(self, *args, num_samples: int = MEDIAN_DRAWS, **kwargs) -> dict[str, torch.Tensor]:
        """Each latent site's marginal posterior median, estimated from ``num_samples`` draws, in the site's own
        space (a site's bijection is elementwise and increasing, so it maps the median of the unconstrained draws
        to the median of the constrained ones).

        Args:
            *args: The model's arguments, needed only when the guide has not run yet.
            num_samples: Draws to estimate from.
            **kwargs: Likewise.

        Returns:
            ``{site name: median}`` with tensors of the site's shape.
        """
        draws = self._draws(num_samples, args, kwargs)  # first: it sets the guide up (latent_sites) or refuses
        medians = split_sites(self.latent_sites, draws.median(0).values)
        return {site.name: biject_to(site.support)(medians[site.name]) for site in self.latent_sites}

    @torch.no_grad()
    def quantiles(
        self, quantiles: torch.Tensor | list[float], *args, num_samples: int = MEDIAN_DRAWS, **kwargs
    ) -> dict[str, torch.Tensor]:
        """Marginal posterior quantiles of each latent site, estimated from ``num_samples`` draws.

        Args:
            quantiles: Levels in (0, 1), shape ``(q,)``.
            *args: The model's arguments, needed only when the guide has not run yet.
            num_samples: Draws to estimate from.
            **kwargs: Likewise.

        Returns:
            ``{site name: values}`` with values of shape ``(q, *site_shape)``.
        """
        draws = self._draws(num_samples, args, kwargs)
        levels = torch.as_tensor(quantiles, dtype=draws.dtype, device=draws.device)
        values = split_sites(self.latent_sites, draws.quantile(levels, dim=0))
        return {site.name: biject_to(site.support)(values[site.name]) for site in self.latent_sites}


# -------------------------------------------------------------------------------------------- guide family
def _build_iaf(spec: GuideSpec, bnn: BNN) -> IAFNormal:
    options = spec.options
    check_flow_size(bnn.num_random_parameters(), options["hidden"])
    return IAFNormal(
        bnn,
        num_flows=options["flows"],
        hidden=options["hidden"],
        init_scale=options["init scale"],
        init_loc_fn=init_to_network(bnn),
    )


IAF_FAMILY = GuideFamily(
    Form(
        "iaf",
        (Arg("init scale", Positive(float32=True), 0.1),),
        (
            Arg("flows", Integer(minimum=1), DEFAULT_FLOWS, metavar="K"),
            Arg("hidden", Integer(minimum=1), None, metavar="H"),
        ),
        aliases=("flow",),
        example="iaf:0.05,flows=1,hidden=64",
        doc=(
            "K inverse autoregressive flows over all weights, ending in a per-weight affine (IAFNormal). The "
            "affine starts at the network's weights with scale INIT_SCALE; H hidden units per flow (>= D; default "
            f"3 D + 1); cost O(K D H), so networks above {MAX_FLOW_WEIGHTS} random weights are refused (use lowrank)."
        ),
    ),
    build=_build_iaf,
    capabilities={Capability.RANDOM, Capability.JACOBIAN_DELTA},  # AutoContinuous
    check=lambda spec, num_weights: check_flow_size(num_weights, spec.options["hidden"]),
)
"""``--guide iaf[:INIT_SCALE][,flows=K][,hidden=H]`` (or ``flow``; registered in :mod:`pyro_bnn.guides.spec`)."""
