"""Flat stretches ("plateaus") of likelihood slices, and how often they occur per weight tensor.

A ReLU unit that is off for every example ignores the weights feeding it, so along such a weight the likelihood is
exactly constant from some point on (the One Simple Trick paper's Proposition 1): an unbounded plateau, typically
reaching the window cap of :func:`~pyro_bnn.diagnostics.slices.likelihood_slice` on that side. The paper reports
such flat regions near the mode for 10-30 % of ReLU weights and none for Leaky ReLU.

* :func:`find_plateau` tests one :class:`~pyro_bnn.diagnostics.slices.LikelihoodSlice`.
* :func:`plateau_fractions` samples entries of each weight tensor and reports the fraction with a plateau.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.diagnostics.slices import LikelihoodSlice, SliceOptions, likelihood_slices
from pyro_bnn.diagnostics.slices import slice_options as slice_options_with

PLATEAU_NUM_POINTS = 101
"""Grid points per slice in :func:`plateau_fractions` unless given: 4x the paper's 25 (see :func:`find_plateau`)."""


@dataclass(frozen=True)
class Plateau:
    """A run of grid points over which the likelihood is flat (:func:`find_plateau`).

    Attributes:
        start_index, end_index: First and last grid point of the run (``end_index > start_index``).
        start, end: Their values of the varied scalar.
        fraction: ``(end - start) / window width``.
        level: The normalised likelihood ``exp(ll - max ll)`` on the run (its largest value there).
        open_lower, open_upper: The run reaches that edge of the window and the window search was capped on that
            side, i.e. the likelihood never fell there: the plateau most likely continues beyond the window (the
            unbounded ReLU plateau), and ``start`` / ``end`` only bound it. A side the search ended at a NaN or
            +inf log-likelihood (``LikelihoodSlice.nonfinite``) counts as open too: the likelihood was not seen to
            fall there either.
    """

    start_index: int
    end_index: int
    start: float
    end: float
    fraction: float
    level: float
    open_lower: bool
    open_upper: bool

    @property
    def width(self) -> float:
        """``end - start``."""
        return self.end - self.start

    @property
    def open(self) -> bool:
        """The run reaches a capped window edge on either side."""
        return self.open_lower or self.open_upper


