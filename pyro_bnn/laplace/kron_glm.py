"""The GLM predictive's output moments of a Kronecker-factored Laplace approximation over a network of linear
layers, from each layer's rank-one Jacobians instead of the full ``(B, outputs, P)`` Jacobian.

For a linear layer ``z = W a + b``, the Jacobian of output ``c`` with respect to ``W`` is the outer product
``g_c a^T`` (``g_c = d f_c / d z``). The posterior covariance of ``W`` is, in the eigenbases ``Q1`` (``out x out``)
and ``Q2`` (``in x in``) of its two Kronecker factors, diagonal with entries ``1 / (l1_i l2_j + delta)``, so

    J_c Sigma J_d^T = sum_ij (Q1^T g_c)_i (Q1^T g_d)_i (Q2^T a)_j^2 / (l1_i l2_j + delta),

and a bias adds ``sum_i (Q^T g_c)_i (Q^T g_d)_i / (l_i + delta)``. That is laplace-torch's
``functional_variance`` (``J Sigma J^T`` through its ``KronDecomposed``) term for term, at a cost of about
``B (C out^2 + in^2 + in out + C^2 out)`` per layer (the projections into the eigenbases, then the sums) instead of
``2 B C (out^2 in + out in^2)``: over the 638 810 weights of an MLP of three 400-unit layers on Fashion-MNIST,
0.35 ms per input against laplace-torch's 320 ms (bench/LAPLACE_GLM.md).

The layers' inputs and outputs are caught by forward hooks, and ``d f_c / d z`` by one backward pass per output,
which needs the network to treat the inputs of a batch independently (no batch statistics), as laplace-torch's
per-input Jacobians do. What the structure cannot show (a layer's forward that is not ``W a + b``, a hook that
changes its output, a module that mixes the examples of a batch) :func:`rank_one_layers` finds by computing a probe's
moments both ways.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pyro_bnn.laplace.fit import import_laplace


def rank_one_layers(la: Any, probe: torch.Tensor) -> list[nn.Linear] | None:
    """The linear layers whose rank-one Jacobians give ``la``'s GLM moments (:func:`kron_glm_moments`), in the order
    of ``la``'s parameters; None where they do not: an approximation that is not Kronecker-factored over all
    weights; a network in training mode; a parameter outside a plain ``nn.Linear`` (a subclass may compute something
    else); a layer called more than once, or on anything but one ``(B, in)`` row per example, in a forward pass of
    ``probe``; or moments of ``probe`` that differ from laplace-torch's over its full Jacobian.

    laplace-torch's damping is not refused: its posterior precision drops the flag (``KronDecomposed`` arithmetic
    does not carry it), so its own GLM predictive ignores it too, and the moments here equal its.

    Args:
        la: A fitted laplace-torch approximation.
        probe: Inputs ``(B, *input_shape)`` on the model's device; the first two are used, which also checks that
            the network keeps the examples of a batch apart (a single input cannot).
    """
    laplace = import_laplace()
    if not isinstance(la, laplace.KronLaplace) or isinstance(la, laplace.LLLaplace) or la.model.training:
        return None
    precision = la.posterior_precision
    if len(precision.eigenvalues) != len(la.params):
        return None
    owners = _owners(m for m in la.model.modules() if type(m) is nn.Linear)
    if any(id(p) not in owners for p in la.params):
        return None
    layers = list(dict.fromkeys(owners[id(p)] for p in la.params))  # each once, in the parameters' order
    probe = probe[:2]
    try:
        _, f_var = kron_glm_moments(la, probe, layers)
    except _NotRankOne:
        return None
    jacobians, _ = la.backend.jacobians(probe)  # the full (B, C, P) Jacobian of laplace-torch's own route
    want = la.functional_variance(jacobians).detach()
    tolerance = 1e-4 if f_var.dtype == torch.float64 else 1e-3
    if not torch.allclose(f_var, want, rtol=tolerance, atol=tolerance * float(want.abs().max())):
        return None
    return layers


def kron_glm_moments(la: Any, x: torch.Tensor, layers: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor]:
    """The GLM predictive's mean and covariance of the outputs, ``f_mu (B, C)`` and ``f_var (B, C, C)``, equal to
    laplace-torch's (its ``_glm_predictive_distribution``), from the rank-one Jacobians of ``layers``.

    Args:
        la: The fitted approximation.
        x: Inputs ``(B, *input_shape)`` on the model's device.
        layers: :func:`rank_one_layers` of ``la`` (not None).
    """
    precision = la.posterior_precision
    with torch.enable_grad():
        f_mu, inputs, outputs = _forward_caught(la.model, layers, x)
        zs = [outputs[m] for m in layers]
        grads = [torch.autograd.grad(f_mu[:, c].sum(), zs, retain_graph=True) for c in range(f_mu.shape[1])]
    g = {m: torch.stack([per_output[k] for per_output in grads], dim=1) for k, m in enumerate(layers)}  # (B, C, out)
    owner = _owners(layers)
    deltas = precision.deltas.reshape(-1).expand(len(la.params))  # a scalar, or one per parameter tensor
    f_var = f_mu.new_zeros(f_mu.shape[0], f_mu.shape[1], f_mu.shape[1])
    for param, vectors, values, delta in zip(
        la.params, precision.eigenvectors, precision.eigenvalues, deltas, strict=True
    ):
        module = owner[id(param)]
        projected = g[module] @ vectors[0]  # (B, C, out), in the output factor's eigenbasis
        if param.dim() == 1:  # a bias: one factor
            weights = (values[0] + delta).reciprocal().expand(f_mu.shape[0], -1)
        else:
            inverse = (torch.outer(values[0], values[1]) + delta).reciprocal()  # (out, in)
            weights = (inputs[module] @ vectors[1]).square() @ inverse.T  # (B, out)
        f_var += torch.einsum("bci,bdi,bi->bcd", projected, projected, weights)
    return f_mu.detach(), f_var.detach()


class _NotRankOne(Exception):
    """A layer's Jacobian is not one outer product per example."""


def _owners(layers: Any) -> dict[int, nn.Linear]:
    """``{id(parameter): layer}`` for the own parameters of ``layers``."""
    return {id(p): m for m in layers for p in m.parameters(recurse=False)}


def _forward_caught(
    model: nn.Module, layers: list[nn.Linear], x: torch.Tensor
) -> tuple[torch.Tensor, dict[nn.Module, torch.Tensor], dict[nn.Module, torch.Tensor]]:
    """``model(x)`` ``(B, C)`` with the input ``(B, in)`` and output ``(B, out)`` of each of ``layers``; raises
    :class:`_NotRankOne` where a layer is called twice or on inputs of another shape, or the output is not
    ``(B, C)``."""
    inputs: dict[nn.Module, torch.Tensor] = {}
    outputs: dict[nn.Module, torch.Tensor] = {}
    rank_one = [True]

    def keep(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        # called twice, or not on one (B, in) row per example
        if module in outputs or args[0].dim() != 2 or args[0].shape[0] != x.shape[0]:
            rank_one[0] = False
        inputs[module], outputs[module] = args[0].detach(), output

    handles = [layer.register_forward_hook(keep) for layer in layers]
    try:
        f = model(x)
    finally:
        for handle in handles:
            handle.remove()
    if not rank_one[0] or f.dim() != 2 or f.shape[0] != x.shape[0] or len(outputs) != len(layers):
        raise _NotRankOne
    return f, inputs, outputs


__all__ = ["kron_glm_moments", "rank_one_layers"]
