"""The verdict rules of ``bayes-by-backprop`` as functions, and the per-seed values they read: the finished runs
by cell and their test errors, the 95 % interval of a gap, one comparison's verdict (:func:`_verdict`) after its
comparability check (:func:`cell_check`, :func:`_judged`). The rules in words are the docstring of
:mod:`pyro_bnn.reproduce.papers.bayes_by_backprop.analysis`, which the report cites.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence

from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.bayes_by_backprop.plan import (
    COMPARABLE,
    NO_EFFECT_WITHIN,
    PRIOR_ERROR_BAND,
    PUBLISHED,
    PUBLISHED_ACCURACY,
)
from pyro_bnn.reproduce.planned import RunRecord, Status, Verdict, bound_text
from pyro_bnn.reproduce.report import compare, finite_seeds, format_mean_sd


def _cell(record: RunRecord) -> tuple[str, str, str]:
    return record.spec.tag("prior"), record.spec.tag("weighting"), record.spec.tag("normalization")


def _done(records: list[RunRecord]) -> dict[tuple[str, str, str], list[RunRecord]]:
    cells: dict[tuple[str, str, str], list[RunRecord]] = defaultdict(list)
    for record in records:
        if record.status is Status.DONE:
            cells[_cell(record)].append(record)
    for runs in cells.values():
        runs.sort(key=lambda r: r.config.seed)
    return cells


def _errors(runs: list[RunRecord], key: str = "accuracy") -> list[float]:
    return [1.0 - r.metrics[key] for r in runs if r.metrics.get(key) is not None]


def _best_epoch(record: RunRecord) -> int | None:
    accuracies = [(e.get("val_accuracy"), e["epoch"]) for e in record.history if e.get("val_accuracy") is not None]
    return max(accuracies, key=lambda pair: (pair[0], -pair[1]))[1] if accuracies else None


def _pct(values: list[float]) -> str:
    return format_mean_sd([100 * v for v in values], digits=2)


def _interval(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> float:
    """The farther end from zero of the ``1 - alpha`` interval of ``mean(a) - mean(b)`` (Welch, as
    :func:`~pyro_bnn.reproduce.report.compare`): ``|gap| + t * se``; NaN with fewer than 2 values in a group."""
    return compare(a, b, alpha).farther_end


def _verdict(a: list[float], b: list[float], a_name: str, b_name: str) -> tuple[Verdict, str, float | None]:
    """Is ``a`` (test errors) lower than ``b``? The verdict, the numbers, and for *no effect* the interval's
    half-width (see the module docstring; call it on comparable cells only). A seed without a finite error is
    left out and named (:func:`~pyro_bnn.reproduce.report.finite_seeds`)."""
    (a, b), left_out = finite_seeds({a_name: a, b_name: b}, "test error")
    result = compare(a, b)
    se = "n/a" if math.isnan(result.standard_error) else f"{100 * result.standard_error:.2f}"
    numbers = (
        f"test error {a_name} {_pct(a)} % against {b_name} {_pct(b)} % (gap {100 * result.gap:+.2f} points, se {se})"
    ) + (f"; {left_out}" if left_out else "")
    if result.separated:
        return (Verdict.HOLDS if result.gap < 0 else Verdict.DOES_NOT_HOLD), numbers, None
    if min(len(a), len(b)) < 2:
        return Verdict.INCONCLUSIVE, numbers + ": fewer than 2 seeds", None
    within = _interval(a, b)
    if within <= NO_EFFECT_WITHIN:
        return (
            Verdict.NO_EFFECT,
            numbers + f": the 95 % interval of the gap lies within ±{bound_text(100 * within, decimals=2)} points",
            within,
        )
    return (
        Verdict.INCONCLUSIVE,
        numbers + f": the seed spread covers the gap (95 % interval ±{bound_text(100 * within, decimals=2)} points)",
        None,
    )


def cell_check(runs: Sequence[RunRecord], cell: tuple[str, str, str]) -> CellCheck:
    """The comparability of the runs of ``cell`` ``(prior, weighting, inputs)`` under
    :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.COMPARABLE`, against the cell's published accuracy if any."""
    return COMPARABLE.check(runs, PUBLISHED_ACCURACY.get(cell))


def prior_check(runs: Sequence[RunRecord], cell: tuple[str, str, str]) -> CellCheck:
    """The comparability of one arm of the prior comparison: its runs converged (:data:`COMPARABLE`) and their mean
    test error lies in :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.plan.PRIOR_ERROR_BAND`, the span of both
    priors' published errors, so that neither paper's ordering of the priors is ruled out by the gate itself."""
    check = COMPARABLE.check(runs, None)
    # the finite ones: a NaN accuracy already fails COMPARABLE's check, and would print "test error nan %" here
    accuracies = [a for r in runs if (a := r.metrics.get("accuracy")) is not None and math.isfinite(a)]
    if not accuracies:
        return check
    error, (low, high) = 1 - statistics.fmean(accuracies), PRIOR_ERROR_BAND
    if low - 1e-12 <= error <= high + 1e-12:
        return check
    outside = (
        f"test error {100 * error:.2f} % is outside {100 * low:.2f}-{100 * high:.2f} %, the published errors of both "
        f"priors (Singh: Gaussian {100 * PUBLISHED['gaussian_error']:.2f} %, mixture "
        f"{100 * PUBLISHED['pruning'][0.0][0]:.2f} %) ± {100 * COMPARABLE.accuracy_tolerance:g} points"
    )
    return CellCheck(False, "; ".join(r for r in (check.reason, outside) if r), check.summary)


def _judged(
    arms: Sequence[tuple[str, tuple[str, str, str], list[RunRecord]]],
    a: list[float],
    b: list[float],
    check_cell: Callable[[Sequence[RunRecord], tuple[str, str, str]], CellCheck] | None = None,
) -> tuple[Verdict, str, float | None, bool]:
    """The verdict of one comparison of ``a`` (test errors of the first arm) against ``b`` (:func:`_verdict`), its
    words, its interval, and whether it counts as comparable with the paper's (both arms ran and pass
    ``check_cell``, by default :func:`cell_check`; the prior comparison passes :func:`prior_check`).

    An arm without a run done makes the verdict *inconclusive*, so an unfinished grid never reads *holds*; its words
    name that arm, the other's reason where it is not comparable, and the numbers of the arm that ran. Both arms ran
    but one is not comparable: *not comparable at this scale*, with the reasons and the numbers."""
    check_cell = check_cell or cell_check
    reasons = []
    for name, cell, runs in arms:
        if not runs:
            reasons.append(f"{name}: no run done yet")
        elif not (check := check_cell(runs, cell)).comparable:
            reasons.append(f"{name}: {check.reason}")
    if not all(runs for _, _, runs in arms):
        ran = [f"{name} {_pct(errors)} %" for (name, _, runs), errors in zip(arms, (a, b), strict=True) if runs]
        words = "; ".join(reasons) + (f"; test error {', '.join(ran)}" if ran else "")
        return Verdict.INCONCLUSIVE, words, None, False
    verdict, numbers, within = _verdict(a, b, arms[0][0], arms[1][0])
    if reasons:
        return Verdict.NOT_COMPARABLE, f"{'; '.join(reasons)}; {numbers}", None, False
    return verdict, numbers, within, True


def _comparable_count(comparable: Sequence[bool], noun: str = "cells") -> str:
    """``"1 of 2 priors comparable with the paper's"`` from one flag per cell."""
    return f"{sum(comparable)} of {len(comparable)} {noun} comparable with the paper's"


def _training_cells(runs: Sequence[RunRecord], cell: tuple[str, str, str]) -> list[str]:
    """The table cells ``training`` and ``comparable`` of ``cell``'s runs."""
    check = cell_check(runs, cell)
    return [check.summary, "yes" if check.comparable else f"no: {check.reason}"]
