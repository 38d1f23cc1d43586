"""A BNN as a plain ``nn.Module`` for a user's own training loop: one weight draw per forward, and its KL term.

:class:`BayesianModule` wraps a :class:`~pyro_bnn.BNN` and a guide (trained or fresh). Each ``forward(x)`` draws one
set of weights from the guide (reparameterised, so gradients reach the guide's parameters), runs the network with
them and keeps the draw's KL estimate, ``log q(w) - log p(w)`` over every weight and hyperparameter site, for
:meth:`BayesianModule.kl`. A PyTorch or Lightning loop trains it by minimising

    loss = (N / B) * sum_b nll(output_b, y_b) + kl         (the negative ELBO of one minibatch, one draw)

or that divided by N. In expectation over the draw this is Pyro's ``Trace_ELBO`` loss of the BNN and the guide
(tested, with its gradients, in ``tests/compose/test_module.py``), so a plain loop and :class:`~pyro_bnn.infer.Trainer`
train the same objective; the Trainer's fused objectives (closed-form KL, antithetic draws) are lower-variance
estimates of it.

The KL estimate is the single-draw Monte Carlo one (what ``Trace_ELBO`` uses), valid for every guide family and
prior, hierarchical scales included; it is not the closed form. Models with per-example latents
(:class:`~pyro_bnn.local_latents.LocalLatent` sites) are refused: they live inside the data plate, which a plain
forward does not have. Node noise is not of them: its noise scalars are global sites, so a node-noise BNN with its
:class:`~pyro_bnn.guides.NodeNoiseMixture` guide is accepted.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pyro import poutine
from torch import nn

from pyro_bnn.bnn import BNN
from pyro_bnn.likelihoods.base import KLScale

MODES = ("sample", "median")


class BayesianModule(nn.Module):
    """A BNN and its guide as one ``nn.Module`` that samples its weights on each forward.

    Args:
        bnn: The model. Its deterministic parameters (those the prior does not select, a learned noise scale) are
            parameters of this module too, so one optimiser over :meth:`parameters` trains everything.
        guide: A guide of ``bnn`` (e.g. ``parse_guide("flat:0.01").build(bnn)``, Pyro's ``AutoNormal(bnn)``), or a
            builder ``bnn -> guide``.
        example_input, example_target: One batch of inputs ``(B, *input_shape)`` and its targets ``(B,)`` or
            ``(B, D)``; the guide runs once on them so that its parameters exist before an optimiser is built
            (autoguides create them lazily, from a trace of the model in which the targets are observed).

    Attributes:
        mode: ``"sample"`` (a fresh draw per forward, the default, also in ``eval()``) or ``"median"`` (the guide's
            median weights, no KL).

    Shapes:
        ``forward``: inputs ``(B, *input_shape)`` to the network's outputs ``(B, *output_shape)`` (logits for a
        classifier). :meth:`kl`: a scalar tensor, differentiable in the guide's parameters.
    """

    def __init__(
        self,
        bnn: BNN,
        guide: nn.Module | Callable[[BNN], nn.Module],
        example_input: torch.Tensor,
        example_target: torch.Tensor,
    ) -> None:
        super().__init__()
        if not isinstance(bnn, BNN):
            raise ValueError(f"BayesianModule wraps a pyro_bnn BNN, got {type(bnn).__name__}")
        if bnn.local_latents:
            raise ValueError(
                f"BayesianModule takes weight-space models; this one has per-example latents "
                f"{bnn.local_site_names[:3]}, which need the data plate of Trainer"
            )
        for name, value in (("example_input", example_input), ("example_target", example_target)):
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"{name} must be a tensor batch (B, ...), got {type(value).__name__}")
        self.bnn = bnn
        self.guide = guide if isinstance(guide, nn.Module) else guide(bnn)
        if not isinstance(self.guide, nn.Module):
            raise ValueError(f"the guide builder returned {type(self.guide).__name__}, not a guide (an nn.Module)")
        self.mode = "sample"
        self._kl: torch.Tensor | None = None
        with torch.no_grad():
            self._draw(example_input, example_target)  # creates the guide's parameters

    def _draw(self, x: torch.Tensor, y: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One draw of every latent site from the guide and its ``log q - log p``."""
        guide_trace = poutine.trace(self.guide).get_trace(x, y)
        values = {
            name: node["value"]
            for name, node in guide_trace.nodes.items()
            if node["type"] == "sample" and not node["is_observed"]
        }
        missing = [name for name in self.bnn.site_names if name not in values]
        if missing:
            raise ValueError(f"the guide draws no value for weight site(s) {missing[:3]}; is it a guide of this BNN?")
        prior_trace = poutine.trace(poutine.condition(self.bnn.sample_parameters, data=values)).get_trace()
        return values, guide_trace.log_prob_sum() - prior_trace.log_prob_sum()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network's outputs ``(B, *output_shape)`` under one weight draw (or the median in ``"median"`` mode)."""
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "median":
            if not hasattr(self.guide, "median"):
                raise ValueError(f"{type(self.guide).__name__} has no median(); use mode='sample'")
            self._kl = None
            values = self.guide.median(x)
        else:
            values, self._kl = self._draw(x)
        return self.bnn.run_network(x, {name: values[name] for name in self.bnn.site_names})

    def kl(self) -> torch.Tensor:
        """The KL estimate ``log q(w) - log p(w)`` of the last forward's draw (scalar).

        Raises:
            RuntimeError: before the first forward in ``"sample"`` mode, or after a ``"median"`` forward.
        """
        if self._kl is None:
            raise RuntimeError("kl() needs a forward pass in mode='sample' first; it is the KL of that pass's draw")
        return self._kl

    def data_term(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``-(N / B) sum_b log p(y_b | output_b)`` under the BNN's own likelihood (N = its ``dataset_size``): the
        minibatch's share of the negative ELBO's data term, so ``data_term(out, y) + kl()`` is the full loss. With
        the likelihood's ``kl_scale="paper"`` the sum is unscaled, as the model's own data site is.

        Args:
            output: This module's outputs ``(B, *output_shape)``.
            y: Targets: ``(B,)`` class labels, or ``(B, D)`` regression targets (a ``(B,)`` regression target
                would broadcast against ``(B, 1)`` outputs; refused in one line).
        """
        likelihood = self.bnn.likelihood
        likelihood.check_targets(output, y)
        scale = likelihood.dataset_size / output.shape[0] if likelihood.kl_scale is KLScale.DATASET else 1.0
        return -likelihood.log_likelihood(output, y).sum() * scale
