"""ELBO construction and the split of each loss into its data term and its KL term."""

from __future__ import annotations

from enum import Enum

import torch
from pyro.infer import ELBO, Trace_ELBO, TraceMeanField_ELBO

from pyro_bnn._spec import enum_member


class ElboKind(str, Enum):
    """Which ELBO estimator the trainer uses."""

    TRACE = "trace"
    """:class:`~pyro.infer.Trace_ELBO`: Monte Carlo estimate of the KL from the sampled weights."""
    MEAN_FIELD = "meanfield"
    """:class:`~pyro.infer.TraceMeanField_ELBO`: the analytic KL where it is registered (Normal guide sites
    against Normal priors, as :class:`~pyro_bnn.guides.BayesByBackprop` samples them), Monte Carlo elsewhere.
    Pyro's AutoNormal samples every site through a ``Delta``, so with it this equals ``trace``; with a constrained
    site (a hierarchical scale) it would drop the Jacobian, and the trainer refuses that combination."""


def make_elbo(kind: ElboKind | str, num_particles: int = 1, vectorize_particles: bool = False) -> ELBO:
    """Builds the ELBO for a :class:`pyro_bnn.BNN` (one data plate, at dim -1)."""
    if not (isinstance(num_particles, int) and num_particles >= 1):
        raise ValueError(f"num_particles must be an int >= 1, got {num_particles!r}")
    kind = enum_member(ElboKind, kind, "ELBO")
    cls = Trace_ELBO if kind is ElboKind.TRACE else TraceMeanField_ELBO
    return cls(
        num_particles=num_particles,
        vectorize_particles=vectorize_particles and num_particles > 1,
        max_plate_nesting=1,
    )


def check_meanfield_guide(guide_trace) -> None:
    """Refuses guides that TraceMeanField_ELBO would score wrongly.

    A guide that samples a constrained site as ``Delta(value, log_density=log|J|)`` (Pyro's AutoNormal does) loses
    the Jacobian under TraceMeanField_ELBO, whose KL of a Delta ignores ``log_density``.

    Raises:
        ValueError: naming the site, when such a site is present.
    """
    for name, site in guide_trace.nodes.items():
        fn = site.get("fn")
        log_density = getattr(fn, "log_density", None)
        if site["type"] == "sample" and isinstance(log_density, torch.Tensor) and bool((log_density != 0).any()):
            raise ValueError(
                f"elbo='meanfield' cannot score the guide's constrained site {name!r}: it is sampled through a Delta "
                "whose Jacobian TraceMeanField_ELBO ignores. Use elbo='trace', or the bbb guide."
            )


class DataTermRecorder:
    """Records the data term ``-E_q[log p(y | w)]`` of every ELBO evaluation, at no extra cost.

    Pyro's ELBOs compute each model trace's log densities anyway; this reads the observed sites' sums from those
    traces (already scaled by the data plate's N/B) and averages them over particles. The KL term is then the loss
    minus the data term. Works for any ELBO built on ``_get_trace`` (Trace, TraceMeanField, their vectorised forms).
    """

    def __init__(self, elbo: ELBO) -> None:
        self.elbo = elbo
        self._log_likelihoods: list = []
        original = elbo._get_trace

        def recording_get_trace(model, guide, args, kwargs):
            model_trace, guide_trace = original(model, guide, args, kwargs)
            self._log_likelihoods.append(
                sum(
                    site["log_prob_sum"].detach()
                    for site in model_trace.nodes.values()
                    if site["type"] == "sample" and site["is_observed"]
                )
            )
            return model_trace, guide_trace

        elbo._get_trace = recording_get_trace  # an instance attribute shadows the method for this ELBO only

    def pop(self) -> float:
        """The data term of the evaluations since the last call (mean over particles), as a float."""
        values, self._log_likelihoods = self._log_likelihoods, []
        if not values:
            raise RuntimeError("no ELBO evaluation was recorded")
        return -float(sum(values)) / self.elbo.num_particles
