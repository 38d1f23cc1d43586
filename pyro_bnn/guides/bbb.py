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
from pyro.infer.autoguide import AutoGuide, AutoNormal
from pyro.infer.autoguide.initialization import init_to_median
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroModule, PyroParam
from torch.distributions import biject_to


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


class BayesByBackprop(AutoNormal):
    """Mean-field Normal guide with ``sigma = softplus(rho)`` and Blundell et al.'s initialisation.

    Every latent site gets ``q(w) = Normal(mu, softplus(rho)^2)`` element-wise, with ``mu ~ U(loc_init)`` and
    ``rho ~ U(rho_init)`` at initialisation (``U(-0.2, 0.2)`` and ``U(-5, -4)`` by default, so sigma starts near
    0.007-0.018). Sites with real support are sampled directly from that Normal, so
    :class:`~pyro.infer.TraceMeanField_ELBO` can use the analytic KL; constrained sites (hierarchical scales) get the
    Normal in unconstrained space pushed through ``biject_to(support)`` (a transformed distribution, Monte Carlo KL).

    Args:
        model: The Pyro model (a :class:`pyro_bnn.BNN`).
        loc_init: Interval of the uniform initialisation of mu, or None to use ``init_loc_fn`` instead.
        rho_init: Interval of the uniform initialisation of rho.
        init_loc_fn: Values of the prototype trace Pyro runs to find the sites, which are the initial mu when
            ``loc_init`` is None and for constrained sites (default: prior median; use
            :class:`~pyro_bnn.guides.init_to_network` with a flat prior, which cannot be sampled).
        create_plates: As in :class:`~pyro.infer.autoguide.AutoNormal`.
    """

    def __init__(
        self,
        model: Callable,
        *,
        loc_init: tuple[float, float] | None = (-0.2, 0.2),
        rho_init: tuple[float, float] = (-5.0, -4.0),
        init_loc_fn: Callable = init_to_median,
        create_plates: Callable | None = None,
    ) -> None:
        self._loc_init = None if loc_init is None else _check_interval("loc_init", loc_init)
        self._rho_init = _check_interval("rho_init", rho_init)
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)

    def _setup_prototype(self, *args, **kwargs) -> None:
        # Skip AutoNormal's parameter creation: only its prototype trace is wanted.
        AutoGuide._setup_prototype(self, *args, **kwargs)
        self._event_dims = {}
        self.locs = PyroModule()
        self.rhos = PyroModule()
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            init_loc = biject_to(site["fn"].support).inv(site["value"].detach()).detach()
            self._event_dims[name] = site["fn"].event_dim + init_loc.dim() - site["value"].dim()
            if self._loc_init is not None and _is_real(site["fn"].support):
                init_loc = torch.empty_like(init_loc).uniform_(*self._loc_init)
            init_rho = torch.empty_like(init_loc).uniform_(*self._rho_init)
            deep_setattr(self.locs, name, PyroParam(init_loc, constraints.real, self._event_dims[name]))
            deep_setattr(self.rhos, name, PyroParam(init_rho, constraints.real, self._event_dims[name]))

    def _get_loc_and_scale(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return attrgetter(name)(self.locs), F.softplus(attrgetter(name)(self.rhos))

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
                loc, scale = self._get_loc_and_scale(name)
                q = dist.Normal(loc, scale).to_event(self._event_dims[name])
                if _is_real(site["fn"].support):
                    result[name] = pyro.sample(name, q)
                    continue
                # A transformed Normal keeps the log-Jacobian inside log q, so every ELBO (TraceMeanField's Monte
                # Carlo fallback included) sees the right density for constrained sites such as layer scales.
                transform = biject_to(site["fn"].support)
                result[name] = pyro.sample(name, dist.TransformedDistribution(q, transform))
        return result
