"""The implicit-BNN objective: per-row draws from a K-component mixture and the paper's mixture-mean KL.

For a node-noise BNN (:mod:`pyro_bnn.node_noise`) with the :class:`~pyro_bnn.guides.NodeNoiseMixture` guide, one
step on a minibatch of B rows does what the authors' code does:

1. every row is repeated S times (``repeat_interleave``: rows ``b S .. b S + S - 1`` are copies of example b) and
   row j of the B S expanded rows takes component ``j mod K`` (:func:`component_of_rows`), so one example's copies
   go to different components and each component learns from its own slice of every minibatch;
2. each expanded row draws its own noise from its component and the network runs once on all B S rows;
3. the data term is ``-sum_rows log p(y | x, z_row) * N / (B S)``: per example the mean over its S copies, scaled
   to the data set as the likelihood's plate would scale B rows (``kl_scale="paper"``: B instead of N);
4. the KL term is ``kl_weight * sum_sites KL(q_hat || p)`` with ``q_hat = N(mean_k mu_k, diag(sum_k sigma_k^2) / K^2)``
   the law of the average of one draw from each component (:func:`mixture_mean_kl`), closed form.

The paper's Algorithm 1 reads "evenly assign B/K data points to each component; draw S noise samples for each data
point from its assigned component": one component per example. The code (followed here) instead gives the S copies
of one example to S different components (components ``b S mod K .. (b S + S - 1) mod K``), which is what its
reported numbers come from.

How this relates to ``Trace_ELBO`` with the same guide (:class:`~pyro_bnn.guides.NodeNoiseMixture` is a proper
Pyro guide): the data terms are equal in expectation when every example's copies cover the components evenly
(S a multiple of K; with S < K each minibatch covers them evenly over its rows instead). The KL terms differ in
kind: ``Trace_ELBO`` estimates the true ``KL(q || p)`` of the mixture by Monte Carlo (``log q`` by logsumexp over
the components), which has no closed form. ``KL(q_hat || p)`` is not that KL, nor a bound on it: it sees only the
mixture's mean and the *averaged* variance, which shrinks as 1/K, so it does not penalise how far apart the
components lie (the paper's point: components spread over a wide mode freely). For K = 1 both are the same KL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyro.distributions as dist
import torch
from torch.distributions import kl_divergence

from pyro_bnn.bnn import BNN
from pyro_bnn.checks import positive_int
from pyro_bnn.guides.capabilities import Capability, NormalMixturePosterior
from pyro_bnn.infer.annealing import check_kl_weight
from pyro_bnn.infer.objective_registry import BatchedForm, register_objective
from pyro_bnn.infer.objectives import ElboKind, ObjectiveTerms
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.node_noise.convert import BIAS_NOISE, INPUT_NOISE
from pyro_bnn.priors import ParameterSite, parse_prior
from pyro_bnn.spec.docs import member_doc

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec


def component_of_rows(num_rows: int, num_components: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The component of each expanded row: row j takes component ``j mod K``; ``(num_rows,)`` int64."""
    return torch.arange(num_rows, device=device) % num_components


def mixture_mean_kl(model: BNN, guide: NormalMixturePosterior) -> torch.Tensor:
    """``sum_sites KL(q_hat || p)``, q_hat the Normal of the mean of one draw from each component; a scalar, live.

    Per latent scalar: ``mu_hat = mean_k mu_k`` and ``sigma_hat^2 = sum_k sigma_k^2 / K^2``; the KL against the
    prior is taken with ``torch.distributions.kl_divergence`` (closed form for a Normal prior).
    """
    locs, scales = guide.component_loc_scale()
    num_components = locs.shape[0]
    loc_hat = guide.split(locs.mean(0))
    scale_hat = guide.split(scales.square().sum(0).sqrt() / num_components)
    sites = {site.name: site for site in model.sites}
    total = locs.new_zeros(())
    for name, loc in loc_hat.items():
        q_hat = dist.Normal(loc, scale_hat[name]).to_event(loc.dim())
        total = total + kl_divergence(q_hat, model.prior.distribution(sites[name], {}))
    return total


def prior_refusal(prior: str) -> str | None:
    """Why the mixture-mean KL cannot be taken against the ``--prior`` string ``prior``, from the prior alone (a
    clause such as ``"has no closed form against prior 'cauchy:1,0.1' (CauchyPrior); ..."``), or None if it can.

    A hierarchical prior adds a scale site per layer, which is no node noise; otherwise the KL of a Normal against
    the prior's law of one scalar is tried, as :func:`mixture_mean_kl` takes it (Cauchy, flat and the scale mixture
    have no closed form).
    """
    parsed = parse_prior(prior)
    if parsed.layer_hyperpriors(""):
        return (
            f"takes no hierarchical prior ({prior!r} adds a scale site per layer, which is no node noise); use a "
            "Normal prior such as 'normal:1,0.1'"
        )
    probe = ParameterSite("probe", "", INPUT_NOISE, torch.Size([1]))
    try:
        kl_divergence(dist.Normal(torch.ones(1), torch.ones(1)).to_event(1), parsed.distribution(probe, {}))
    except NotImplementedError:
        return (
            f"has no closed form against prior {prior!r} ({type(parsed).__name__}); use a Normal prior such as "
            "'normal:1,0.1', or --elbo trace (Trace_ELBO estimates the mixture's KL by sampling)"
        )
    return None