def find_plateau(
    slice_: LikelihoodSlice, *, min_fraction: float = 0.05, floor: float = 0.01, flatness: float = 1e-6
) -> Plateau | None:
    """The widest flat run of a slice's grid, or None.

    The rule, with ``ll_k`` the slice's log-likelihood at grid point ``k`` and ``p_k = exp(ll_k - max ll)``:

    * neighbours ``k, k+1`` form a *flat step* when ``p_k >= floor``, ``p_{k+1} >= floor`` and
      ``expm1(|ll_{k+1} - ll_k|) < flatness``. ``expm1(|Δll|)`` is the relative change of the likelihood between
      them, ``|L_{k+1} - L_k| / min(L_k, L_{k+1})`` (so the test is symmetric in the two points);
    * a *run* is a maximal sequence of consecutive flat steps, grid points ``a..b``; it is a plateau when
      ``grid[b] - grid[a] >= min_fraction * (grid[-1] - grid[0])``;
    * the widest plateau is returned (the first of equally wide ones), with ``open_lower`` / ``open_upper`` set
      where it reaches a window edge whose search was capped (the likelihood never fell there).

    NaN log-likelihoods are never flat. A slice flat everywhere (a weight that no example uses) is one plateau
    over the whole window.

    Resolution: a run spans whole grid steps, so with G points a plateau must cover at least
    ``ceil(min_fraction * (G - 1))`` steps (2 for the paper's 25 points, 5 for 101) and is located to one step;
    a flat stretch narrower than that plus up to a step of misalignment, i.e. up to
    ``(ceil(min_fraction * (G - 1)) + 2) / (G - 1)`` of the window, can be missed. That is why
    :func:`plateau_fractions` uses :data:`PLATEAU_NUM_POINTS` (101) points rather than 25: the 5 % of the default
    ``min_fraction`` then means 5-7 % rather than 8-17 %.

    Exactness: ``flatness`` (1e-6) is far below float32 rounding of a summed log-likelihood over thousands of
    examples, so the test needs exactly equal values on a flat stretch; the incremental evaluation of
    :func:`~pyro_bnn.diagnostics.slices.likelihood_slice` gives that. Raise ``flatness`` for slices computed
    another way.

    Args:
        slice_: The slice.
        min_fraction: Least width of a plateau as a fraction of the window, in (0, 1].
        floor: Least normalised likelihood on a plateau, in [0, 1]: flat stretches far below the mode (in the
            slice's tails) do not count.
        flatness: Largest relative likelihood change between neighbours on a plateau, > 0.

    Raises:
        ValueError: an option out of range, or ``slice_`` not a :class:`LikelihoodSlice`.
    """
    _check_plateau_options(min_fraction, floor, flatness)
    if not isinstance(slice_, LikelihoodSlice):
        raise ValueError(
            f"find_plateau takes a LikelihoodSlice (likelihood_slice's result), got {type(slice_).__name__}"
        )
    ll = slice_.log_likelihood.detach().to(torch.float64).cpu().numpy()
    grid = slice_.grid.detach().to(torch.float64).cpu().numpy()
    if not np.isfinite(ll).any():
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(ll - np.nanmax(ll))
        flat = (p[:-1] >= floor) & (p[1:] >= floor) & (np.expm1(np.abs(np.diff(ll))) < flatness)
    window = grid[-1] - grid[0]
    # A run of exactly the least width is a plateau: the grid is float32 rounded (likelihood_slice), so its width may
    # fall a hair short of min_fraction * window; a thousandth of a step absorbs that, far from the next step down.
    least = min_fraction * window - 1e-3 * window / max(1, len(grid) - 1)
    best: tuple[int, int] | None = None
    k = 0
    while k < len(flat):
        if not flat[k]:
            k += 1
            continue
        first = k
        while k < len(flat) and flat[k]:
            k += 1
        a, b = first, k  # points a..b
        width = grid[b] - grid[a]
        if width >= least and (best is None or width > grid[best[1]] - grid[best[0]]):
            best = (a, b)
    if best is None:
        return None
    a, b = best
    last = len(grid) - 1
    return Plateau(
        start_index=a,
        end_index=b,
        start=float(grid[a]),
        end=float(grid[b]),
        fraction=float((grid[b] - grid[a]) / window),
        level=float(p[a : b + 1].max()),
        open_lower=a == 0 and (slice_.capped[0] or slice_.nonfinite[0]),
        open_upper=b == last and (slice_.capped[1] or slice_.nonfinite[1]),
    )


