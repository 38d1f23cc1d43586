"""The verdict rules of ``leaky-calibration`` as functions, and the per-seed values they read: one Table 1 cell
(:func:`table_1_cell`, after its comparability check :func:`table_1_check`) and one slope-sweep curve. The rules
in words are the docstring of :mod:`pyro_bnn.reproduce.papers.leaky_calibration.analysis`, which the report cites.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.leaky_calibration.plan import COMPARABLE
from pyro_bnn.reproduce.planned import RunRecord, Status, Verdict, bound_text
from pyro_bnn.reproduce.report import CONFORMAL_COLUMNS, compare, finite_seeds, mean_sd

ACCURACY_TOLERANCE = 0.02
"""How much lower Leaky's accuracy may be for "about equal accuracy" (the paper's Table 1 differs by up to 0.01)."""


NEAR_ZERO = 0.2
"""Slopes within this distance of 0 count as "near slope 0": *holds* needs slope 0 separated above the slopes
farther than this (each, or pooled); those near it count by their means only (slope 0's must be the curve's highest)
and as contrasts that can refute the claim, since a ReLU-like slope need not differ from ReLU by a seed-separated
gap."""

ECE_SAMPLED = "ece_sampled_10"
ECE_SAMPLED_AUTHORS = "ece_sampled_10_authors"
"""The sampled-label ECE binned by the authors' rule (``sampled_label_ece:10,authors``, recorded by
``full-3fc-authors``); :data:`ECE_SAMPLED` is binned the library's way."""
COVERAGE, SET_SIZE = CONFORMAL_COLUMNS


def _slope(activation: str) -> float | None:
    if activation == "relu":
        return 0.0
    if activation.startswith("leaky:"):
        return float(activation.split(":", 1)[1])
    return None


def _bnn_runs(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in records if r.spec.tag("part") == "bnn" and r.status is Status.DONE]


def _cells(runs: list[RunRecord], key: Callable[[RunRecord], tuple]) -> dict[tuple, list[RunRecord]]:
    cells: dict[tuple, list[RunRecord]] = defaultdict(list)
    for run in runs:
        cells[key(run)].append(run)
    return cells


def _values(runs: list[RunRecord], metric: str) -> list[float]:
    return [r.metrics[metric] for r in sorted(runs, key=lambda r: r.config.seed) if metric in r.metrics]


def judged_ece(runs: list[RunRecord]) -> str:
    """The sampled-label ECE Table 1 is judged on: the authors' binning where every run of ``runs`` recorded it
    (:data:`ECE_SAMPLED_AUTHORS`), else the library's (:data:`ECE_SAMPLED`, every grid measured before it)."""
    if runs and all(ECE_SAMPLED_AUTHORS in r.metrics for r in runs):
        return ECE_SAMPLED_AUTHORS
    return ECE_SAMPLED


def _count(verdicts: list[Verdict], missing: int = 0) -> str:
    """The tally of ``verdicts`` by kind (``0 holds, 1 does not hold, ...``), ``missing`` of its *inconclusive* ones
    counted apart (``, 2 with runs missing``): a cell missing planned runs is *inconclusive* only so that
    :func:`~pyro_bnn.reproduce.report.overall_verdict` never reads an unfinished grid as *holds*; the tally says
    what the table shows, where such a cell reads *runs missing*."""
    counts = {kind: sum(v is kind for v in verdicts) for kind in Verdict}
    counts[Verdict.INCONCLUSIVE] -= missing
    text = ", ".join(f"{count} {kind.value}" for kind, count in counts.items())
    return text + (f", {missing} with runs missing" if missing else "")


