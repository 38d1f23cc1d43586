"""The vectorised engine behind :func:`~pyro_bnn.diagnostics.slices.likelihood_slice`: the summed data
log-likelihood of a network for a batch of values of one scalar weight, every other value fixed.

:class:`SliceEvaluator` has two paths.

* **Plain** (``incremental=False``, or a network that is not an ``nn.Sequential``): ``torch.vmap`` over copies of
  the varied tensor that differ in that one entry, through ``functional_call(net, values, (x,))``. It works for any
  network but runs all of it per value, and gives identical rows identical results only as far as the BLAS does.
* **Incremental** (the default for ``nn.Sequential``, laid out by :class:`~pyro_bnn.diagnostics.slice_plan.Plan`):
  the unperturbed network runs once and its intermediate values are kept (``_Base``). When the varied tensor is
  the weight or bias of a plain ``nn.Linear``, only one output column changes: it is carried through the
  elementwise activations after it and enters the next Linear as a rank-one update of that Linear's kept output;
  when a ReLU-type activation and another wide Linear follow, that Linear's output is linearised in the change
  (each unit's slope in the unperturbed network) with exact corrections for the units the change moves across the
  kink. Every distinct (example, column value) pair runs through the rest of the network once per call and is
  remembered (``_Memo``, :data:`MEMO_SLOTS` values per example); pairs equal to the unperturbed network's are not run
  at all. Other owning layers (convolutions, hooked node-noise layers) run under vmap from that layer on.

Why incremental: once a ReLU unit is off for every example, moving a weight that feeds it leaves its column, and so
every row's log-likelihood, unchanged. Here such a stretch repeats the base or a remembered value bit for bit, so its
log-likelihood is *exactly* constant (the flatness test of :func:`~pyro_bnn.diagnostics.plateaus.find_plateau`
relies on this) and costs nothing after its first point. It is also the speed: a value of the scalar costs tens of
milliseconds instead of a whole forward pass (timings in :func:`~pyro_bnn.diagnostics.slices.likelihood_slice`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from pyro_bnn.checks import int_at_least, positive_int
from pyro_bnn.diagnostics.slice_inputs import check_rows, refuse_unknown_tensors, row_log_likelihood
from pyro_bnn.diagnostics.slice_plan import Plan
from pyro_bnn.nn.modes import network_mode

Index = tuple[int, ...]

check_int = int_at_least
"""``pyro_bnn.checks.int_at_least`` under its old name here, for old imports."""


@contextmanager
def _evaluation_mode(net: nn.Module) -> Iterator[None]:
    """``torch.no_grad`` with every module in eval mode; each module's own mode is restored afterwards."""
    with network_mode(net), torch.no_grad():
        yield


@dataclass
class _Base:
    """The unperturbed network's intermediate values over all N rows (sparse plans fill the optional ones)."""

    owner_input: torch.Tensor  # (N, ...) input of the owning layer
    row_log_likelihood: torch.Tensor  # (N,) float64
    owner_output: torch.Tensor | None = None  # (N, F)
    chain_output: torch.Tensor | None = None  # (N, F) after the elementwise chain
    join_output: torch.Tensor | None = None  # (N, F1) after the join, when there is one
    join2_output: torch.Tensor | None = None  # (N, F2) after the second join, when the plan has one


MEMO_SLOTS = 4
"""Remembered values of the changed column per example (least recently used first out), besides its base value."""


@dataclass
class _Memo:
    """Per-row log-likelihoods remembered for one changed column: ``values[n, k]`` -> ``log_likelihood[n, k]``.

    A saturated unit (a ReLU off, a sigmoid at 0 or 1) gives the same column value for many values of the varied
    scalar; remembering it makes the rest of such a stretch free and its log-likelihood exactly constant across
    calls. NaN marks an empty slot (it equals nothing).
    """

    column: int
    values: torch.Tensor  # (N, MEMO_SLOTS), the column's dtype
    log_likelihood: torch.Tensor  # (N, MEMO_SLOTS) float64
    last_used: torch.Tensor  # (N, MEMO_SLOTS) int64, the call that last used the slot; -1 when empty
    calls: int = 0


