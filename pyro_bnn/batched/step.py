"""One training step of R runs: every run's negative ELBO from its own weight draw, one backward pass, one
:class:`~pyro_bnn.batched.adam.BatchedAdam` (or :class:`~pyro_bnn.batched.sgd.BatchedSGD`) update.

Run r's loss is the objective a single run computes with :class:`~pyro_bnn.infer.FastMeanFieldELBO` (one particle)::

    loss_r = -(N / B) * sum_b log p(y_rb | w_r) + kl_weight_r * KL_r,    w_r = loc_r + sigma_r * eps_r

with the KL in closed form for Normal priors and ``log q(w) - log p(w)`` otherwise (:mod:`.kl`). With
``antithetic`` the first half of each run's batch is scored at ``loc + sigma * eps`` and the second at
``loc - sigma * eps`` (the fast objective's default); without it and with ``closed_form_kl=False`` the loss is
Pyro's ``Trace_ELBO``, draw for draw in distribution. With P particles (``BatchedForm.particles``) each run draws P
independent weight vectors and its loss is the mean of their P losses, as ``Trace_ELBO(num_particles=P)`` and the
fast objective with P particles compute.

For node-noise mixture guides (``mixture:K``, :class:`~pyro_bnn.infer.MixtureMeanKL`) the random values are the
network's node noise, drawn per row of the minibatch (each example repeated S times, row j from component
``j mod K``, ``eps`` ``(R, B S, D)``), and ``KL_r`` is the closed-form KL of the mixture mean against the prior; the
weights are deterministic, stacked like a point estimate's.

For point estimates (the ``map``, ``mle`` and ``mc-dropout`` guides, ``Trace_ELBO`` with ``AutoDelta``)
``w_r = loc_r`` and ``KL_r = -log p(w_r)``: the MAP objective, the likelihood alone where the network has no weight
sites; they draw no weight noise. A network with dropout draws instead each run's dropout masks, one per example and
layer, from ``eps`` ``(R, B M)`` (M values per example; ``(R, 0)`` without dropout).

Each run draws its noise from its own ``torch.Generator`` (:class:`RunNoise`), so a run's draws do not depend on the
other runs of its batch, and the backward pass of the summed loss gives each run the gradient of its own loss only
(no operation mixes runs). A run whose loss is not finite is frozen before the update that would spread it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pyro
import torch

from pyro_bnn.batched.adam import BatchedAdam
from pyro_bnn.batched.draw import draw_stacked
from pyro_bnn.batched.dropout import dropout_masks
from pyro_bnn.batched.kl import BatchedKL
from pyro_bnn.batched.layout import ScaleMap
from pyro_bnn.batched.sgd import BatchedSGD
from pyro_bnn.batched.stack import RunStack
from pyro_bnn.infer.mixture_kl import component_of_rows
from pyro_bnn.infer.objective_registry import BatchedForm
from pyro_bnn.likelihoods import KLScale
from pyro_bnn.rng import PARALLEL_MIN_NUMEL, standard_normal


@dataclass
class BatchedTerms:
    """Per-run values of one step, each ``(R,)`` and detached: ``loss = data_term + kl_term``."""

    loss: torch.Tensor
    data_term: torch.Tensor
    kl_term: torch.Tensor


class StepInputs(NamedTuple):
    """What one step of R runs reads, each value free to change from one step to the next (schedules, divergence and
    early stopping change the rates, weights and mask): the argument of :meth:`BatchedStep.step` and of a
    :class:`~.graph.GraphedBatchedStep`.

    Attributes:
        x: ``(R, B, *input_shape)``.
        y: ``(R, B)`` or ``(R, B, D_out)``.
        kl_weight: ``(R,)``, each run's factor on its KL.
        eps: ``(R, D)`` standard normal draws, ``(R, P, D)`` for P > 1 particles; for point estimates ``(R, B M)``,
            the dropout masks' draws (``(R, 0)`` without dropout); ``(R, B S, D)`` for node noise.
        lrs: Per leaf of ``stack.leaves``, the runs' learning rates ``(R,)``.
        weight_decays: Per leaf, the runs' weight decays ``(R,)`` or None (no decay); None: no leaf decays.
        active: ``(R,)`` bool, the runs still training (None: all), on any device.
    """

    x: torch.Tensor
    y: torch.Tensor
    kl_weight: torch.Tensor
    eps: torch.Tensor
    lrs: Sequence[torch.Tensor]
    weight_decays: Sequence[torch.Tensor | None] | None = None
    active: torch.Tensor | None = None


class RunNoise:
    """A ``torch.Generator`` per run, seeded from the run's seed and the epoch (so a resumed run draws what an
    uninterrupted one would have drawn from that epoch on, with nothing extra in its checkpoint)."""

    def __init__(self, seeds: Sequence[int], device: torch.device) -> None:
        self.seeds = [int(s) for s in seeds]
        self.generators = [torch.Generator(device=device) for _ in self.seeds]

    def start_epoch(self, epoch: int) -> None:
        """Re-seeds every generator for ``epoch`` (0-based)."""
        for seed, generator in zip(self.seeds, self.generators, strict=True):
            generator.manual_seed((seed * 1_000_003 + epoch * 7_919 + 17) % (2**63 - 1))

    def draw(self, shape: tuple[int, ...], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``(R, *shape)`` standard normal values, run r's from its own generator."""
        out = torch.empty((len(self.generators), *shape), dtype=dtype, device=device)
        small = math.prod(shape) < PARALLEL_MIN_NUMEL
        for row, generator in zip(out, self.generators, strict=True):
            if small:  # what standard_normal does for a small draw, without its per-call profiler range
                row.normal_(generator=generator)
            else:  # filled in chunks on every core (pyro_bnn.rng), seeded from the run's generator
                standard_normal(shape, dtype=dtype, device=device, generator=generator, out=row)
        return out