def table_1_cell(
    leaky: list[RunRecord], relu: list[RunRecord], paper_gap: float | None = None, ece_key: str = ECE_SAMPLED
) -> tuple[Verdict, str, float | None]:
    """The verdict of one comparable Table 1 cell, its numbers, and for *no effect* the half-width x of the
    interval ``±x`` the ECE gap lies in (the rule: the docstring of :mod:`.analysis`).

    Args:
        leaky, relu: The cell's runs of each activation.
        paper_gap: The paper's ECE gap Leaky - ReLU in this cell; None: *no effect* is never said.
        ece_key: The ECE compared (:func:`judged_ece` of the grid's runs).
    """
    # a run without a finite ECE is no seed of the comparison: count and name it (compare leaves it out)
    by_seed = {name: [r.metrics.get(ece_key) for r in sorted(runs, key=lambda r: r.config.seed)]
               for name, runs in (("Leaky", leaky), ("ReLU", relu))}  # fmt: skip
    (leaky_ece, relu_ece), left_out = finite_seeds(by_seed, "ECE")
    ece = compare(leaky_ece, relu_ece)
    acc = compare(_values(leaky, "accuracy"), _values(relu, "accuracy"))
    se = "n/a" if math.isnan(ece.standard_error) else f"{ece.standard_error:.3f}"
    numbers = f"ECE gap Leaky - ReLU {ece.gap:+.3f} (se {se}), accuracy gap {acc.gap:+.3f}"
    numbers += f"; {left_out}" if left_out else ""
    if ece.separated and ece.gap > 0:
        return Verdict.DOES_NOT_HOLD, numbers + ": ReLU is better calibrated", None
    if ece.separated and ece.gap < 0:
        if acc.gap < -ACCURACY_TOLERANCE and acc.separated:
            return Verdict.DOES_NOT_HOLD, numbers + ": Leaky is better calibrated but less accurate", None
        if acc.gap >= -ACCURACY_TOLERANCE:
            return Verdict.HOLDS, numbers, None
        return Verdict.INCONCLUSIVE, numbers + ": Leaky is better calibrated, but may be less accurate", None
    if min(len(leaky_ece), len(relu_ece)) < 2:
        return Verdict.INCONCLUSIVE, numbers + ": fewer than 2 seeds", None
    interval = f"95 % interval [{ece.gap - ece.half_width:+.3f}, {ece.gap + ece.half_width:+.3f}]"
    if paper_gap is not None and ece.farther_end < abs(paper_gap):
        return (
            Verdict.NO_EFFECT,
            numbers + f": the {interval} lies within ±{bound_text(ece.farther_end)} and excludes the paper's gap "
            f"{paper_gap:+.3f}",
            ece.farther_end,
        )
    return Verdict.INCONCLUSIVE, numbers + f": the seed spread covers the gap ({interval})", None


def table_1_check(
    leaky: list[RunRecord], relu: list[RunRecord], published: tuple[float, float, float, float]
) -> tuple[CellCheck, CellCheck]:
    """The comparability of a Table 1 cell's Leaky and ReLU runs against the paper's accuracies."""
    return COMPARABLE.check(leaky, published[0]), COMPARABLE.check(relu, published[1])


def table_1_reason(checks: tuple[CellCheck, CellCheck]) -> str:
    """Why a Table 1 cell is not comparable, each activation's reason named (empty when both are comparable)."""
    return "; ".join(f"{name}: {c.reason}" for name, c in zip(("Leaky", "ReLU"), checks, strict=True) if c.reason)


def _sweep_curve(ece: dict[float, list[float]]) -> tuple[Verdict, str]:
    """The verdict of one sweep curve from ``{slope: per-seed ECE}`` (the rule: the docstring of
    :mod:`.analysis`). The paper's claim is that the highest ECE of the curve is at slope 0, so every other slope
    counts, the ones near 0 included: *holds* needs slope 0's mean to be the curve's highest as well as separated
    above the slopes farther than :data:`NEAR_ZERO`."""
    zero = ece.get(0.0, [])
    others = {s: v for s, v in ece.items() if abs(s) > 1e-9 and v}
    far = {s: v for s, v in others.items() if abs(s) > NEAR_ZERO + 1e-9}
    if not zero or not far:
        return Verdict.INCONCLUSIVE, "the sweep lacks slope 0 or slopes away from it"
    alpha = 0.05 / len(others)
    contrasts = {s: compare(zero, v, alpha=alpha) for s, v in others.items()}
    pooled = compare(zero, [value for values in far.values() for value in values])
    top = max(others, key=lambda s: mean_sd(others[s])[0])
    highest = mean_sd(zero)[0] >= mean_sd(others[top])[0]
    numbers = (
        f"ECE at slope 0: {mean_sd(zero)[0]:.3f}; highest elsewhere: {mean_sd(others[top])[0]:.3f} at {top:g}; "
        f"slope 0 minus the far slopes pooled: {pooled.gap:+.3f}"
    )
    above = [s for s, c in contrasts.items() if c.separated and c.gap < 0]
    if above:
        return Verdict.DOES_NOT_HOLD, numbers + f"; separated above slope 0 at {', '.join(f'{s:g}' for s in above)}"
    if pooled.separated and pooled.gap < 0:
        return Verdict.DOES_NOT_HOLD, numbers + "; the far slopes pooled are separated above slope 0"
    if not highest:
        return Verdict.INCONCLUSIVE, numbers + f"; slope 0 does not have the highest mean (slope {top:g} does)"
    if all(contrasts[s].separated and contrasts[s].gap > 0 for s in far):
        return Verdict.HOLDS, numbers + (
            f"; slope 0 has the highest mean and is separated above all {len(far)} slopes farther than {NEAR_ZERO:g}"
        )
    if pooled.separated and pooled.gap > 0:
        return Verdict.HOLDS, numbers + ": slope 0 has the highest mean and is separated above the far slopes pooled"
    below = sum(c.separated and c.gap > 0 for c in contrasts.values())
    return Verdict.INCONCLUSIVE, numbers + f"; slope 0 separated above {below} of {len(others)} slopes"
