"""Batched runs: R independent runs of one architecture trained as one vectorised model.

A sweep of small networks (seeds, priors, learning rates) spends most of its time in per-step overhead when its
runs go one by one. Here R compatible runs share every step: their variational parameters are stacked along a
leading run dimension (:class:`RunStack`), the network runs over all of them with ``torch.vmap``, each run keeps
its own noise, prior, learning rate and KL schedule, and one backward pass and one :class:`BatchedAdam` (or
:class:`BatchedSGD`) update train them all. :func:`fit_batched` drives R ordinary :class:`~pyro_bnn.infer.Trainer` s
in lockstep, so every run keeps its own history, validation, callbacks and checkpoints, in the format of a run
trained alone.
"""

from pyro_bnn.batched.adam import BatchedAdam
from pyro_bnn.batched.fit import RunOutcome, batched_form, fit_batched
from pyro_bnn.batched.kl import BatchedKL, Family, prior_family
from pyro_bnn.batched.layout import GuideLayout, ScaleMap, guide_layout
from pyro_bnn.batched.sgd import BatchedSGD
from pyro_bnn.batched.stack import RunStack
from pyro_bnn.batched.step import BatchedForm, BatchedStep, BatchedTerms, RunNoise, StepInputs

__all__ = [
    "BatchedAdam",
    "BatchedForm",
    "BatchedKL",
    "BatchedSGD",
    "BatchedStep",
    "BatchedTerms",
    "Family",
    "GuideLayout",
    "RunNoise",
    "RunOutcome",
    "RunStack",
    "ScaleMap",
    "StepInputs",
    "batched_form",
    "fit_batched",
    "guide_layout",
    "prior_family",
]