class MixtureMeanKL:
    """The implicit-BNN objective for a node-noise BNN and its :class:`~pyro_bnn.guides.NodeNoiseMixture` guide (see
    the module docstring for the steps and how it relates to ``Trace_ELBO``).

    Args:
        samples_per_example: S, copies of every row per step (2 in the authors' training).

    Shapes:
        ``x: (B, ...)``, ``y: (B,)`` or ``(B, D)``; the network runs on ``(B S, ...)``.
    """

    analytic_kl = True

    def __init__(self, samples_per_example: int = 2) -> None:
        samples_per_example = positive_int(samples_per_example, "samples_per_example")
        self.samples_per_example = samples_per_example

    def batched_form(self) -> BatchedForm:
        """What batched runs compute for this objective (:class:`~pyro_bnn.batched.BatchedStep`): S copies of every
        example, each row its own component and draw, the closed-form mixture-mean KL."""
        return BatchedForm(antithetic=False, closed_form_kl=True, copies=self.samples_per_example)

    def choice_refusal(self, guide: GuideSpec, prior: str) -> str | None:
        """Why this objective cannot train the ``--guide`` ``guide`` under the ``--prior`` ``prior`` (a clause after
        ``"elbo 'mixture' "``), or None: what run validation asks before any data is loaded."""
        reason = prior_refusal(prior)
        return None if reason is None else f"(the mixture-mean KL) {reason}"

    def validate(self, model: BNN, guide: NormalMixturePosterior, x: torch.Tensor, y: torch.Tensor) -> None:
        """Refuses a model/guide pair this objective cannot score (one line each)."""
        if not isinstance(guide, NormalMixturePosterior):
            raise ValueError(
                "the mixture-mean KL objective needs a mixture-of-Normals guide such as NodeNoiseMixture (the "
                f"NormalMixturePosterior protocol), got {type(guide).__name__}"
            )
        if not isinstance(model, BNN):
            raise ValueError(f"the mixture-mean KL objective needs a pyro_bnn.BNN model, got {type(model).__name__}")
        if model.local_latents or model.hyper_site_names:
            raise ValueError("the mixture-mean KL objective takes no per-example latents and no hierarchical prior")
        not_noise = [s.name for s in model.sites if s.attr not in (INPUT_NOISE, BIAS_NOISE)]
        if not_noise:
            raise ValueError(
                f"the mixture-mean KL objective draws node noise per row, but {not_noise[:3]} are not node-noise "
                "sites (weight-space sites need the flat or autonormal guide)"
            )
        guide_sites = [site.name for site in guide.sites]
        if guide_sites != model.site_names:
            raise ValueError(f"the guide covers sites {guide_sites[:3]}..., the model has {model.site_names[:3]}...")
        try:
            mixture_mean_kl(model, guide)
        except NotImplementedError:
            raise ValueError(
                f"the mixture-mean KL has no closed form against the prior {type(model.prior).__name__}; use a "
                "Normal prior such as N(1, s^2)"
            ) from None

    def __call__(
        self, model: BNN, guide: NormalMixturePosterior, x: torch.Tensor, y: torch.Tensor, kl_weight: float
    ) -> ObjectiveTerms:
        if not isinstance(kl_weight, torch.Tensor):
            kl_weight = check_kl_weight(kl_weight)
        copies = self.samples_per_example
        rows = x.shape[0] * copies
        x_rows, y_rows = x.repeat_interleave(copies, 0), y.repeat_interleave(copies, 0)
        locs, scales = guide.component_loc_scale()
        component = component_of_rows(rows, locs.shape[0], locs.device)
        eps = torch.randn(rows, locs.shape[1], dtype=locs.dtype, device=locs.device)
        noise = torch.addcmul(locs[component], scales[component], eps)  # (B S, D): one draw per expanded row
        output = model.run_network(x_rows, guide.split(noise))
        likelihood = model.likelihood
        plate_size = likelihood.dataset_size if likelihood.kl_scale is KLScale.DATASET else x.shape[0]
        data_term = -likelihood.log_likelihood(output, y_rows).sum() * (plate_size / rows)
        kl_term = kl_weight * mixture_mean_kl(model, guide)
        return ObjectiveTerms(data_term + kl_term, data_term.detach(), kl_term.detach())


register_objective(
    ElboKind.MIXTURE,
    options=("samples_per_example",),
    requires={Capability.NORMAL_MIXTURE},
    doc=member_doc(ElboKind.MIXTURE),
    batched=True,
)(MixtureMeanKL)