class SliceEvaluator:
    """Summed data log-likelihood of ``net`` for given values of one scalar of ``values[name]``."""

    def __init__(self, net, likelihood, x, y, values, name, *, batch_points, batch_size, incremental) -> None:
        if not isinstance(net, nn.Module):
            raise ValueError(f"net must be a torch.nn.Module, got {type(net).__name__}")
        self.log_likelihood = row_log_likelihood(likelihood)
        check_rows(x, y)
        own = dict(net.named_parameters())
        own.update(net.named_buffers())
        if not isinstance(name, str) or name not in own:
            known = ", ".join(list(own)[:8]) + (", ..." if len(own) > 8 else "")
            raise ValueError(f"unknown parameter name {name!r}; the network's tensors are {known}")
        if not isinstance(values, Mapping):
            raise ValueError(f"values must be a dict {{name: tensor}}, got {type(values).__name__}")
        refuse_unknown_tensors(values, own, "values")
        for key, value in values.items():
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"values[{key!r}] must be a torch.Tensor, got {type(value).__name__}")
        wrong = [key for key in values if tuple(values[key].shape) != tuple(own[key].shape)]
        if wrong:
            key = wrong[0]
            raise ValueError(f"values[{key!r}] has shape {tuple(values[key].shape)}; the network's is {own[key].shape}")
        self.values = {key: (values[key] if key in values else tensor).detach() for key, tensor in own.items()}
        self._check_data(net, likelihood, x, y)
        self.tensor = self.values[name]
        if not self.tensor.dtype.is_floating_point:
            raise ValueError(f"{name!r} is a {self.tensor.dtype} tensor; only floating-point values can vary")
        self.batch_points = positive_int(batch_points, "batch_points")
        self.batch_size = positive_int(batch_size, "batch_size")
        self.net, self.name, self.x, self.y = net, name, x, y
        self.plan = Plan.build(net, name) if incremental else None
        self._base: _Base | None = None
        self._memo: _Memo | None = None
        self._slopes: tuple[int, torch.Tensor, torch.Tensor] | None = None

    def _check_data(self, net: nn.Module, likelihood, x: torch.Tensor, y: torch.Tensor) -> None:
        """The network runs on ``x`` and the likelihood accepts ``y`` (one line each, before any evaluation)."""
        with _evaluation_mode(net):
            try:
                output = functional_call(net, self.values, (x[:1],))
            except RuntimeError as err:
                raise ValueError(f"the network cannot run on x of shape {tuple(x.shape)}: {err}") from None
        if callable(getattr(likelihood, "check_targets", None)):
            likelihood.check_targets(output.expand(len(y), *output.shape[1:]), y)

    def check_index(self, index: int | Sequence[int]) -> Index:
        """``index`` as a tuple of non-negative ints addressing one entry of the tensor."""
        shape = tuple(self.tensor.shape)
        if isinstance(index, torch.Tensor) and not index.dtype.is_floating_point and index.dim() <= 1:
            index = index.tolist()
        if _is_int(index):
            entries = (int(index),)
        elif isinstance(index, (tuple, list)) and all(_is_int(i) for i in index):
            entries = tuple(int(i) for i in index)
        else:
            raise ValueError(f"index must be an int or a tuple of ints, got {index!r}")
        if len(entries) != len(shape):
            raise ValueError(f"index {index!r} has {len(entries)} entries but {self.name!r} has shape {shape}")
        if not all(-size <= i < size for i, size in zip(entries, shape, strict=True)):
            raise ValueError(f"index {index!r} is out of range for {self.name!r} of shape {shape}")
        return tuple(i % size for i, size in zip(entries, shape, strict=True))

    def __call__(self, index: Index, w: torch.Tensor) -> torch.Tensor:
        """``(G,)`` float64: the summed log-likelihood with ``values[name][index]`` at each of ``w`` ``(G,)``.

        With a pyro_bnn likelihood, rows whose network output is not finite score NaN (it is not asked to build a
        distribution from them); a likelihood that refuses the output anyway is reported in one line.
        """
        with _evaluation_mode(self.net):
            try:
                if self.plan is not None and self._base is None:
                    self._base = self._base_pass()
                if self.plan is not None and self.plan.sparse:
                    return self._sparse(index, w)
                return self._dense(index, w)
            except ValueError as err:
                at = f"= {float(w[0])!r}" if len(w) == 1 else f"in [{float(w.min())!r}, {float(w.max())!r}]"
                first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise ValueError(
                    f"the likelihood cannot score the network's output at {self.name}{list(index)} {at}: {first_line}"
                ) from None

    # -- the plain and the dense incremental path: vmap over the stacked tensor --

    def _dense(self, index: Index, w: torch.Tensor) -> torch.Tensor:
        totals = torch.zeros(len(w), dtype=torch.float64, device=w.device)
        for first in range(0, len(w), self.batch_points):
            chunk = w[first : first + self.batch_points]
            stacked = self.tensor.expand(len(chunk), *self.tensor.shape).clone()
            stacked[(slice(None), *index)] = chunk
            for row in range(0, len(self.x), self.batch_size):
                rows = slice(row, row + self.batch_size)
                run = self._dense_rows(rows)
                totals[first : first + len(chunk)] += torch.vmap(run)(stacked).to(torch.float64).sum(-1)
        return totals

    def _dense_rows(self, rows: slice) -> Callable[[torch.Tensor], torch.Tensor]:
        y = self.y[rows]
        if self.plan is None:
            x = self.x[rows]

            def run(tensor: torch.Tensor) -> torch.Tensor:
                output = functional_call(self.net, {**self.values, self.name: tensor}, (x,))
                return self.log_likelihood(output, y)

            return run
        h = self._base.owner_input[rows]
        owner_name, owner = self.plan.owner
        owner_values = self._module_values(owner_name)

        def run_suffix(tensor: torch.Tensor) -> torch.Tensor:
            output = functional_call(owner, {**owner_values, self.plan.attr: tensor}, (h,))
            return self.log_likelihood(self._run(self.plan.rest, output), y)

        return run_suffix

    # -- the incremental path --

    def _module_values(self, module_name: str) -> dict[str, torch.Tensor]:
        prefix = module_name + "."
        return {key[len(prefix) :]: value for key, value in self.values.items() if key.startswith(prefix)}

    def _run(self, modules: Sequence[tuple[str, nn.Module]], h: torch.Tensor) -> torch.Tensor:
        for module_name, module in modules:
            h = functional_call(module, self._module_values(module_name), (h,))
        return h

    def _base_pass(self) -> _Base:
        plan = self.plan
        parts: dict[str, list[torch.Tensor]] = {}

        def keep(key: str, value: torch.Tensor) -> torch.Tensor:
            parts.setdefault(key, []).append(value)
            return value.clone()  # what runs next gets a copy, so an in-place module cannot change what is kept

        for row in range(0, len(self.x), self.batch_size):
            rows = slice(row, row + self.batch_size)
            h = keep("owner_input", self._run(plan.prefix, self.x[rows]))
            if plan.sparse:
                h = self._run([plan.owner], h)
                if h.dim() != 2:  # a Linear over sequences or images: no column shortcut
                    self.plan = plan.as_dense()
                    return self._base_pass()
                h = keep("owner_output", h)
                h = keep("chain_output", self._run(plan.chain, h))
                if plan.join is not None:
                    h = keep("join_output", self._run([plan.join], h))
                if plan.join2 is not None:
                    h = keep("join2_output", self._run([*plan.kink, plan.join2], h))
                output = self._run(plan.rest, h)
            else:
                output = self._run([plan.owner, *plan.rest], h)
            parts.setdefault("row_log_likelihood", []).append(
                self.log_likelihood(output, self.y[rows]).to(torch.float64)
            )
        return _Base(**{key: torch.cat(value) for key, value in parts.items()})

    def _sparse(self, index: Index, w: torch.Tensor) -> torch.Tensor:
        base, plan = self._base, self.plan
        column = index[0]
        delta = (w - self.tensor[index])[:, None]  # exactly 0 at w0, so the column equals the base's there
        changed = base.owner_output[:, column] + (
            delta * base.owner_input[:, index[1]] if plan.attr == "weight" else delta
        )
        changed = self._run(plan.chain, changed) + 0.0  # (G, N); + 0.0 turns -0.0 into 0.0: one key per value
        num_points, num_rows = changed.shape
        memo = self._memo_for(column)
        memo.calls += 1
        result = base.row_log_likelihood.expand(num_points, num_rows).clone()
        at_base = changed == base.chain_output[:, column]
        matches = changed[..., None] == memo.values  # (G, N, slots)
        remembered = matches.any(-1) & ~at_base
        slot = matches.to(torch.uint8).argmax(-1)
        g, n = remembered.nonzero(as_tuple=True)
        result[g, n] = memo.log_likelihood[n, slot[g, n]]
        memo.last_used[n, slot[g, n]] = memo.calls
        g, n = (~(at_base | remembered)).nonzero(as_tuple=True)
        if len(n):
            # Each distinct (row, value) pair runs once, so equal inputs give bit-identical log-likelihoods.
            pairs = torch.stack([n, _bits(changed[g, n])], dim=1)
            unique, inverse, counts = torch.unique(pairs, dim=0, return_inverse=True, return_counts=True)
            first = torch.empty(len(unique), dtype=torch.long, device=n.device).scatter_(
                0, inverse, torch.arange(len(n), device=n.device)
            )
            rows, new_values = n[first], changed[g[first], n[first]]
            new_ll = self._downstream(column, rows, new_values)
            result[g, n] = new_ll[inverse]
            self._remember(memo, rows, new_values, new_ll, counts)
        return result.sum(-1)

    def _memo_for(self, column: int) -> _Memo:
        base = self._base
        if self._memo is None or self._memo.column != column:
            shape = (len(base.chain_output), MEMO_SLOTS)
            device = base.chain_output.device
            self._memo = _Memo(
                column,
                torch.full(shape, math.nan, dtype=base.chain_output.dtype, device=device),
                torch.zeros(shape, dtype=torch.float64, device=device),
                torch.full(shape, -1, dtype=torch.long, device=device),
            )
        return self._memo

    @staticmethod
    def _remember(memo: _Memo, rows: torch.Tensor, values: torch.Tensor, ll: torch.Tensor, counts: torch.Tensor):
        """Stores one new pair per row, the one seen at the most grid values, in that row's least recently used
        slot."""
        # Sorting by count, then stably by row, puts each row's most frequent pair last among its row's pairs.
        order = torch.argsort(counts, stable=True)
        order = order[torch.argsort(rows[order], stable=True)]
        last = torch.ones(len(order), dtype=torch.bool, device=rows.device)
        last[:-1] = rows[order][1:] != rows[order][:-1]
        chosen = order[last]
        r = rows[chosen]
        slot = memo.last_used[r].argmin(-1)
        memo.values[r, slot] = values[chosen]
        memo.log_likelihood[r, slot] = ll[chosen]
        memo.last_used[r, slot] = memo.calls

    def _downstream(self, column: int, rows: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
        """Per-pair log-likelihoods ``(P,)`` float64 of rows ``rows`` with the changed column at ``changed``."""
        base, plan = self._base, self.plan
        # The linearised stage holds a few (pairs, F1) tensors at once; the others one (pairs, widest layer).
        chunk = self.batch_size if plan.join2 is not None else self.batch_points * self.batch_size
        parts = []
        for first in range(0, len(rows), chunk):
            r, value = rows[first : first + chunk], changed[first : first + chunk]
            if plan.join2 is not None:
                h = self._linearised(column, r, value)
            elif plan.join is not None:
                weight = self._module_values(plan.join[0])["weight"]
                difference = value - base.chain_output[r, column]
                h = base.join_output.index_select(0, r).addr_(difference, weight[:, column])
            else:
                h = base.chain_output[r].clone()
                h[:, column] = value
            output = self._run(plan.rest, h)
            parts.append(self.log_likelihood(output, self.y[r]).to(torch.float64))
        return torch.cat(parts)

    def _linearised(self, column: int, rows: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
        """``join2``'s output ``(P, F2)`` for rows ``rows`` with the changed column at ``changed``.

        The join adds ``d = delta * c`` to its unperturbed output ``z0`` (``c`` its weight's column); the kink
        ``act(z) = z if z > 0 else slope * z`` is linear on each side of 0, so ``act(z0 + d) = act(z0) + s0 * d``
        exactly wherever ``z0 + d`` stays on the side of ``z0`` (``s0`` the slope there), and ``join2`` turns that
        into ``delta * U`` with ``U = W2 (c * s0)`` computed once per row. Units that change side get an exact
        correction through their ``W2`` column.
        """
        base, plan = self._base, self.plan
        c = self._module_values(plan.join[0])["weight"][:, column]
        weight2 = self._module_values(plan.join2[0])["weight"]
        slope = plan.slope
        delta = changed - base.chain_output[rows, column]
        h = base.join2_output.index_select(0, rows).addcmul_(
            delta[:, None], self._slope_products(column, rows, c, weight2)
        )
        z0 = base.join_output.index_select(0, rows)
        flipped = (torch.addr(z0, delta, c) > 0) ^ (z0 > 0)
        p, u = flipped.nonzero(as_tuple=True)
        if len(p):
            z0_f, d_f = z0[p, u], delta[p] * c[u]
            z_f = z0_f + d_f
            correction = (
                torch.where(z_f > 0, z_f, slope * z_f)
                - torch.where(z0_f > 0, z0_f, slope * z0_f)
                - torch.where(z0_f > 0, d_f, slope * d_f)
            )
            if len(p) > 0.1 * flipped.numel():  # many flips: the dense product is as cheap
                dense = torch.zeros_like(z0)
                dense[p, u] = correction
                h = h + dense @ weight2.T
            else:  # nonzero() lists the flips row by row: the compressed-row layout as it stands
                starts = torch.zeros(len(rows) + 1, dtype=torch.long, device=rows.device)
                starts[1:] = torch.cumsum(torch.bincount(p, minlength=len(rows)), 0)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta state"
                    sparse = torch.sparse_csr_tensor(starts, u, correction, tuple(z0.shape))
                    h = h + sparse @ weight2.T
        return h

    def _slope_products(self, column: int, rows: torch.Tensor, c: torch.Tensor, weight2: torch.Tensor) -> torch.Tensor:
        """``U = (c * s0) @ W2.T`` for ``rows``, ``(P, F2)``, each row computed once per column and kept."""
        base = self._base
        if self._slopes is None or self._slopes[0] != column:
            num_rows, width = base.join2_output.shape
            self._slopes = (
                column,
                torch.empty(num_rows, width, dtype=base.join2_output.dtype, device=rows.device),
                torch.zeros(num_rows, dtype=torch.bool, device=rows.device),
            )
        _, products, done = self._slopes
        needed = torch.unique(rows[~done[rows]])
        if len(needed):
            z0 = base.join_output[needed]
            products[needed] = (torch.where(z0 > 0, 1.0, self.plan.slope) * c) @ weight2.T
            done[needed] = True
        return products[rows]


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _bits(values: torch.Tensor) -> torch.Tensor:
    """The bit patterns of floating-point values as int64: equal patterns, equal values (NaN aside)."""
    int_type = {8: torch.int64, 4: torch.int32, 2: torch.int16}[values.element_size()]
    return values.contiguous().view(int_type).to(torch.int64)


__all__ = ["MEMO_SLOTS", "Index", "SliceEvaluator", "check_int"]
