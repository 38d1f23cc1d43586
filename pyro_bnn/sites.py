"""The conventions every Pyro site of a :class:`~pyro_bnn.BNN` follows: which dimension holds what, and which site
is the likelihood.

Dimensions
----------
A site's value is ``batch_shape + event_shape``. pyro_bnn uses two batch dimensions, counted from the right of the
batch shape, and nothing else:

========================  =====  ==========================================================================
dimension                 dim    holds
========================  =====  ==========================================================================
data plate                ``-1`` the rows of the minibatch (:data:`DATA_DIM`); opened by the likelihood's
                                 :meth:`~pyro_bnn.likelihoods.Likelihood.plate` with ``size=N`` and the
                                 minibatch as its subsample, so Pyro scales it by N/B
sample plate              ``-2`` independent draws of the latent variables (:data:`SAMPLE_DIM`): vectorised
                                 ELBO particles while training, posterior samples while predicting
runs                      ``-3`` and further left: free for the user (independent runs, seeds, ensembles
                                 stacked by ``vmap``); pyro_bnn never opens a plate there
========================  =====  ==========================================================================

Two kinds of latent site follow from it:

* **Global sites** (a network weight, a layer's prior scale) have no batch dimension of their own: the whole
  parameter tensor is the event. Drawn S times they have shape ``(S, 1, *param_shape)``, the 1 being the data plate's
  slot; drawn once, ``param_shape``.
* **Per-example sites** (:class:`~pyro_bnn.local_latents.LocalLatent`, e.g. node noise) are sampled inside the data
  plate, one value per row: ``(B, *event_shape)`` once, ``(S, B, *event_shape)`` when drawn S times.

Network outputs follow the same layout: ``(B, out)`` for one draw, ``(S, B, out)`` for S draws; a :class:`Prediction`
stacks them as ``(S, N, out)`` over the whole data set.

Tags
----
The likelihood marks its observation site with :data:`LIKELIHOOD_TAG` in the site's ``infer`` dict. That tag, not
``is_observed``, is what separates the data term from the rest: a ``pyro.factor`` (observed, but a prior-side term)
counts as part of the KL term and is annealed with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import torch

DATA_DIM = -1
"""Batch dimension of the data plate (the minibatch rows)."""

SAMPLE_DIM = -2
"""Batch dimension of vectorised draws: ELBO particles and posterior predictive samples."""

MAX_PLATE_NESTING = 1
"""Plates a :class:`~pyro_bnn.BNN` opens itself (the data plate); the sample plate goes to its left."""

LIKELIHOOD_TAG = "pyro_bnn_likelihood"
"""Key in a sample site's ``infer`` dict that marks the likelihood's observation site."""

SAMPLE_PLATE = "_samples"
"""Name of the plate that vectorises draws along :data:`SAMPLE_DIM`."""


def is_likelihood_site(site: dict) -> bool:
    """True for the sample site the likelihood tagged (a trace node or a handler's message)."""
    return site["type"] == "sample" and bool((site.get("infer") or {}).get(LIKELIHOOD_TAG, False))


def sample_plate(num_samples: int, dim: int = SAMPLE_DIM) -> pyro.plate:
    """The plate that draws ``num_samples`` independent copies of every latent site along :data:`SAMPLE_DIM` (or
    ``dim``, left of the plates of a model that opens more than the data plate)."""
    return pyro.plate(SAMPLE_PLATE, num_samples, dim=dim)


def unflatten(names: Sequence[str], shapes: Sequence[tuple[int, ...]], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Views ``{name: (*lead, *shape)}`` of flat values ``(*lead, D)`` laid out site after site (row-major each), the
    layout of a sampler's or potential's flat weight vector."""
    lead = flat.shape[:-1]
    pieces = flat.split([math.prod(shape) for shape in shapes], dim=-1)
    return {name: piece.reshape(*lead, *shape) for name, piece, shape in zip(names, pieces, shapes, strict=True)}
