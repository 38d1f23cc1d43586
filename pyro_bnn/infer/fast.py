"""A fused mean-field ELBO: one draw of every weight, closed-form KL, no Pyro trace in the training step.

:class:`FastMeanFieldELBO` computes the same objective as :class:`~pyro_bnn.infer.TraceELBO` (equal in
expectation, loss and gradients) for a :class:`~pyro_bnn.BNN` with a :class:`~pyro_bnn.guides.FlatMeanField` guide,
at the cost of a Bayes-by-Backprop step written in plain torch:

* all D weights come from one standard normal draw (:func:`~pyro_bnn.rng.standard_normal`, spread over
  the CPU cores) and one ``exp`` over the guide's flat ``loc`` / ``log_scale``, in one autograd node with the
  closed-form KL (:mod:`pyro_bnn.infer.fused_draw`), and the network runs on per-site views of them
  (``bnn.apply_parameters``);
* the data term is the likelihood's ``log_likelihood`` times the data plate's scale (``N / B``, or 1 for
  ``kl_scale="paper"``), read from ``bnn.likelihood.plate`` so the rule stays in one place;
* the KL is summed over every weight: in closed form against Normal priors, by Monte Carlo ``log q - log p`` of the
  drawn weights against any other prior (Laplace, Cauchy, the scale mixture, flat).

Optionally (``local_reparameterization=True``) ``nn.Linear`` layers sample their pre-activations instead of their
weights (Kingma et al., 2015): mean ``x @ mu.T + mu_b``, variance ``x^2 @ (sigma^2).T + sigma_b^2``. The expected
objective is the same; the rows of a minibatch get independent noise (which lowers the variance of the gradient for
large batches) and no weight noise is drawn for those layers. With ``flipout=True`` (Wen et al., 2018) the same
layers run with their mean weights plus one shared perturbation decorrelated per row by random signs
(:mod:`pyro_bnn.infer.local_reparam`); also the same expected objective.

Models it cannot score this way (hierarchical priors, per-example latent sites, a forward that adds sites) are
refused by :meth:`FastMeanFieldELBO.validate`, which the trainer calls once, with one line saying why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

import torch
from pyro import poutine

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.guides.capabilities import Capability, FlatNormalPosterior
from pyro_bnn.infer.annealing import check_kl_weight
from pyro_bnn.infer.fast_checks import check_pair, check_traced_sites, prior_refusal
from pyro_bnn.infer.fast_plan import ScoringPlan, build_plan, prior_key
from pyro_bnn.infer.fused_draw import (
    draw_antithetic_with_normal_kl,
    draw_with_normal_kl,
    normal_segments_kl,
)
from pyro_bnn.infer.local_reparam import (
    flipout_hook,
    local_noise_hook,
    run_with_linear_noise,
)
from pyro_bnn.infer.objective_registry import BatchedForm, register_objective
from pyro_bnn.infer.objectives import ElboKind, ObjectiveTerms
from pyro_bnn.rng import standard_normal
from pyro_bnn.spec.docs import member_doc

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _run_pair(model: BNN, plus: dict, minus: dict, x: torch.Tensor) -> torch.Tensor:
    """Network outputs ``(B, out)``: rows ``[0, h)`` of ``x`` under the weights ``plus``, rows ``[h, B)`` under
    ``minus``, h = ceil(B / 2). (Two plain passes: a vmapped pass was slower on a CPU, its batched products
    copying the transposed weights.)"""
    half = (x.shape[0] + 1) // 2
    return torch.cat([model.apply_parameters(x[:half], plus), model.apply_parameters(x[half:], minus)])


class FastMeanFieldELBO:
    """The negative ELBO of a BNN with a :class:`~pyro_bnn.guides.FlatMeanField` guide, computed in one fused pass.

    Equal in expectation (value and gradients) to :class:`~pyro_bnn.infer.TraceELBO` on the same model and guide:
    ``loss = -(N/B) * sum_batch log p(y | w) + kl_weight * KL(q || p)`` with ``w = loc + exp(log_scale) * eps``,
    ``eps ~ N(0, I_D)``: by default (one particle) an antithetic pair, the first half of the batch scored at
    ``+eps`` and the second at ``-eps``; otherwise one draw per particle shared by the batch. The KL sums over every
    weight: the closed form ``KL(Normal(mu, sigma) || Normal(m, s))`` for sites whose prior is Normal
    (``pyro_bnn.priors.NormalPrior``), the Monte Carlo estimate ``log q(w) - log p(w)`` of the drawn weights for
    other priors (or for all sites with ``closed_form_kl=False``, which makes the objective Pyro's ``Trace_ELBO``,
    draw for draw in distribution; with the pair, the mean of its two estimates).

    Args:
        num_particles: Weight draws per step (P); the loss is their mean. All draws run in one vectorised pass.
        closed_form_kl: Use the analytic KL where the prior is Normal.
        local_reparameterization: Sample the pre-activations of ``nn.Linear`` layers whose weight is random and
            whose prior is Normal, instead of their weights (each such layer must run once per example on a
            ``(B, in)`` input). Same expected objective; independent noise per row (lower gradient variance for
            large batches) and no weight noise drawn for those layers.
        flipout: For the same layers, one weight perturbation ``sigma * eps`` shared by the batch and decorrelated
            per row by random signs on inputs and outputs. Same expected objective; one particle only.
        antithetic: Score the first half of each batch at ``loc + sigma * eps`` and the second at
            ``loc - sigma * eps`` (one particle, no local noise option). Same expected objective; the part of the
            gradient noise linear in eps cancels between the halves. Default: on for one particle without local
            noise. A network with batch normalisation (which couples the rows) always gets the single draw.

    The prior's distributions are read when a model/guide pair is first scored and again whenever the prior's
    buffers change (``.to(device)``, an in-place update); a prior whose distribution depends on anything else must be
    given a new objective after it changes.

    Random draws: without local noise options a step draws ``standard_normal((D,))`` for one particle (P > 1:
    ``(P, 1, D)``), D the guide's :attr:`~pyro_bnn.guides.FlatMeanField.num_latents`, and nothing else; for a small
    D or on CUDA that is exactly ``torch.randn``.

    Shapes:
        ``x``: ``(B, *input_shape)``; ``y``: ``(B,)`` or ``(B, D_out)``; network outputs ``(B, out)`` for P = 1,
        ``(P, B, out)`` otherwise; the weights handed to the network ``(*site_shape)`` or ``(P, 1, *site_shape)``
        (:mod:`pyro_bnn.sites`).
    """

    analytic_kl = True
    graph_safe = True
    """A step of this objective reads nothing back to the host (with distribution validation off), so
    :class:`~pyro_bnn.infer.cuda_graph.GraphedStep` may capture it in a CUDA graph."""

    @staticmethod
    def graph_key(model: BNN, guide: FlatNormalPosterior) -> tuple:
        """Changes when a captured step would be stale: the prior's buffers replaced or changed in place, or the
        guide set up again (the values the plan copies)."""
        return prior_key(model, guide)

    def __init__(
        self,
        num_particles: int = 1,
        *,
        closed_form_kl: bool = True,
        local_reparameterization: bool = False,
        flipout: bool = False,
        antithetic: bool | None = None,
    ) -> None:
        num_particles = positive_int(num_particles, "num_particles")
        if local_reparameterization and flipout:
            raise ValueError("choose one of local_reparameterization and flipout")
        if (local_reparameterization or flipout) and not closed_form_kl:
            option = "flipout" if flipout else "local_reparameterization"
            raise ValueError(f"{option} needs closed_form_kl=True (it applies to layers with a closed-form KL)")
        if flipout and num_particles != 1:
            raise ValueError(f"flipout draws one perturbation per step: num_particles must be 1, got {num_particles}")
        if antithetic and (num_particles != 1 or local_reparameterization or flipout):
            raise ValueError("antithetic pairs apply to one particle of weight draws, without local noise options")
        if antithetic is None:
            antithetic = num_particles == 1 and not (local_reparameterization or flipout)
        self.num_particles = num_particles
        self.closed_form_kl = bool(closed_form_kl)
        self.local_reparameterization = bool(local_reparameterization)
        self.flipout = bool(flipout)
        self.antithetic = bool(antithetic)
        self._plan: ScoringPlan | None = None

    def __getstate__(self) -> dict:
        # The cached plan holds weak references and tensors of one model; a copy rebuilds its own on first use.
        return {**self.__dict__, "_plan": None}

    def batched_form(self) -> BatchedForm:
        """What batched runs compute for this objective: its antithetic pair or single draw, its KL.

        Raises:
            ValueError: A local noise option, which batched runs do not compute.
        """
        if self.local_reparameterization or self.flipout:
            raise ValueError(f"batched runs draw whole weights, without local noise options, got {self!r}")
        return BatchedForm(antithetic=self.antithetic, closed_form_kl=self.closed_form_kl, particles=self.num_particles)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_particles={self.num_particles}, closed_form_kl={self.closed_form_kl}, "
            f"local_reparameterization={self.local_reparameterization}, flipout={self.flipout}, "
            f"antithetic={self.antithetic})"
        )

    # ------------------------------------------------------------------------------------------------ checks
    def validate(self, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
        """Refuses a model/guide pair this objective cannot score, with one line naming the reason.

        Checks that ``model`` is a plain :class:`~pyro_bnn.BNN` (no hierarchical prior, no per-example latents,
        ``forward`` not overridden), that ``guide`` is a set-up :class:`~pyro_bnn.guides.FlatMeanField` over exactly
        its weight sites, and that a Pyro trace of the model against the guide holds nothing but those sites and
        the likelihood's (no ``pyro.factor``, no extra site), so the fused pass computes the same objective. With
        ``local_reparameterization`` it also evaluates the objective once (on a forked random stream) to check how
        the random ``nn.Linear`` layers are applied.

        Raises:
            ValueError: The reason, in one line.
        """
        self._check_pair(model, guide)
        if guide.prototype_trace is None:
            with torch.no_grad(), poutine.block():
                guide(x, y)
        self._plan_for(model, guide)
        check_traced_sites(type(self).__name__, model, guide, x, y)
        if self.local_reparameterization or self.flipout:
            # One evaluation finds a random nn.Linear that runs twice or on a (B, T, in) input before training
            # starts; its random draws are taken from a forked stream, so validating changes no later draw.
            devices = [x.device] if x.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                self(model, guide, x, y)

    _check_pair = staticmethod(check_pair)

    def choice_refusal(self, guide: GuideSpec, prior: str) -> str | None:
        """Why this objective cannot train under the ``--prior`` ``prior`` (a clause), or None: what run validation
        asks before any data is loaded (the guide's capabilities are the registry's check)."""
        return prior_refusal(prior)

    # -------------------------------------------------------------------------------------------------- plan
    def _plan_for(self, model: BNN, guide: FlatNormalPosterior) -> ScoringPlan:
        plan = self._plan
        if plan is not None and plan.model() is model and plan.guide() is guide and plan.key == prior_key(model, guide):
            return plan
        self._check_pair(model, guide)
        if guide.prototype_trace is None:
            raise ValueError("FastMeanFieldELBO: the guide has no parameters yet; run it (or train) once first")
        self._plan = build_plan(
            model,
            guide,
            closed_form_kl=self.closed_form_kl,
            linear_noise=self.local_reparameterization or self.flipout,
        )
        return self._plan

    # --------------------------------------------------------------------------------------------- objective
    def __call__(
        self,
        model: Callable,
        guide: Callable,
        x: torch.Tensor,
        y: torch.Tensor,
        kl_weight: float | torch.Tensor = 1.0,
    ) -> ObjectiveTerms:
        """One evaluation on a minibatch.

        Args:
            model: The :class:`~pyro_bnn.BNN`.
            guide: Its :class:`~pyro_bnn.guides.FlatMeanField` (run once, e.g. by the trainer, or here).
            x: Inputs ``(B, *input_shape)``.
            y: Targets ``(B,)`` or ``(B, D_out)``.
            kl_weight: Factor on the KL term (annealing times minibatch weighting), a finite number >= 0; or a
                0-dim tensor on the model's device, read only by the computation (no host read, so a CUDA graph
                can capture the step and change the weight between replays; the KL is then always computed, and a
                weight of 0 multiplies a finite KL away). The tensor is not checked: the caller keeps it finite
                and >= 0.

        Returns:
            :class:`~pyro_bnn.infer.ObjectiveTerms`: ``loss`` (scalar, differentiable), ``data_term`` and
            ``kl_term`` (detached scalars) with ``loss == data_term + kl_term``.
        """
        if not isinstance(kl_weight, torch.Tensor):
            kl_weight = check_kl_weight(kl_weight)
        if getattr(guide, "prototype_trace", True) is None:
            with torch.no_grad(), poutine.block():
                guide(x, y)
        plan = self._plan_for(model, guide)
        loc, log_scale = guide.flat_parameters()
        num = self.num_particles
        lead = () if num == 1 else (num, 1)

        eps, params, closed_form_kl = None, {}, None
        if plan.weight_sampled or self.flipout:
            eps = standard_normal(lead + loc.shape, dtype=loc.dtype, device=loc.device)
        antithetic = self.antithetic and not plan.linear and not plan.couples_rows and x.shape[0] > 1
        minus_params = None
        if antithetic:  # rows [0, half) see loc + scale * eps, rows [half, B) loc - scale * eps
            plus, minus, closed_form_kl = draw_antithetic_with_normal_kl(
                loc, log_scale, eps, plan.closed_form, guide.sites
            )
            params = dict(zip(guide.site_names, plus, strict=True))
            minus_params = dict(zip(guide.site_names, minus, strict=True))
            log_likelihood = model.likelihood.log_likelihood(_run_pair(model, params, minus_params, x), y)
        elif not plan.linear:  # one draw for the batch, with the closed-form KL in one autograd node
            weights, closed_form_kl = draw_with_normal_kl(loc, log_scale, eps, plan.closed_form, guide.sites)
            params = dict(zip(guide.site_names, weights, strict=True))
            output = model.apply_parameters(x, params)
        else:  # local reparameterisation or flipout on the linear layers, weight draws elsewhere
            scale = log_scale.exp()
            delta = scale * eps if eps is not None else None
            params = guide.split(loc + delta) if plan.weight_sampled else {}
            locs = guide.split(loc)
            for layer in plan.linear:
                params[layer.weight.name] = locs[layer.weight.name]
                if layer.bias is not None:
                    params[layer.bias.name] = locs[layer.bias.name]
            hook, tensors = (
                (flipout_hook, guide.split(delta)) if self.flipout else (local_noise_hook, guide.split(scale))
            )
            output = run_with_linear_noise(model, x, params, plan.linear, hook, tensors, num)

        batch_size = x.shape[0]
        plate = model.likelihood.plate(batch_size, x.device)
        data_scale = plate.size / plate.subsample_size
        if not antithetic:
            log_likelihood = model.likelihood.log_likelihood(output, y)  # (B,) or (P, B)
        data_term = -log_likelihood.sum() * (data_scale / num)

        loss = data_term
        # A weight of 0 (the start of a warm-up) leaves the data term alone, as scale_latents(0) does.
        if isinstance(kl_weight, torch.Tensor) or kl_weight:
            if closed_form_kl is None:
                closed_form_kl = normal_segments_kl(loc, log_scale, log_scale.exp(), plan.closed_form)
            kl = closed_form_kl + self._monte_carlo_kl(plan, guide, log_scale, eps, params)
            if minus_params is not None and plan.monte_carlo:  # the mean of the pair's estimates
                kl = 0.5 * (kl + closed_form_kl + self._monte_carlo_kl(plan, guide, log_scale, -eps, minus_params))
            loss = loss + kl_weight * kl
        data_value = data_term.detach()
        return ObjectiveTerms(loss, data_value, loss.detach() - data_value)

    def _monte_carlo_kl(
        self,
        plan: ScoringPlan,
        guide: FlatNormalPosterior,
        log_scale: torch.Tensor,
        eps: torch.Tensor | None,
        params: Mapping[str, torch.Tensor],
    ) -> torch.Tensor | float:
        """``log q(w) - log p(w)`` of the sites without a closed form, averaged over the particles (0 if none).

        ``eps``: the standard normal draw ``(D,)`` or ``(P, 1, D)`` behind ``params`` (``{site: w}``)."""
        num = self.num_particles
        kl = 0.0
        site_log_scales = guide.split(log_scale) if plan.monte_carlo else {}
        for site, prior in plan.monte_carlo:
            # log q(w) = log N(loc + scale * eps; loc, scale) = -eps^2 / 2 - log scale - log(2 pi) / 2, exactly.
            site_eps = eps[..., site.start : site.stop]  # no gradient: a slice costs nothing in the backward pass
            log_q = -0.5 * site_eps.square().sum() / num - site_log_scales[site.name].sum()
            log_q = log_q - site.numel * _HALF_LOG_2PI
            kl = kl + log_q - prior.log_prob(params[site.name]).sum() / num
        return kl

    def kl_methods(self, model: BNN, guide: FlatNormalPosterior) -> dict[str, str]:
        """How the KL of each weight site is computed: ``{site name: "closed-form" | "monte-carlo"}``.

        Raises:
            ValueError: The pair is one :meth:`validate` refuses, or the guide has not run yet.
        """
        plan = self._plan_for(model, guide)
        monte_carlo = {site.name for site, _ in plan.monte_carlo}
        return {name: "monte-carlo" if name in monte_carlo else "closed-form" for name in guide.site_names}

    def kl_divergence(self, model: BNN, guide: FlatNormalPosterior) -> torch.Tensor:
        """The exact ``KL(q || p)`` summed over every weight, without sampling (differentiable).

        Returns:
            A scalar tensor: ``sum_sites sum_i KL(Normal(loc_i, scale_i) || prior_i)``.

        Raises:
            ValueError: A site's prior has no closed-form KL here (its KL is a Monte Carlo estimate in the
                objective; :meth:`kl_methods` says which), or the pair is one :meth:`validate` refuses.
        """
        plan = self._plan_for(model, guide)
        if plan.monte_carlo:
            names = [site.name for site, _ in plan.monte_carlo]
            raise ValueError(f"no closed-form KL for the sites {names[:4]} (prior not Normal, or closed_form_kl=False)")
        loc, log_scale = guide.flat_parameters()
        return normal_segments_kl(loc, log_scale, log_scale.exp(), plan.closed_form)


_FLAT = {Capability.FLAT_NORMAL}
_LINEAR_NOISE = {Capability.FLAT_NORMAL, Capability.LOCAL_REPARAMETERIZATION}
register_objective(
    ElboKind.FAST, options=("num_particles",), requires=_FLAT, doc=member_doc(ElboKind.FAST), batched=True
)(FastMeanFieldELBO)
register_objective(
    ElboKind.FAST_SINGLE, options=("num_particles",), requires=_FLAT, doc=member_doc(ElboKind.FAST_SINGLE), batched=True
)(partial(FastMeanFieldELBO, antithetic=False))
register_objective(
    ElboKind.FAST_LOCAL, options=("num_particles",), requires=_LINEAR_NOISE, doc=member_doc(ElboKind.FAST_LOCAL)
)(partial(FastMeanFieldELBO, local_reparameterization=True))
register_objective(
    ElboKind.FAST_FLIPOUT, options=("num_particles",), requires=_LINEAR_NOISE, doc=member_doc(ElboKind.FAST_FLIPOUT)
)(partial(FastMeanFieldELBO, flipout=True))
