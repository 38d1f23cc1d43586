"""The checks of a model/guide pair for :class:`~pyro_bnn.infer.FastMeanFieldELBO`: from the objects alone
(:func:`check_pair`) and from one Pyro trace of the model against the guide (:func:`check_traced_sites`), each
refusing with one line naming the reason."""

from __future__ import annotations

from collections.abc import Callable

import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from pyro_bnn.bnn import BNN
from pyro_bnn.guides.capabilities import FlatNormalPosterior
from pyro_bnn.likelihoods.base import Likelihood
from pyro_bnn.priors import parse_prior
from pyro_bnn.sites import is_likelihood_site


def check_pair(model: Callable, guide: Callable) -> None:
    """Refuses a model/guide pair :class:`~pyro_bnn.infer.FastMeanFieldELBO` cannot score, from the objects alone:
    a BNN that is not plain (an overridden forward, a hierarchical or learned prior, per-example latents) or a guide
    that is not a flat Normal posterior."""
    name = "FastMeanFieldELBO"
    if not isinstance(model, BNN):
        raise ValueError(f"{name} trains a pyro_bnn.BNN, got {type(model).__name__}")
    if type(model).forward is not BNN.forward or type(model.likelihood).forward is not Likelihood.forward:
        raise ValueError(f"{name} cannot score a BNN or likelihood that overrides forward; use elbo='trace'")
    if model.hyper_site_names:
        raise ValueError(
            f"{name} cannot train a hierarchical prior (hyperprior sites {model.hyper_site_names[:3]}); "
            "use elbo='trace'"
        )
    trainable = [n for n, p in model.prior.named_parameters() if p.requires_grad]
    if trainable:
        # The plan copies the prior's Normal parameters once: a learned prior would get no gradient.
        raise ValueError(f"{name} cannot learn prior parameters {trainable[:3]}; use elbo='trace'")
    if model.local_latents:
        raise ValueError(f"{name} cannot train per-example latent sites {model.local_site_names[:3]}; use elbo='trace'")
    if not isinstance(guide, FlatNormalPosterior):
        raise ValueError(
            f"{name} needs a flat Normal guide such as FlatMeanField (the FlatNormalPosterior protocol: "
            f"flat_parameters, split, sites, draw), got {type(guide).__name__}"
        )


def prior_refusal(prior: str) -> str | None:
    """Why the fused objectives cannot train under the ``--prior`` string ``prior`` (a clause), or None: from the
    prior alone, what :func:`check_pair` refuses in a built model (a hierarchical prior's per-layer scale sites)."""
    if parse_prior(prior).layer_hyperpriors(""):
        return (
            f"cannot train a hierarchical prior ({prior!r} adds a scale site per layer); use --elbo trace, or auto, "
            "which takes trace for it"
        )
    return None


def check_traced_sites(objective: str, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
    """Refuses a pair whose Pyro trace (the model replayed against the guide) holds anything but the guide's weight
    sites and one observed likelihood site (a ``pyro.factor``, an extra site): the fused pass would compute another
    objective. ``objective``: the objective's name, for the message."""
    with torch.no_grad(), poutine.block():
        guide_trace = poutine.trace(guide).get_trace(x, y)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y)
    expected = set(guide.site_names)
    extra, likelihood_sites = [], 0
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or name in expected or site_is_subsample(site):
            continue
        if is_likelihood_site(site) and site["is_observed"]:
            likelihood_sites += 1
        else:
            extra.append(name)
    if extra:
        raise ValueError(f"{objective} scores only the weights and the likelihood; the model also has sites {extra}")
    if likelihood_sites != 1:
        raise ValueError(
            f"{objective} needs exactly one likelihood site, observed (targets y given); found {likelihood_sites}"
        )
