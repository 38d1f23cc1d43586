"""Hidden-unit alignment between chains, and distances between two posterior predictives.

* :func:`align_hidden_units` undoes the label switching between chains (hidden units permuted and, for odd
  activations, sign-flipped) so that per-weight summaries and r-hat compare like with like.
* :func:`predictive_distance` and :func:`wasserstein_1d` compare two posterior predictives point by point, which
  needs no alignment at all.

Samples use the layout of :mod:`pyro_bnn.diagnostics.arviz_export`: ``{site: (chain, draw, *site_shape)}``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from pyro_bnn.bnn import BNN

ODD_ACTIVATIONS = (nn.Tanh, nn.Hardtanh, nn.Softsign, nn.Tanhshrink, nn.Identity, nn.Dropout)
"""Modules between two linear layers that keep the hidden layer sign-symmetric: ``f(-z) = -f(z)``."""


# ------------------------------------------------------------------------------------------------ alignment
@dataclass(frozen=True)
class HiddenLayer:
    """One layer of hidden units whose order (and, if ``odd``, sign) the network's function does not see.

    Unit ``j`` owns row ``j`` of ``weight_in`` (and entry ``j`` of ``bias_in``) and column ``j`` of ``weight_out``.

    Attributes:
        weight_in: Site of the incoming weights ``(H, fan_in)``.
        weight_out: Site of the outgoing weights ``(fan_out, H)`` (the next layer's ``weight_in``).
        bias_in: Site of the incoming biases ``(H,)``, or None.
        odd: The activation is odd (``tanh``): negating a unit's incoming weights and bias and its outgoing
            weights leaves the function unchanged, so sign flips are matched too.
    """

    weight_in: str
    weight_out: str
    bias_in: str | None = None
    odd: bool = False


def hidden_layers(bnn: BNN) -> list[HiddenLayer]:
    """The hidden layers of a feed-forward net of ``nn.Linear`` layers whose weights are all random sites.

    Consecutive linear layers (in module registration order, which is execution order for the zoo's MLPs) form a
    hidden layer; it is ``odd`` when every module registered between them is one of :data:`ODD_ACTIVATIONS`.

    Raises:
        ValueError: fewer than two linear layers with random weights.
    """
    sites = set(bnn.site_names)
    linears, between = [], []
    for name, module in bnn.net.named_modules():
        if isinstance(module, nn.Linear) and f"{name}.weight" in sites:
            linears.append((name, module))
            between.append([])
        elif linears and next(module.children(), None) is None:
            between[-1].append(module)
    if len(linears) < 2:
        raise ValueError("hidden_layers needs at least two nn.Linear layers with random weights")
    layers = []
    for (name, module), (next_name, _), modules in zip(linears, linears[1:], between, strict=False):
        bias = f"{name}.bias" if module.bias is not None and f"{name}.bias" in sites else None
        odd = all(isinstance(m, ODD_ACTIVATIONS) for m in modules)
        layers.append(HiddenLayer(f"{name}.weight", f"{next_name}.weight", bias, odd))
    return layers


def linear_assignment(cost: torch.Tensor) -> torch.Tensor:
    """Exact minimum-cost perfect matching of a square cost matrix (the Hungarian method with potentials, O(n^3)).

    Args:
        cost: ``(n, n)``; ``cost[i, j]`` is the cost of giving row ``i`` column ``j``.

    Returns:
        ``(n,)`` long tensor: ``assignment[i]`` is row ``i``'s column (as ``scipy.optimize.linear_sum_assignment``'s
        second output for a square matrix, up to ties).
    """
    if cost.dim() != 2 or cost.shape[0] != cost.shape[1]:
        raise ValueError(f"cost must be a square matrix, got shape {tuple(cost.shape)}")
    n = cost.shape[0]
    a = cost.detach().double().cpu().tolist()
    inf = math.inf
    # 1-based arrays; column 0 is a virtual column holding the row being inserted.
    u, v = [0.0] * (n + 1), [0.0] * (n + 1)
    row_of = [0] * (n + 1)  # row_of[j]: the row matched to column j
    way = [0] * (n + 1)
    for i in range(1, n + 1):
        row_of[0] = i
        j0 = 0
        minv = [inf] * (n + 1)
        used = [False] * (n + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = row_of[j0], inf, 0
            for j in range(1, n + 1):
                if not used[j]:
                    reduced = a[i0 - 1][j - 1] - u[i0] - v[j]
                    if reduced < minv[j]:
                        minv[j], way[j] = reduced, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(n + 1):
                if used[j]:
                    u[row_of[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if row_of[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            row_of[j0] = row_of[j1]
            j0 = j1
    assignment = [0] * n
    for j in range(1, n + 1):
        assignment[row_of[j] - 1] = j - 1
    return torch.tensor(assignment, dtype=torch.long)


def _unit_features(w_in: torch.Tensor, b_in: torch.Tensor | None, w_out: torch.Tensor | None) -> torch.Tensor:
    """``(H, fan_in [+ 1] [+ fan_out])``: each unit's incoming weights, bias and (given) outgoing weights."""
    parts = [w_in, *([b_in.unsqueeze(-1)] if b_in is not None else [])]
    if w_out is not None:
        parts.append(w_out.transpose(-1, -2))
    return torch.cat(parts, -1)


def _match(reference: torch.Tensor, features: torch.Tensor, odd: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Permutation and signs that carry ``features`` onto ``reference`` (both ``(H, F)``): new unit ``i`` is old
    unit ``perm[i]`` times ``sign[i]``."""
    dots = reference @ features.T  # (H, H)
    sq_ref = reference.square().sum(-1, keepdim=True)
    sq = features.square().sum(-1).unsqueeze(0)
    if odd:
        # ||r - s f||^2 = |r|^2 + |f|^2 - 2 s <r, f>: the best sign is the sign of the inner product.
        signs = torch.where(dots >= 0, 1.0, -1.0)
        cost = sq_ref + sq - 2 * dots.abs()
    else:
        signs = torch.ones_like(dots)
        cost = sq_ref + sq - 2 * dots
    perm = linear_assignment(cost)
    rows = torch.arange(len(perm))
    return perm, signs[rows, perm].to(features.dtype)


def _relabel(aligned: dict, layer: HiddenLayer, perm: torch.Tensor, sign: torch.Tensor) -> None:
    """Applies per-chain ``(perm, sign)`` (each ``(chain, H)``) to the layer's three sites in ``aligned``."""
    w_in, w_out = aligned[layer.weight_in], aligned[layer.weight_out]
    draws = w_in.shape[1]
    index = perm[:, None, :, None].expand(-1, draws, -1, w_in.shape[3])
    aligned[layer.weight_in] = w_in.gather(2, index) * sign[:, None, :, None]
    if layer.bias_in:
        b_in = aligned[layer.bias_in]
        aligned[layer.bias_in] = b_in.gather(2, perm[:, None, :].expand(-1, draws, -1)) * sign[:, None]
    index = perm[:, None, None, :].expand(-1, draws, w_out.shape[2], -1)
    aligned[layer.weight_out] = w_out.gather(3, index) * sign[:, None, None, :]


def align_hidden_units(
    samples: Mapping[str, torch.Tensor],
    reference: int | Mapping[str, torch.Tensor],
    layers: Sequence[HiddenLayer],
    *,
    max_passes: int = 5,
    return_permutations: bool = False,
):
    """Relabels each chain's hidden units (one permutation and one set of signs per chain and layer) to match a
    reference, so that "unit 3" means the same unit in every chain.

    How: each unit of a chain is described by its chain-mean feature vector ``f_j = [W_in[j, :], b_in[j],
    W_out[:, j]]`` (incoming weights, bias, outgoing weights), the reference units likewise (the reference chain's
    mean, or the given reference weights). The cost of giving reference slot ``i`` to unit ``j`` is the squared
    distance ``||f_ref_i - f_j||^2``, or for an odd activation ``min_s ||f_ref_i - s f_j||^2`` over ``s = +-1``
    (the sign of ``<f_ref_i, f_j>``), and the exact minimum-cost matching (:func:`linear_assignment`) picks the
    permutation. Every draw of the chain then gets ``W_in[i] = s_i W_in[perm_i]``, ``b_in[i] = s_i b_in[perm_i]``,
    ``W_out[:, i] = s_i W_out[:, perm_i]``, which leaves each draw's network function unchanged.

    Layers go from the input side, so a layer's incoming columns are already in the reference's labelling. Its
    outgoing entries are indexed by the *next* layer's units, which are not yet aligned; so the first pass
    matches a layer followed by another hidden layer on ``[W_in, b_in]`` only (the last hidden layer, whose
    outgoing weights go to the fixed output units, on all three), and further passes match every layer on all
    three, until no unit moves (at most ``max_passes`` passes). The features are raw weights (not standardised),
    and a chain that switches labels *within* itself is not untangled (one relabelling per chain).

    Args:
        samples: ``{site: (chain, draw, *site_shape)}``; sites not named by ``layers`` are passed through.
        reference: A chain index of ``samples`` (that chain is left as it is), or reference weights
            ``{site: site_shape}`` (e.g. a variational posterior mean) that every chain is matched to.
        layers: The hidden layers, input side first (:func:`hidden_layers`).
        max_passes: Passes over the layers at most.
        return_permutations: Also return, per layer, the overall ``(perm, signs)``, each ``(chain, H)``: aligned
            unit ``i`` of chain ``c`` is the original unit ``perm[c, i]`` times ``signs[c, i]``.

    Returns:
        The aligned samples (new tensors for the permuted sites), and with ``return_permutations`` the list of
        ``(perm, signs)``.
    """
    num_chains = None
    for layer in layers:
        names = [layer.weight_in, layer.weight_out, *([layer.bias_in] if layer.bias_in else [])]
        missing = [name for name in names if name not in samples]
        if missing:
            raise ValueError(f"samples lack the site(s) {missing} of hidden layer {layer}")
        num_chains = samples[layer.weight_in].shape[0]
        hidden = samples[layer.weight_in].shape[2]
        if samples[layer.weight_out].shape[-1] != hidden:
            raise ValueError(f"{layer.weight_out} does not take {layer.weight_in}'s {hidden} units as inputs")
    if isinstance(reference, int) and not (num_chains is None or 0 <= reference < num_chains):
        raise ValueError(f"reference chain {reference} does not exist ({num_chains} chains)")
    aligned = dict(samples)
    totals = []
    for layer in layers:
        w_in = samples[layer.weight_in]
        hidden = w_in.shape[2]
        identity = torch.arange(hidden, device=w_in.device).expand(num_chains, hidden)
        totals.append((identity, torch.ones(num_chains, hidden, dtype=w_in.dtype, device=w_in.device)))
    feeds_hidden = [any(other.weight_in == layer.weight_out for other in layers) for layer in layers]
    for sweep in range(max_passes):
        moved = False
        for k, layer in enumerate(layers):
            with_out = sweep > 0 or not feeds_hidden[k]
            w_in, w_out = aligned[layer.weight_in], aligned[layer.weight_out]
            b_in = aligned[layer.bias_in] if layer.bias_in else None

            def features(chain: int, w_in=w_in, w_out=w_out, b_in=b_in, with_out=with_out) -> torch.Tensor:
                return _unit_features(
                    w_in[chain].mean(0),
                    None if b_in is None else b_in[chain].mean(0),
                    w_out[chain].mean(0) if with_out else None,
                )

            if isinstance(reference, int):
                ref = features(reference)
            else:
                ref = _unit_features(
                    reference[layer.weight_in],
                    reference[layer.bias_in] if layer.bias_in else None,
                    reference[layer.weight_out] if with_out else None,
                )
            ref = ref.to(device=w_in.device, dtype=w_in.dtype)
            hidden = w_in.shape[2]
            perms, signs = [], []
            for chain in range(num_chains):
                if isinstance(reference, int) and chain == reference:
                    perm, sign = torch.arange(hidden), torch.ones(hidden, dtype=w_in.dtype)
                else:
                    perm, sign = _match(ref, features(chain), layer.odd)
                perms.append(perm)
                signs.append(sign)
            perm = torch.stack(perms).to(w_in.device)  # (chain, H)
            sign = torch.stack(signs).to(device=w_in.device, dtype=w_in.dtype)
            if bool((perm != torch.arange(hidden, device=w_in.device)).any()) or bool((sign != 1).any()):
                moved = True
                _relabel(aligned, layer, perm, sign)
                total_perm, total_sign = totals[k]
                totals[k] = (total_perm.gather(1, perm), total_sign.gather(1, perm) * sign)
        if not moved:
            break
    return (aligned, totals) if return_permutations else aligned


# ------------------------------------------------------------------------------------ predictive comparison
def wasserstein_1d(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Wasserstein-1 distance between two empirical 1-D distributions, per column.

    ``W1 = integral |F_a(t) - F_b(t)| dt`` between the empirical CDFs, evaluated exactly on the merged sorted
    sample; for equal sample counts it is ``mean |sort(a) - sort(b)|``.

    Args:
        a: ``(S_a, N)`` draws; column ``n`` is one distribution.
        b: ``(S_b, N)`` draws (``S_b`` may differ from ``S_a``).

    Returns:
        ``(N,)`` distances.

    Raises:
        ValueError: ``a`` or ``b`` is not 2-D, their columns differ, or either holds no draw.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must be (S_a, N) and (S_b, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[0] == 0 or b.shape[0] == 0:
        raise ValueError(f"a and b need at least 1 draw each, got {a.shape[0]} and {b.shape[0]}")
    a_sorted = a.T.contiguous().sort(-1).values  # (N, S_a)
    b_sorted = b.T.contiguous().sort(-1).values
    both = torch.cat([a_sorted, b_sorted], -1).sort(-1).values  # (N, S_a + S_b)
    points = both[:, :-1].contiguous()
    cdf_a = torch.searchsorted(a_sorted, points, right=True).to(both.dtype) / a.shape[0]
    cdf_b = torch.searchsorted(b_sorted, points, right=True).to(both.dtype) / b.shape[0]
    return ((cdf_a - cdf_b).abs() * both.diff(dim=-1)).sum(-1)


def predictive_distance(
    probs_a: torch.Tensor,
    probs_b: torch.Tensor,
    *,
    kind: str = "kl",
    class_index: int = 1,
    eps: float = 1e-12,
) -> torch.Tensor:
    """Per test point, a distance between two posterior predictives of a classifier.

    Args:
        probs_a: ``(S_a, N, C)`` class probabilities per posterior sample (the reference, e.g. NUTS).
        probs_b: ``(S_b, N, C)`` (e.g. VI).
        kind: ``"kl"``: ``KL(mean_a || mean_b)`` between the two mean predictive categorical distributions (the
            Bayesian model averages; probabilities clamped at ``eps``); ``"w1"``: Wasserstein-1 between the
            per-point distributions of the samples' ``p(class = class_index)`` (:func:`wasserstein_1d`), which also
            sees a difference in the spread of the predictive, not only in its mean.
        class_index: The class whose probability W1 compares, ``0 <= class_index < C``.
        eps: Floor of the probabilities in the KL.

    Returns:
        ``(N,)`` distances (nats for KL, probability units for W1).

    Raises:
        ValueError: probs not ``(S, N, C)`` with the same N and C, no sample, an unknown ``kind``, or with
            ``kind="w1"`` a ``class_index`` that is not an int in ``[0, C - 1]``.
    """
    if probs_a.dim() != 3 or probs_b.dim() != 3 or probs_a.shape[1:] != probs_b.shape[1:]:
        raise ValueError(
            f"probs must be (S, N, C) with the same N and C, got {tuple(probs_a.shape)} and {tuple(probs_b.shape)}"
        )
    if probs_a.shape[0] == 0 or probs_b.shape[0] == 0:
        raise ValueError(f"probs need at least 1 sample each, got {probs_a.shape[0]} and {probs_b.shape[0]}")
    if kind == "kl":
        mean_a = probs_a.mean(0).clamp_min(eps)
        mean_b = probs_b.mean(0).clamp_min(eps)
        return (mean_a * (mean_a.log() - mean_b.log())).sum(-1)
    if kind == "w1":
        num_classes = probs_a.shape[2]
        try:  # any integer, NumPy's and 0-d torch ones included, but not a bool
            index = None if isinstance(class_index, bool) else operator.index(class_index)
        except TypeError:
            index = None
        if index is None or not 0 <= index < num_classes:
            raise ValueError(
                f"class_index must be an int in [0, {num_classes - 1}] (the probs have {num_classes} classes), "
                f"got {class_index!r}"
            )
        return wasserstein_1d(probs_a[..., index], probs_b[..., index])
    raise ValueError(f"kind must be 'kl' or 'w1', got {kind!r}")


__all__ = [
    "ODD_ACTIVATIONS",
    "HiddenLayer",
    "align_hidden_units",
    "hidden_layers",
    "linear_assignment",
    "predictive_distance",
    "wasserstein_1d",
]
