"""The default objective: the fused fast path where it computes the same objective, Pyro's Trace_ELBO elsewhere."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from pyro_bnn.guides.capabilities import Capability, FlatNormalPosterior, NormalMixturePosterior
from pyro_bnn.infer.fast import FastMeanFieldELBO
from pyro_bnn.infer.mixture_kl import MixtureMeanKL, prior_refusal
from pyro_bnn.infer.objective_registry import BatchedForm, batched_form, register_objective
from pyro_bnn.infer.objectives import ElboKind, Objective, ObjectiveTerms, TraceELBO
from pyro_bnn.spec.docs import member_doc

if TYPE_CHECKING:
    from pyro_bnn.guides.spec import GuideSpec


class UnusedOptionWarning(UserWarning):
    """An objective option that cannot act on the objective chosen (the CLI shows it as one warning line)."""


class AutoELBO:
    """The one place that maps a guide to its objective, once, when training starts (``--elbo auto``, the default).

    The choice goes by the protocol the built guide implements (:mod:`pyro_bnn.guides.capabilities`), not by its
    class:

    * a mixture of Normals (:class:`~pyro_bnn.guides.NormalMixturePosterior`, e.g. the node-noise
      :class:`~pyro_bnn.guides.NodeNoiseMixture`) gets :class:`~pyro_bnn.infer.MixtureMeanKL`;
    * a flat Normal (:class:`~pyro_bnn.guides.FlatNormalPosterior`, e.g. ``--guide flat:...``, the default guide)
      gets :class:`~pyro_bnn.infer.FastMeanFieldELBO` when :meth:`FastMeanFieldELBO.validate` accepts the pair (a
      plain BNN with no hierarchical prior and no per-example latent sites), else ``TraceELBO``;
    * every other guide gets :class:`~pyro_bnn.infer.TraceELBO`.

    The fast objective and ``TraceELBO`` are the same negative ELBO in expectation (value and gradients; tested), so
    the choice changes speed and gradient variance, not what is optimised. :attr:`chosen` says which was taken, and
    :meth:`__repr__` shows it with the reason.

    Args:
        num_particles: Weight draws per step, for whichever objective is chosen.
        vectorize_particles: For ``TraceELBO``: draw the particles in one vectorised pass (the fast objective
            always does).
        samples_per_example: For ``MixtureMeanKL``: copies of every example per step.
    """

    def __init__(self, num_particles: int = 1, vectorize_particles: bool = False, samples_per_example: int = 2) -> None:
        self.fast = FastMeanFieldELBO(num_particles)
        self.mixture = MixtureMeanKL(samples_per_example)
        self.trace = TraceELBO(num_particles, vectorize_particles)
        self.chosen: Objective | None = None
        self.reason = "not chosen yet: training has not started"

    @property
    def num_particles(self) -> int:
        """Weight draws per step, on either path."""
        return self.trace.num_particles

    @property
    def vectorize_particles(self) -> bool:
        """``Trace_ELBO``'s setting: whether it draws its particles in one vectorised pass. The fast path, chosen
        for flat guides only, always does (:meth:`~pyro_bnn.BNN.check_vectorised_draws` refuses batch norm there
        on its first pass)."""
        return self.trace.vectorize_particles

    @property
    def analytic_kl(self) -> bool:
        return bool(getattr(self.chosen, "analytic_kl", False))

    @property
    def graph_safe(self) -> bool:
        """Whether the chosen objective may be captured in a CUDA graph (the fused path)."""
        return bool(getattr(self.chosen, "graph_safe", False))

    def graph_key(self, model: Callable, guide: Callable) -> object:
        """The chosen objective's ``graph_key`` (None if it has none)."""
        graph_key = getattr(self.chosen, "graph_key", None)
        return graph_key(model, guide) if graph_key is not None else None

    def __repr__(self) -> str:
        return f"AutoELBO(chosen={self.chosen!r}; {self.reason})"

    def batched_form(self) -> BatchedForm:
        """The batched form of the objective it chose (:func:`~pyro_bnn.infer.objective_registry.batched_form`).

        Raises:
            ValueError: It has not chosen yet, or chose an objective batched runs do not compute.
        """
        return batched_form(self.chosen)

    def choice_refusal(self, guide: GuideSpec, prior: str) -> str | None:
        """Why the objective this would choose for the ``--guide`` ``guide`` cannot train under the ``--prior``
        ``prior`` (a clause after ``"elbo 'auto' "``), or None: what run validation asks before any data is loaded.
        A mixture guide gets the mixture-mean KL; a flat Normal guide the fused path only where it applies, else
        ``TraceELBO``, so nothing else is refused."""
        reason = prior_refusal(prior) if guide.offers(Capability.NORMAL_MIXTURE) else None
        return None if reason is None else f"trains guide {str(guide)!r} with the mixture-mean KL, which {reason}"

    def validate(self, model: Callable, guide: Callable, x: torch.Tensor, y: torch.Tensor) -> None:
        """Chooses the objective for this model and guide (and validates the pair for it). With a mixture guide,
        ``num_particles`` other than 1 is an :class:`UnusedOptionWarning`: the mixture-mean KL does not take it. (A
        warning, not a refusal: the committed posterior-families grid planned its moons node-noise runs with 8, and
        their configs must still load and train.)"""
        if isinstance(guide, NormalMixturePosterior):
            self.chosen, self.reason = self.mixture, "a mixture-of-Normals guide"
            if self.num_particles != 1:
                warnings.warn(
                    f"num_particles={self.num_particles} is unused: elbo 'auto' trains a mixture-of-Normals guide "
                    "with the mixture-mean KL, which draws its own samples (one per row of samples_per_example "
                    "copies); pass num_particles=1",
                    UnusedOptionWarning,
                    stacklevel=2,
                )
        elif not isinstance(guide, FlatNormalPosterior):
            self.chosen, self.reason = self.trace, f"the guide is a {type(guide).__name__}, not a flat Normal guide"
        else:
            try:
                self.fast.validate(model, guide, x, y)
                self.chosen, self.reason = self.fast, "a flat Normal guide on a model the fused path scores"
            except ValueError as err:
                self.chosen, self.reason = self.trace, f"the fused path refused the model: {err}"
        validate = getattr(self.chosen, "validate", None)
        if validate is not None and self.chosen is not self.fast:
            validate(model, guide, x, y)

    def __call__(
        self,
        model: Callable,
        guide: Callable,
        x: torch.Tensor,
        y: torch.Tensor,
        kl_weight: float | torch.Tensor = 1.0,
    ) -> ObjectiveTerms:
        if self.chosen is None:
            self.validate(model, guide, x, y)
        return self.chosen(model, guide, x, y, kl_weight)


register_objective(
    ElboKind.AUTO,
    options=("num_particles", "vectorize_particles", "samples_per_example"),
    doc=member_doc(ElboKind.AUTO),
    batched=True,
)(AutoELBO)
