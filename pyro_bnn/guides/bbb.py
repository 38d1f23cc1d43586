"""Bayes by Backprop: the mean-field Gaussian guide of Blundell et al. (2015)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from operator import attrgetter

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median
from pyro.infer.autoguide.utils import deep_setattr, helpful_support_errors
from pyro.nn import PyroModule, PyroParam
from torch.distributions import biject_to

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.capabilities import BatchedLayout, ScaleMap
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.inspect import NormalQuantiles


def _check_interval(name: str, bounds: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(b) for b in bounds)
    if not low <= high:
        raise ValueError(f"{name} must be a (low, high) interval with low <= high, got {bounds!r}")
    return low, high


def _is_real(support: constraints.Constraint) -> bool:
    """True for the real line, also when wrapped as ``independent(real, n)`` (a weight tensor's support)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


class BayesByBackprop(NormalQuantiles, AutoGuide):
    """Mean-field Normal guide with ``sigma = softplus(rho)`` and Blundell et al.'s initialisation.

    Every latent site gets ``q(w) = Normal(mu, softplus(rho)^2)`` element-wise, with ``mu ~ U(loc_init)`` and
    ``rho ~ U(rho_init)`` at initialisation (``U(-0.2, 0.2)`` and ``U(-5, -4)`` by default, so sigma starts near
    0.007-0.018). Sites with real support are sampled directly from that Normal, so
    :class:`~pyro.infer.TraceMeanField_ELBO` can use the analytic KL; constrained sites (hierarchical scales) get the
    Normal in unconstrained space pushed through ``biject_to(support)`` (a transformed distribution, Monte Carlo KL).

    The parameters live in two :class:`~pyro.nn.PyroModule` s, ``locs`` (mu) and ``rhos`` (rho), with one
    attribute per site nested at the dots of its name (``guide.locs.get_submodule("0").weight``), so a state dict
    holds ``locs.<site>_unconstrained`` and ``rhos.<site>_unconstrained``. Read them through :meth:`loc_scale`.

    Args:
        model: The Pyro model (a :class:`pyro_bnn.BNN`).
        loc_init: Interval of the uniform initialisation of mu, or None to use ``init_loc_fn`` instead.
        rho_init: Interval of the uniform initialisation of rho.
        init_loc_fn: Values of the prototype trace Pyro runs to find the sites, which are the initial mu when
            ``loc_init`` is None and for constrained sites (a hierarchical scale). Default: the network's own initial
            weights for a BNN (:class:`~pyro_bnn.guides.init_to_network`, other sites at the prior median), so a
            flat prior, which cannot be sampled, works; the prior median for another model.
        create_plates: As in :class:`~pyro.infer.autoguide.AutoNormal`.
    """

    batched_layout = BatchedLayout(
        ScaleMap.SOFTPLUS, loc="locs.{site}_unconstrained", raw_scale="rhos.{site}_unconstrained"
    )
    """Batched runs stack each weight site's mu and rho (:class:`~pyro_bnn.guides.capabilities.BatchedLayout`)."""

    def __init__(
        self,
        model: Callable,
        *,
        loc_init: tuple[float, float] | None = (-0.2, 0.2),
        rho_init: tuple[float, float] = (-5.0, -4.0),
        init_loc_fn: Callable | None = None,
        create_plates: Callable | None = None,
    ) -> None:
        self._loc_init = None if loc_init is None else _check_interval("loc_init", loc_init)
        self._rho_init = _check_interval("rho_init", rho_init)
        if init_loc_fn is None:  # the mu of real sites still come from U(loc_init); see the docstring
            init_loc_fn = init_to_network(model) if isinstance(model, BNN) else init_to_median
        self.init_loc_fn = init_loc_fn
        super().__init__(InitMessenger(init_loc_fn)(model), create_plates=create_plates)

    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        self._event_dims: dict[str, int] = {}
        self.locs = PyroModule()
        self.rhos = PyroModule()
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            with helpful_support_errors(site):
                init_loc = biject_to(site["fn"].support).inv(site["value"].detach()).detach()
            # The unconstrained event dims can differ from the site's own (a simplex loses one dimension).
            self._event_dims[name] = site["fn"].event_dim + init_loc.dim() - site["value"].dim()
            if self._loc_init is not None and _is_real(site["fn"].support):
                init_loc = torch.empty_like(init_loc).uniform_(*self._loc_init)
            init_rho = torch.empty_like(init_loc).uniform_(*self._rho_init)
            deep_setattr(self.locs, name, PyroParam(init_loc, constraints.real, self._event_dims[name]))
            deep_setattr(self.rhos, name, PyroParam(init_rho, constraints.real, self._event_dims[name]))

    def _site_loc_scale(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        # attrgetter follows the dots that deep_setattr nested the site name at.
        return attrgetter(name)(self.locs), F.softplus(attrgetter(name)(self.rhos))

    def loc_scale(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each latent site's variational mu and sigma = softplus(rho), in the site's unconstrained space.

        The tensors are live: gradients flow back to the parameters (detach them to keep values).

        Returns:
            ``{site name: (loc, scale)}``, both of the site's unconstrained shape.

        Raises:
            ValueError: The guide has not been run yet, so it has no parameters.
        """
        if self.prototype_trace is None:
            raise ValueError(f"{type(self).__name__} has no parameters yet: run it (or train) once before reading them")
        return {name: self._site_loc_scale(name) for name, _ in self.prototype_trace.iter_stochastic_nodes()}

    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Samples every latent site; returns ``{site name: value}``."""
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        plates = self._create_plates(*args, **kwargs)
        result = {}
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            with ExitStack() as stack:
                for frame in site["cond_indep_stack"]:
                    if frame.vectorized:
                        stack.enter_context(plates[frame.name])
                loc, scale = self._site_loc_scale(name)
                q = dist.Normal(loc, scale).to_event(self._event_dims[name])
                if _is_real(site["fn"].support):
                    result[name] = pyro.sample(name, q)
                    continue
                # A transformed Normal keeps the log-Jacobian inside log q, so every ELBO (TraceMeanField's Monte
                # Carlo fallback included) sees the right density for constrained sites such as layer scales.
                transform = biject_to(site["fn"].support)
                result[name] = pyro.sample(name, dist.TransformedDistribution(q, transform))
        return result

    @torch.no_grad()
    def median(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Each latent site's posterior median in the site's own (constrained) space: ``biject_to(support)(mu)``.

        Args:
            *args: The model's arguments, needed only when the guide has not run yet.
            **kwargs: Likewise.

        Returns:
            ``{site name: median}`` with tensors of the site's shape, detached.
        """
        self._set_up(*args, **kwargs)
        medians = {}
        for name, (loc, _) in self.loc_scale().items():
            median = biject_to(self.prototype_trace.nodes[name]["fn"].support)(loc)
            medians[name] = median.clone() if median is loc else median
        return medians