def _check_plateau_options(min_fraction: float, floor: float, flatness: float) -> None:
    checks = (
        ("min_fraction", min_fraction, lambda v: 0 < v <= 1, "a number in (0, 1]"),
        ("floor", floor, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
        ("flatness", flatness, lambda v: v > 0, "a finite number > 0"),
    )
    for name, value, ok, expected in checks:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
            raise ValueError(f"{name} must be {expected}, got {value!r}")


@dataclass(frozen=True)
class PlateauSummary:
    """Plateaus among sampled entries of one weight tensor (:func:`plateau_fractions`).

    Attributes:
        name: The tensor (``"fc1.weight"``).
        shape: Its shape.
        indices: The sampled entries, K of them.
        plateaus: Per entry, its :class:`Plateau` or None.
        slices: Per entry, its :class:`~pyro_bnn.diagnostics.slices.LikelihoodSlice` (small: two (G,) tensors),
            for plotting a few (:meth:`examples`).
    """

    name: str
    shape: tuple[int, ...]
    indices: list[tuple[int, ...]]
    plateaus: list[Plateau | None]
    slices: list[LikelihoodSlice]

    @property
    def num_sampled(self) -> int:
        return len(self.indices)

    @property
    def flagged(self) -> torch.Tensor:
        """``(K,)`` bool: the entry's slice has a plateau."""
        return torch.tensor([plateau is not None for plateau in self.plateaus], dtype=torch.bool)

    @property
    def num_flagged(self) -> int:
        return int(self.flagged.sum())

    @property
    def fraction(self) -> float:
        """Fraction of sampled entries with a plateau (NaN when none were sampled)."""
        return self.num_flagged / self.num_sampled if self.num_sampled else math.nan

    @property
    def num_open(self) -> int:
        """Entries whose plateau reaches a capped window edge (the unbounded ReLU kind)."""
        return sum(plateau is not None and plateau.open for plateau in self.plateaus)

    @property
    def tv_distances(self) -> torch.Tensor:
        """``(K,)``: each slice's total-variation distance to its fitted Gaussian."""
        return torch.tensor([s.tv_distance for s in self.slices], dtype=torch.float64)

    def examples(self, count: int = 4, *, flagged: bool = True) -> list[tuple[LikelihoodSlice, Plateau | None]]:
        """Up to ``count`` (slice, plateau) pairs, in sampling order, of entries with (or without) a plateau."""
        pairs = [(s, p) for s, p in zip(self.slices, self.plateaus, strict=True) if (p is not None) == flagged]
        return pairs[:count]


def plateau_fractions(
    net: nn.Module,
    likelihood,
    x: torch.Tensor,
    y: torch.Tensor,
    values: Mapping[str, torch.Tensor],
    *,
    per_layer: int = 200,
    seed: int = 0,
    layers: Sequence[str] | None = None,
    min_fraction: float = 0.05,
    floor: float = 0.01,
    flatness: float = 1e-6,
    slice_options: SliceOptions | None = None,
    **deprecated_slice_options,
) -> dict[str, PlateauSummary]:
    """For each weight tensor, the fraction of sampled entries whose likelihood slice has a plateau.

    Args:
        net, likelihood, x, y, values: As for :func:`~pyro_bnn.diagnostics.slices.likelihood_slice`.
        per_layer: Entries sampled per tensor, without replacement (all of them where the tensor is smaller).
        seed: Seeds the sampling; each tensor's entries depend only on ``seed`` and the tensor's name, so adding or
            removing a layer leaves the others' samples unchanged.
        layers: Tensor names to sample; default every tensor of ``values`` named ``*.weight`` (or ``weight``) with
            two or more dimensions that is a parameter or buffer of ``net`` (Linear and convolution weights, not
            biases or normalisation scales), in the network's order.
        min_fraction, floor, flatness: The plateau rule (:func:`find_plateau`).
        slice_options: The slices' :class:`~pyro_bnn.diagnostics.slices.SliceOptions`; None: the defaults but
            ``num_points`` :data:`PLATEAU_NUM_POINTS` (101).
        **deprecated_slice_options: The same options as loose keywords (``num_points=25``), as before
            :class:`~pyro_bnn.diagnostics.slices.SliceOptions`: still taken (over ``slice_options``), with a
            ``DeprecationWarning``.

    Returns:
        ``{tensor name: PlateauSummary}`` in layer order.

    Raises:
        ValueError: ``per_layer`` < 1, an unknown tensor name in ``layers``, or what
            :func:`~pyro_bnn.diagnostics.slices.likelihood_slice` or :func:`find_plateau` raise.
    """
    _check_plateau_options(min_fraction, floor, flatness)
    options = slice_options_with(
        slice_options,
        deprecated_slice_options,
        "plateau_fractions",
        default=SliceOptions(num_points=PLATEAU_NUM_POINTS),
        parameter="slice_options",
    )
    per_layer = positive_int(per_layer, "per_layer")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    own = _tensor_names(net)
    if layers is None:
        layers = [
            name for name in own if name in values and name.rsplit(".", 1)[-1] == "weight" and values[name].dim() >= 2
        ]
    else:
        if isinstance(layers, str):  # it iterated the characters: "unknown parameter name '0'"
            raise ValueError(f"layers must be a list of tensor names, got the string {layers!r}; pass [{layers!r}]")
        layers = list(layers)
        for name in layers:
            if name not in own:
                raise ValueError(f"unknown parameter name {name!r} in layers; it is not a tensor of the network")
    summaries = {}
    for name in layers:
        tensor = values[name] if name in values else own[name]
        generator = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
        flat = torch.randperm(tensor.numel(), generator=generator)[:per_layer].tolist()
        indices = [tuple(int(i) for i in np.unravel_index(k, tuple(tensor.shape))) for k in flat]
        slices = likelihood_slices(net, likelihood, x, y, values, name, indices, options=options)
        plateaus = [find_plateau(s, min_fraction=min_fraction, floor=floor, flatness=flatness) for s in slices]
        summaries[name] = PlateauSummary(name, tuple(tensor.shape), indices, plateaus, slices)
    return summaries


def _tensor_names(net: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``net`` by full name, in module order."""
    names: dict[str, torch.Tensor] = {}
    for module_name, module in net.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for attr, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            names.setdefault(prefix + attr, tensor)
    return names


__all__ = ["PLATEAU_NUM_POINTS", "Plateau", "PlateauSummary", "find_plateau", "plateau_fractions"]