class BatchedStep:
    """Computes and applies one step of R runs.

    Args:
        stack: The runs' stacked values.
        kl: Their KL terms (built from the same models and the stack's sites).
        optimizer: Adam or SGD over ``stack.leaves``.
        form: Which single-run objective each run's loss is.
    """

    def __init__(self, stack: RunStack, kl: BatchedKL, optimizer: BatchedAdam | BatchedSGD, form: BatchedForm) -> None:
        self.stack, self.kl, self.optimizer, self.form = stack, kl, optimizer, form
        self.likelihood = stack.models[0].likelihood

    def terms(self, x: torch.Tensor, y: torch.Tensor, kl_weight: torch.Tensor, eps: torch.Tensor):
        """The differentiable per-run loss ``(R,)`` and the detached :class:`BatchedTerms`.

        Args:
            x: ``(R, B, *input_shape)``; y: ``(R, B)`` or ``(R, B, D_out)``.
            kl_weight: ``(R,)``, each run's factor on its KL.
            eps: ``(R, D)`` standard normal draws, ``(R, P, D)`` for P > 1 particles, ``(R, B M)`` for point
                estimates (their dropout masks' draws), ``(R, B S, D)`` for node noise (a draw per row).
        """
        stack = self.stack
        if self.form.mixture:
            return self._mixture_terms(x, y, kl_weight, eps)
        if stack.point:
            return self._point_terms(x, y, kl_weight, eps)
        if self.form.particles > 1:
            return self._particle_terms(x, y, kl_weight, eps)
        loc, raw = stack.loc, stack.raw_scale
        antithetic = self.form.antithetic and x.shape[1] > 1
        if stack.scale_map is ScaleMap.EXP:  # one fused node: the draw and the closed-form KL
            log_scale = raw
            plus, minus, kl = draw_stacked(loc, raw, eps, self.kl, antithetic)
        else:
            scale, log_scale = stack.scale_map.scale_and_log(raw)
            delta = scale * eps
            plus, minus = loc + delta, (loc - delta if antithetic else None)
            kl = self.kl.closed_form(loc, scale, log_scale)
        if antithetic:
            half = (x.shape[1] + 1) // 2
            output = torch.cat(self._outputs([(x[:, :half], plus), (x[:, half:], minus)]), dim=1)
        else:
            output = stack.outputs(x, stack.split(plus))
        data = self._data_term(output, y)
        if self.kl.monte_carlo_segments:
            mc = self.kl.monte_carlo(eps, log_scale, plus)
            if antithetic:
                mc = 0.5 * (mc + self.kl.monte_carlo(-eps, log_scale, minus))
            kl = kl + mc
        return self._combine(data, kl, kl_weight)

    def _particle_terms(self, x: torch.Tensor, y: torch.Tensor, kl_weight: torch.Tensor, eps: torch.Tensor):
        """:meth:`terms` with P independent draws per run, ``eps`` ``(R, P, D)``: each run's loss is the mean of the
        P losses (data term and KL of each draw; the closed-form part of the KL is the same for every draw)."""
        stack = self.stack
        if eps.dim() != 3 or eps.shape[1] != self.form.particles:
            raise ValueError(
                f"{self.form.particles} particles need noise (R, {self.form.particles}, D), got {tuple(eps.shape)}"
            )
        scale, log_scale = stack.scale_map.scale_and_log(stack.raw_scale)
        draws = eps.unbind(1)
        weights = [stack.loc + scale * e for e in draws]
        outputs = self._outputs([(x, w) for w in weights])
        data = torch.stack([self._data_term(output, y) for output in outputs]).mean(0)
        kl = self.kl.closed_form(stack.loc, scale, log_scale)
        if self.kl.monte_carlo_segments:
            mc = [self.kl.monte_carlo(e, log_scale, w) for e, w in zip(draws, weights, strict=True)]
            kl = kl + torch.stack(mc).mean(0)
        return self._combine(data, kl, kl_weight)

    def _mixture_terms(self, x: torch.Tensor, y: torch.Tensor, kl_weight: torch.Tensor, eps: torch.Tensor):
        """:meth:`terms` of node-noise mixture guides under the implicit-BNN objective
        (:class:`~pyro_bnn.infer.MixtureMeanKL`), ``eps`` ``(R, B S, D)``: every example repeated S times, row j
        drawn from component ``j mod K``, the data term ``-(N / (B S)) sum_rows log p(y | x, z_row)`` (B instead of N
        for ``kl_scale="paper"``) and the closed-form KL of the mixture mean ``N(mean_k mu_k, sum_k sigma_k^2 / K^2)``
        against the prior."""
        stack, copies, likelihood = self.stack, self.form.copies, self.likelihood
        runs, rows = x.shape[0], x.shape[1] * copies
        if eps.shape != (runs, rows, stack.num_latents):
            raise ValueError(
                f"the mixture objective needs noise (R, B S, D) = {(runs, rows, stack.num_latents)}, got "
                f"{tuple(eps.shape)}"
            )
        scale, _ = stack.scale_map.scale_and_log(stack.raw_scale)  # (R, K, D)
        component = component_of_rows(rows, stack.components, x.device)
        noise = torch.addcmul(stack.loc[:, component], scale[:, component], eps)  # (R, B S, D): one draw per row
        output = stack.outputs(x.repeat_interleave(copies, 1), stack.split(noise))
        with pyro.validation_enabled(False):  # a run's NaN outputs freeze that run, as in _data_term
            log_likelihood = likelihood.log_likelihood(output, y.repeat_interleave(copies, 1))  # (R, B S)
        plate_size = likelihood.dataset_size if likelihood.kl_scale is KLScale.DATASET else x.shape[1]
        data = -log_likelihood.sum(1) * (plate_size / rows)
        scale_hat = scale.square().sum(1).sqrt() / stack.components
        kl = self.kl.closed_form(stack.loc.mean(1), scale_hat, scale_hat.log())
        return self._combine(data, kl, kl_weight)

    def _outputs(self, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        """Each pair's outputs ``(R, B_i, out)`` from its inputs ``(R, B_i, *input_shape)`` and flat weights
        ``(R, D)``: in one call of :meth:`RunStack.outputs <.stack.RunStack.outputs>` over ``len(pairs) * R``
        networks when the inputs have one shape (the per-call overhead dominates small nets), one call per pair
        otherwise and for networks run one by one."""
        stack = self.stack
        if stack.loop_runs or len({x.shape for x, _ in pairs}) != 1:
            return [stack.outputs(x, stack.split(w)) for x, w in pairs]
        inputs, weights = zip(*pairs, strict=True)
        per_run = {k: torch.cat([v] * len(pairs)) for k, v in stack.per_run_values().items()}
        outputs = stack.outputs(torch.cat(inputs), stack.split(torch.cat(weights)), per_run)
        return list(outputs.split(inputs[0].shape[0]))

    def _point_terms(self, x: torch.Tensor, y: torch.Tensor, kl_weight: torch.Tensor, eps: torch.Tensor):
        """:meth:`terms` of point estimates (``Trace_ELBO`` with ``AutoDelta``): the weights are the locations,
        whose log density under the guide is 0, so the latent term is ``-log p(w)`` (nothing without weight sites,
        the maximum-likelihood network). A network with dropout takes each run's masks from ``eps`` ``(R, B M)``
        (:func:`~.dropout.dropout_masks`; M = 0 without dropout)."""
        stack = self.stack
        per_run = None
        layers = stack.dropout_layers(x.shape[2:])
        if layers:
            size = sum(layer.size for layer in layers)
            if eps.shape != (x.shape[0], x.shape[1] * size):
                raise ValueError(
                    f"dropout needs noise (R, B * {size}) = {(x.shape[0], x.shape[1] * size)}, got {tuple(eps.shape)}"
                )
            masks = dropout_masks(eps.reshape(x.shape[0], x.shape[1], size), layers)
            per_run = {**stack.per_run_values(), **masks}
        output = stack.outputs(x, stack.split(stack.loc), per_run)
        return self._combine(self._data_term(output, y), self.kl.negative_log_prior(stack.loc), kl_weight)

    def _data_term(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``-(N / B) * sum_b log p(y_rb | w_r)``, ``(R,)``, from the outputs ``(R, B, out)``."""
        # Without argument checks: one run's NaN outputs must freeze that run, not raise for the whole batch.
        with pyro.validation_enabled(False):
            log_likelihood = self.likelihood.log_likelihood(output, y)  # (R, B)
        # The data plate's N / B (1 for kl_scale="paper"), read from the likelihood as a single run does.
        plate = self.likelihood.plate(output.shape[1], output.device)
        return -log_likelihood.sum(1) * (plate.size / plate.subsample_size)

    @staticmethod
    def _combine(data: torch.Tensor, kl: torch.Tensor, kl_weight: torch.Tensor):
        loss = data + kl_weight.to(kl.dtype) * kl
        data_value = data.detach()
        return loss, BatchedTerms(loss.detach(), data_value, loss.detach() - data_value)

    def step(
        self, inputs: StepInputs, *, host_active: Sequence[bool] | None = None
    ) -> tuple[BatchedTerms, torch.Tensor]:
        """Evaluates every run's loss and updates the active runs whose loss is finite.

        Args:
            inputs: The step's batches, KL weights, noise, learning rates, weight decays and active runs.
            host_active: ``inputs.active`` as a list, given when the step is captured in a CUDA graph with the rows
                Adam update (:meth:`BatchedAdam.step <pyro_bnn.batched.adam.BatchedAdam.step>`): that update then
                skips only the inactive runs, and applies the step of a run whose loss is not finite (its gradient
                is not); the caller fails that run after the step.

        Returns:
            The terms, and ``(R,)`` bool: the runs that were active and had a finite loss (the ones updated).
        """
        loss, terms = self.terms(inputs.x, inputs.y, inputs.kl_weight, inputs.eps)
        updated = torch.isfinite(terms.loss)
        if inputs.active is not None:
            updated = updated & inputs.active.to(updated.device, non_blocking=True)
        for leaf in self.stack.leaves:
            leaf.grad = None
        torch.where(updated, loss, torch.zeros_like(loss)).sum().backward()
        self.optimizer.step(inputs.lrs, inputs.weight_decays, updated, host_active=host_active)
        return terms, updated
