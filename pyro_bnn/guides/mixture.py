"""The implicit-BNN "variational ensemble": a uniform mixture of K diagonal Normals over every node-noise scalar.

``q(z) = (1/K) sum_k N(z; mu_k, diag(sigma_k^2))`` over the D latent scalars of all layers together (a component
is one consistent noise setting of the whole network). Means start at ``N(1, sigma0^2)`` (sigma0 = 0.5 by default;
the authors use 0.75 for VGG) and standard deviations are *drawn* from ``N(0.05, 0.02^2)``, stored as their inverse
softplus and used through softplus, as in the authors' code (trungtrinh44/ibnn).

Training normally goes through :class:`~pyro_bnn.infer.MixtureMeanKL`, which gives each row of the minibatch its
own component and draw. As a Pyro guide it is also a proper one: it samples all D scalars from the mixture as one
auxiliary site (a component drawn uniformly, then a reparameterised Normal draw; the component's law does not
depend on the parameters, so the path gradient is unbiased) and hands each model site its view through a
``Delta``; the auxiliary site's log density is the mixture's, so ``Trace_ELBO`` estimates the true KL(q || p).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger
from torch import nn

from pyro_bnn.checks import float32_holds_finite, positive_int
from pyro_bnn.guides.capabilities import BatchedLayout, ScaleMap
from pyro_bnn.guides.flat import FlatSite, split_sites

MIN_INIT_SCALE = 1e-3
"""Floor of the drawn initial standard deviations. N(0.05, 0.02^2) is negative with probability 0.6 %, and the
inverse softplus of a negative number is NaN (the authors' code does not guard against it); such draws start at
this value instead."""


def samples_for_components(num_samples: int, num_components: int) -> int:
    """The smallest multiple of K = ``num_components`` that is >= ``num_samples``: a default number of prediction
    samples that takes the same number from each component (sample i comes from component ``i mod K``), e.g. 102
    for 100 samples of K = 3 components (100 for K = 4).

    Raises:
        ValueError: ``num_samples`` or ``num_components`` is not an int >= 1.
    """
    num_samples = positive_int(num_samples, "num_samples")
    num_components = positive_int(num_components, "num_components")
    return num_components * -(-num_samples // num_components)


class EqualMixtureNormal(TorchDistribution):
    """``(1/K) sum_k Normal(locs[k], scales[k])`` over a vector of D scalars, with a reparameterised sample.

    Args:
        locs: ``(K, D)`` component means.
        scales: ``(K, D)`` component standard deviations.

    Shapes:
        ``event_shape = (D,)``; ``batch_shape`` is ``()`` unless expanded (a sample plate makes it ``(S, 1)``).
    """

    arg_constraints = {"locs": constraints.real, "scales": constraints.positive}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, locs: torch.Tensor, scales: torch.Tensor, batch_shape=(), validate_args=None):
        if locs.dim() != 2 or locs.shape != scales.shape:
            raise ValueError(f"locs and scales must both be (K, D), got {tuple(locs.shape)} and {tuple(scales.shape)}")
        self.locs, self.scales = locs, scales
        super().__init__(torch.Size(batch_shape), locs.shape[-1:], validate_args=validate_args)

    @property
    def num_components(self) -> int:
        return self.locs.shape[0]

    def expand(self, batch_shape, _instance=None):
        return EqualMixtureNormal(self.locs, self.scales, batch_shape, validate_args=False)

    def rsample(self, sample_shape=()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.batch_shape
        component = torch.randint(self.num_components, shape, device=self.locs.device)
        eps = torch.randn(shape + self.event_shape, dtype=self.locs.dtype, device=self.locs.device)
        return self.locs[component] + self.scales[component] * eps

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        per_component = dist.Normal(self.locs, self.scales).log_prob(value.unsqueeze(-2)).sum(-1)  # (..., K)
        return per_component.logsumexp(-1) - math.log(self.num_components)

    @property
    def mean(self) -> torch.Tensor:
        return self.locs.mean(0).expand(self.batch_shape + self.event_shape)


class NodeNoiseMixture(AutoGuide):
    """K-component mixture guide over the global latent sites of a node-noise BNN (the "variational ensemble").

    Args:
        model: The Pyro model, a :class:`~pyro_bnn.BNN` whose random sites are node noise.
        num_components: K.
        init_loc_std: sigma0 >= 0: component means start at ``N(1, sigma0^2)`` (0: all at 1).
        init_scale: ``(mean, std)`` of the Normal the initial standard deviations are drawn from.

    Shapes:
        ``locs``, ``scale_raw`` and :meth:`component_loc_scale`'s tensors: ``(K, D)`` with D = :attr:`num_latents`;
        :meth:`split` maps ``(*lead, D)`` to ``{site: (*lead, *site_shape)}``; :meth:`draw` returns
        ``{site: (S, 1, *site_shape)}``.
    """

    batched_layout = BatchedLayout(ScaleMap.SOFTPLUS, loc="locs", raw_scale="scale_raw", components=True)
    """Batched runs stack ``locs`` and ``scale_raw`` as ``(R, K, D)`` (:mod:`pyro_bnn.batched`)."""

    def __init__(
        self,
        model: Callable,
        num_components: int = 4,
        *,
        init_loc_std: float = 0.5,
        init_scale: tuple[float, float] = (0.05, 0.02),
    ) -> None:
        num_components = positive_int(num_components, "num_components")
        # 0 is meaningful: every component starts at the means 1 (the deterministic network), and the components
        # still part through their own initial scales, rows and draws. A bool is no standard deviation.
        number = isinstance(init_loc_std, (int, float)) and not isinstance(init_loc_std, bool)
        if not (number and 0 <= init_loc_std < math.inf and float32_holds_finite(init_loc_std)):
            raise ValueError(f"init_loc_std must be a finite number >= 0 that float32 holds, got {init_loc_std!r}")
        pair = init_scale.tolist() if hasattr(init_scale, "tolist") else init_scale  # a tensor or array of two
        numbers = isinstance(pair, (tuple, list)) and len(pair) == 2
        if not (numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)):
            raise ValueError(f"init_scale must be a pair of numbers (mean > 0, std >= 0), got {init_scale!r}")
        scale_mean, scale_std = (float(v) for v in pair)
        if not (0 < scale_mean < math.inf and 0 <= scale_std < math.inf):
            raise ValueError(f"init_scale must be (mean > 0, std >= 0), got {init_scale!r}")
        self.num_components = num_components
        self.init_loc_std = float(init_loc_std)
        self.init_scale = (scale_mean, scale_std)
        self.sites: tuple[FlatSite, ...] = ()
        super().__init__(model)

    @staticmethod
    def _prototype_value(model: Callable, site: dict) -> torch.Tensor:
        """The value the prototype trace records at ``site`` of ``model``; the guide reads only its shape, dtype and
        device.

        The prior's draw, taken as Pyro's tracing takes it (so a seeded run draws the same numbers as before); a prior
        that cannot be sampled (the improper flat prior) gives the model's initial value instead (a BNN's own
        tensor, 1 for node noise, on its device), or zeros of the site's shape for another model.
        """
        try:
            return site["fn"](*site["args"], **site["kwargs"])
        except NotImplementedError:
            initial = getattr(model, "initial_values", None)
            values = initial() if callable(initial) else {}
            if site["name"] in values:
                return values[site["name"]].detach().clone()
            return torch.zeros(site["fn"].batch_shape + site["fn"].event_shape)

    def _setup_prototype(self, *args, **kwargs) -> None:
        # AutoGuide traces self.model; for that one trace it runs under an InitMessenger, so that a prior that
        # cannot be sampled (flat) is not drawn from (the Pyro guides' init_loc_fn does the same for theirs).
        # AutoGuide has no public way to wrap the model it traces (`model` is a read-only property over the private
        # `_model` tuple, and a handler used as a context manager here is stopped by the poutine.block around its
        # trace), so this is the one place that swaps `_model`, restored below.
        model = self.model
        self._model = (InitMessenger(functools.partial(self._prototype_value, model))(model),)
        try:
            super()._setup_prototype(*args, **kwargs)
        finally:
            self._model = (model,)
        sites, start = [], 0
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            frames = [frame.name for frame in site["cond_indep_stack"]]
            if frames:
                raise ValueError(
                    f"NodeNoiseMixture covers global latent sites only, but {name!r} lies in plate(s) {frames}"
                )
            shape = site["value"].shape
            flat_site = FlatSite(name, start, start + shape.numel(), shape, len(shape), site["fn"].support)
            if not flat_site.is_real:
                raise ValueError(f"NodeNoiseMixture needs real-valued sites; {name!r} has support {flat_site.support}")
            sites.append(flat_site)
            start += shape.numel()
        if not sites:
            raise ValueError("NodeNoiseMixture found no latent site in the model (did the network get node noise?)")
        self.sites = tuple(sites)
        value = self.prototype_trace.nodes[sites[0].name]["value"]
        shape = (self.num_components, start)
        locs = 1.0 + self.init_loc_std * torch.randn(shape, dtype=value.dtype, device=value.device)
        scales = self.init_scale[0] + self.init_scale[1] * torch.randn(shape, dtype=value.dtype, device=value.device)
        scales = scales.clamp_min(MIN_INIT_SCALE)
        self.locs = nn.Parameter(locs)
        self.scale_raw = nn.Parameter(scales.expm1().log())  # inverse softplus

    def _set_up(self) -> None:
        if self.prototype_trace is None:
            raise ValueError(f"{type(self).__name__} has no parameters yet: run it (or train) once before reading them")

    # ------------------------------------------------------------------------------------------ flat access
    @property
    def num_latents(self) -> int:
        """D, the number of latent scalars of one component."""
        return self.sites[-1].stop if self.sites else 0

    def component_loc_scale(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every component's means and standard deviations ``softplus(scale_raw)``, both ``(K, D)`` and live."""
        self._set_up()
        return self.locs, nn.functional.softplus(self.scale_raw)

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-site views ``{site: (*lead, *site_shape)}`` of a flat tensor ``(*lead, D)``."""
        return split_sites(self.sites, flat)

    def mixture_mean(self) -> dict[str, torch.Tensor]:
        """The mixture's mean (the mean of the K component means) per site, detached copies of the sites' shapes."""
        self._set_up()
        return {name: value.clone() for name, value in self.split(self.locs.detach().mean(0)).items()}

    @torch.no_grad()
    def median(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """The point network of :func:`~pyro_bnn.predict.predict_posterior_mean`: the mixture's *mean* per site
        (a mixture's median has no closed form; for one component the two agree)."""
        if self.prototype_trace is None and (args or kwargs):
            self._setup_prototype(*args, **kwargs)
        return self.mixture_mean()

    @torch.no_grad()
    def draw(self, num_samples: int, *, start: int = 0) -> dict[str, torch.Tensor]:
        """Samples ``start .. start + num_samples`` of the posterior, sample i from component ``i mod K``: S = K n
        samples hold n from every component (how the authors predict, with n = 5).

        Returns:
            ``{site name: (S, 1, *site_shape)}`` (the 1 is the data plate's slot, :mod:`pyro_bnn.sites`).
        """
        locs, scales = self.component_loc_scale()
        component = torch.arange(start, start + num_samples, device=locs.device) % self.num_components
        eps = torch.randn(num_samples, 1, self.num_latents, dtype=locs.dtype, device=locs.device)
        return self.split(torch.addcmul(locs[component].unsqueeze(1), scales[component].unsqueeze(1), eps))

    # ------------------------------------------------------------------------------------------- Pyro guide
    def forward(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Draws all latents from the mixture (one auxiliary site) and samples each model site as its view."""
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        locs, scales = self.component_loc_scale()
        flat = pyro.sample("_node_noise_mixture", EqualMixtureNormal(locs, scales), infer={"is_auxiliary": True})
        views = self.split(flat)
        return {
            site.name: pyro.sample(site.name, dist.Delta(views[site.name], event_dim=site.event_dim))
            for site in self.sites
        }
