"""Training objectives: one small protocol, and the Monte Carlo ELBOs behind it.

An :class:`Objective` takes the model, the guide, one minibatch and the KL weight, and returns an
:class:`ObjectiveTerms`: the loss to differentiate and its two parts as tensors,

* ``data_term``: ``-E_q[log p(y | latents)]`` of the site the likelihood tagged, scaled by the data plate's N/B;
* ``kl_term``: everything else, weighted by the KL weight: ``E_q[log q - log p]`` of every latent site, plus any
  ``pyro.factor`` term (a factor is a prior-side term: it is annealed and counted here).

so that ``loss == data_term + kl_term``. The trainer needs nothing else, so a faster implementation of the same
objective (closed-form KL, a fused sampler) or another objective (the node-noise mixture-mean KL) plugs in without
the trainer reaching into an inference engine.

The two implementations here compute Pyro's :class:`~pyro.infer.Trace_ELBO` and
:class:`~pyro.infer.TraceMeanField_ELBO` surrogate losses from traces taken with public ``poutine`` handlers; their
values and gradients equal ``ELBO.differentiable_loss`` under the same seed (a test holds them to 1e-6). They need a
fully reparameterised guide, which every pyro_bnn guide is.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.infer.util import is_validation_enabled
from pyro.poutine.util import prune_subsample_sites
from pyro.util import check_model_guide_match, check_site_shape
from torch.distributions import kl_divergence

from pyro_bnn.checks import positive_int
from pyro_bnn.guides.capabilities import Capability
from pyro_bnn.guides.registry import guide_families
from pyro_bnn.infer.annealing import scale_latents
from pyro_bnn.infer.objective_registry import BatchedForm, make_objective, register_objective
from pyro_bnn.priors import parse_prior
from pyro_bnn.sites import MAX_PLATE_NESTING, is_likelihood_site, sample_plate
from pyro_bnn.spec.docs import member_doc

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec

__all__ = ["ElboKind", "MeanFieldELBO", "Objective", "ObjectiveTerms", "TraceELBO", "make_objective"]


class ObjectiveTerms(NamedTuple):
    """One evaluation of an objective on a minibatch.

    Attributes:
        loss: The scalar to minimise (differentiable), ``data_term + kl_term``.
        data_term: Scalar, detached: minus the expected log-likelihood, scaled to the data set.
        kl_term: Scalar, detached: the weighted KL part (latent sites and factors).
    """

    loss: torch.Tensor
    data_term: torch.Tensor
    kl_term: torch.Tensor


@runtime_checkable
class Objective(Protocol):
    """What the trainer calls once per step.

    ``objective(model, guide, x, y, kl_weight) -> ObjectiveTerms``, with ``x: (B, ...)``, ``y: (B, ...)`` and
    ``kl_weight`` the factor on the KL part (annealing times minibatch weighting; never on the data term).

    An objective may also define ``validate(model, guide, x, y)``, which the trainer calls once before training to
    refuse a model/guide pair it cannot score.
    """

    def __call__(
        self, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor, kl_weight: float
    ) -> ObjectiveTerms: ...


class ElboKind(str, Enum):
    """The built-in objectives by name (``--elbo``); each is registered where it is defined
    (:mod:`pyro_bnn.infer.objective_registry`), where other objectives can be added."""

    AUTO = "auto"
    """:class:`~pyro_bnn.infer.auto_objective.AutoELBO`, the default: ``fast`` for the ``flat`` guide on a model it
    can score (no hierarchical prior, no per-example latents), ``trace`` otherwise; the same objective in
    expectation either way."""
    TRACE = "trace"
    """:class:`TraceELBO`: Monte Carlo estimate of the KL from the sampled latents (Pyro's ``Trace_ELBO``)."""
    MEAN_FIELD = "meanfield"
    """:class:`MeanFieldELBO`: the analytic KL where it is registered (Normal guide sites against Normal priors, as
    :class:`~pyro_bnn.guides.BayesByBackprop` samples them), Monte Carlo elsewhere (Pyro's ``TraceMeanField_ELBO``).
    Pyro's AutoNormal samples every site through a ``Delta``, so with it this equals ``trace``; with a constrained
    site (a hierarchical scale) it would drop the Jacobian, and :meth:`MeanFieldELBO.validate` refuses it."""
    FAST = "fast"
    """:class:`~pyro_bnn.infer.FastMeanFieldELBO` for the ``flat`` guide: one random draw over all weights used as an
    antithetic pair (half the batch sees ``loc + scale * eps``, the other half ``loc - scale * eps``) and a
    closed-form KL where the prior allows it. Equal in expectation, value and gradients, to ``trace``. With several
    particles, or a network with batch normalisation, each particle is one draw shared by the batch instead."""
    FAST_SINGLE = "fast-single"
    """The fast objective with one draw shared by the whole batch (no antithetic pair): the cheapest step, with a
    noisier gradient."""
    FAST_LOCAL = "fast-local"
    """The fast objective with local reparameterisation of the random ``nn.Linear`` layers (independent
    pre-activation noise per row)."""
    FAST_FLIPOUT = "fast-flipout"
    """The fast objective with flipout on the random ``nn.Linear`` layers (one shared perturbation decorrelated per
    row by random signs; one particle)."""

    MIXTURE = "mixture"
    """:class:`~pyro_bnn.infer.MixtureMeanKL`, the implicit-BNN objective of the ``mixture`` guide on a node-noise
    BNN: every example repeated S times over the mixture's components, and the closed-form KL of the mixture's
    mean (``auto`` picks it for that guide)."""

    @property
    def is_fast(self) -> bool:
        """Whether this is one of the fused objectives, which need a flat Normal guide (deprecated: ask
        ``objective_entry(name).requires``)."""
        return self.value.startswith("fast")


class TraceELBO:
    """Pyro's ``Trace_ELBO`` as an :class:`Objective`: ``-ELBO = E_q[log q(z) - log p(y, z)]`` by Monte Carlo.

    Args:
        num_particles: Draws of the latents per step; the loss is their mean.
        vectorize_particles: Draw all particles at once in a sample plate (:data:`pyro_bnn.sites.SAMPLE_DIM`)
            instead of a Python loop.
    """

    analytic_kl = False

    def __init__(self, num_particles: int = 1, vectorize_particles: bool = False) -> None:
        num_particles = positive_int(num_particles, "num_particles")
        self.num_particles = num_particles
        self.vectorize_particles = bool(vectorize_particles) and num_particles > 1

    def batched_form(self) -> BatchedForm:
        """What batched runs compute for this objective: ``num_particles`` independent draws of every weight, the
        KL by ``log q - log p`` (the analytic KL for :class:`MeanFieldELBO`)."""
        return BatchedForm(antithetic=False, closed_form_kl=self.analytic_kl, particles=self.num_particles)

    def __call__(
        self, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor, kl_weight: float = 1.0
    ) -> ObjectiveTerms:
        with scale_latents(kl_weight):
            if self.vectorize_particles:
                # left of every plate the model opens: a BNN's one data plate, a composed model's own
                nesting = getattr(model, "max_plate_nesting", MAX_PLATE_NESTING)
                model_, guide_ = (sample_plate(self.num_particles, dim=-nesting - 1)(fn) for fn in (model, guide))
                particles = [self._traces(model_, guide_, x, y, nesting + 1)]
                count = self.num_particles
            else:
                particles = [self._traces(model, guide, x, y) for _ in range(self.num_particles)]
                count = len(particles)
        elbo = data = 0.0
        for model_trace, guide_trace in particles:
            particle_elbo, particle_data = self._particle(model_trace, guide_trace)
            elbo, data = elbo + particle_elbo, data + particle_data
        loss = -elbo / count
        data_term = (-data / count).detach()
        return ObjectiveTerms(loss, data_term, loss.detach() - data_term)

    def validate(self, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
        """Refuses guides with a latent site that cannot be reparameterised (this objective has no score-function
        term)."""
        with torch.no_grad():
            _, guide_trace = self._traces(model, guide, x, y)
        for name, site in guide_trace.nodes.items():
            if site["type"] == "sample" and not site["is_observed"] and not site["fn"].has_rsample:
                raise ValueError(
                    f"{type(self).__name__} needs a reparameterisable guide, but the guide samples {name!r} from "
                    f"{type(site['fn']).__name__}, which has no rsample"
                )

    def _traces(self, model, guide, x, y, nesting: int | None = None):
        """A guide trace and the model replayed against it, with log densities computed (Pyro's public handlers).

        ``nesting``: the plates the traces may have; by default the model's own (a composed model, a
        :class:`~pyro_bnn.infer.trainable.TrainableModel`, may open more than a BNN's one data plate)."""
        guide_trace = poutine.trace(guide).get_trace(x, y)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y)
        if nesting is None:
            nesting = getattr(model, "max_plate_nesting", MAX_PLATE_NESTING)
        if is_validation_enabled():
            check_model_guide_match(model_trace, guide_trace, nesting)
        guide_trace = prune_subsample_sites(guide_trace)
        model_trace = prune_subsample_sites(model_trace)
        model_trace.compute_log_prob()
        guide_trace.compute_log_prob()
        if is_validation_enabled():
            for trace in (model_trace, guide_trace):
                for site in trace.nodes.values():
                    if site["type"] == "sample":
                        check_site_shape(site, nesting)
        return model_trace, guide_trace

    def _particle(self, model_trace, guide_trace) -> tuple[torch.Tensor, torch.Tensor]:
        """This particle's ELBO and its data part (both summed over the sample plate, if any)."""
        data = _likelihood_log_prob(model_trace)
        elbo = model_trace.log_prob_sum() - guide_trace.log_prob_sum()
        return elbo, data


class MeanFieldELBO(TraceELBO):
    """Pyro's ``TraceMeanField_ELBO`` as an :class:`Objective`: the analytic ``KL(q || p)`` for each latent site where
    torch or Pyro registers one, the Monte Carlo estimate ``log q - log p`` elsewhere.

    Args:
        num_particles: As in :class:`TraceELBO`.
        vectorize_particles: As in :class:`TraceELBO`.
    """

    analytic_kl = True

    def choice_refusal(self, guide: GuideSpec, prior: str) -> str | None:
        """Why this objective cannot train the ``--guide`` ``guide`` under the ``--prior`` ``prior`` (a clause after
        ``"elbo 'meanfield' "``), or None: what run validation asks before any data is loaded. A guide that samples
        constrained sites through a Jacobian-carrying Delta (:attr:`~Capability.JACOBIAN_DELTA`) cannot be scored
        under a prior that has such sites (a hierarchical prior's per-layer scale), as :meth:`validate` finds in a
        built pair."""
        if not guide.offers(Capability.JACOBIAN_DELTA) or not parse_prior(prior).layer_hyperpriors(""):
            return None
        others = [
            family.name
            for family in guide_families()
            if family.offers(Capability.RANDOM)
            and not family.offers(Capability.JACOBIAN_DELTA)
            and not family.offers(Capability.NODE_NOISE_ONLY)
        ]
        return (
            f"cannot score guide {str(guide)!r} under prior {prior!r}: the guide samples the prior's per-layer scale "
            "sites through a Delta whose Jacobian the mean-field KL ignores; use --elbo trace, or a guide that samples "
            f"them as transformed Normals ({', '.join(others)})"
        )

    def validate(self, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
        """Also refuses a guide that samples a constrained site as ``Delta(value, log_density=log|J|)`` (Pyro's
        AutoNormal does), whose Jacobian the analytic KL of a Delta would drop."""
        super().validate(model, guide, x, y)
        with torch.no_grad():
            _, guide_trace = self._traces(model, guide, x, y)
        for name, site in guide_trace.nodes.items():
            log_density = getattr(site.get("fn"), "log_density", None)
            if site["type"] == "sample" and isinstance(log_density, torch.Tensor) and bool((log_density != 0).any()):
                raise ValueError(
                    f"elbo='meanfield' cannot score the guide's constrained site {name!r}: it is sampled through a "
                    "Delta whose Jacobian the mean-field KL ignores. Use elbo='trace', or the bbb guide."
                )

    def _particle(self, model_trace, guide_trace) -> tuple[torch.Tensor, torch.Tensor]:
        data = _likelihood_log_prob(model_trace)
        elbo = 0.0
        for name, model_site in model_trace.nodes.items():
            if model_site["type"] != "sample":
                continue
            if model_site["is_observed"]:  # the likelihood, and pyro.factor terms
                elbo = elbo + model_site["log_prob_sum"]
                continue
            guide_site = guide_trace.nodes[name]
            try:
                kl = kl_divergence(guide_site["fn"], model_site["fn"])
            except NotImplementedError:
                elbo = elbo + model_site["log_prob_sum"] - guide_site["log_prob_sum"]
                continue
            kl = scale_and_mask(kl, scale=guide_site["scale"], mask=guide_site["mask"])
            kl_sum = kl.sum() if torch.is_tensor(kl) else kl * guide_site["fn"].batch_shape.numel()
            elbo = elbo - kl_sum
        for name, guide_site in guide_trace.nodes.items():  # auxiliary guide sites the model does not have
            if guide_site["type"] == "sample" and name not in model_trace.nodes:
                elbo = elbo - guide_site["log_prob_sum"]
        return elbo, data


def _likelihood_log_prob(model_trace) -> torch.Tensor:
    """Sum of the (N/B-scaled) log densities of the sites the likelihood tagged."""
    sites = [site["log_prob_sum"] for site in model_trace.nodes.values() if is_likelihood_site(site)]
    if not sites:
        raise ValueError(
            "the model has no likelihood site: the data site must come from a pyro_bnn Likelihood (which tags it), "
            "and the targets y must be given"
        )
    return sum(sites)


register_objective(
    ElboKind.TRACE, options=("num_particles", "vectorize_particles"), doc=member_doc(ElboKind.TRACE), batched=True
)(TraceELBO)
register_objective(
    ElboKind.MEAN_FIELD,
    options=("num_particles", "vectorize_particles"),
    excludes={Capability.NORMAL_MIXTURE},  # the mixture's auxiliary site has no analytic KL against anything
    doc=member_doc(ElboKind.MEAN_FIELD),
    batched=True,
)(MeanFieldELBO)
