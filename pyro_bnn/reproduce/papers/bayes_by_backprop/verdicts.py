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
from pyro_bnn.reproduce.report import compare, finite_seeds, format_mean_sd, planned, runs_missing


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


def _planned(records: Sequence[RunRecord] | None, cell: tuple[str, str, str], done: int) -> int:
    """The runs planned for ``cell`` ``(prior, weighting, inputs)``: the grid's ``records`` of it, of any status
    (:func:`~pyro_bnn.reproduce.report.planned`, a grid's records being its plan); without records (hand-made
    cells), the ``done`` runs the caller has."""
    if records is None:
        return done
    prior, weighting, normalization = cell
    return len(planned(records, prior=prior, weighting=weighting, normalization=normalization))


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
    records: Sequence[RunRecord] | None = None,
) -> tuple[Verdict, str, float | None, bool, bool]:
    """The verdict of one comparison of ``a`` (test errors of the first arm) against ``b`` (:func:`_verdict`), its
    words, its interval, whether it counts as comparable with the paper's (both arms ran all their planned runs and
    pass ``check_cell``, by default :func:`cell_check`; the prior comparison passes :func:`prior_check`), and
    whether it has runs missing (the headline tallies such cells apart).

    ``records``: the grid's records of any status, which tell each arm its planned runs (:func:`_planned`); None
    (hand-made cells): an arm's runs are all it planned, so only an arm without any is short. A comparison short of
    any planned run is *inconclusive*, ``runs missing (k of n planned)``, whatever the seeds it has show, so an
    unfinished grid never reads *holds*; its words name the arms short, the other's reason where it is not
    comparable, and the numbers of the arms that ran, unjudged. Every run done but an arm not comparable: *not
    comparable at this scale*, with the reasons and the numbers."""
    check_cell = check_cell or cell_check
    done = [len(runs) for _, _, runs in arms]
    plan = [_planned(records, cell, len(runs)) for _, cell, runs in arms]
    if records is None:  # nothing planned to count: only an arm without runs is short
        absent = "" if all(done) else "runs missing"
    else:
        absent = runs_missing(*zip(done, plan, strict=True))
    reasons = []
    for (name, cell, runs), total in zip(arms, plan, strict=True):
        if not runs:
            reasons.append(f"{name}: no run done yet")
        elif len(runs) < total:
            reasons.append(f"{name}: {len(runs)} of {total} runs done")
        elif not (check := check_cell(runs, cell)).comparable:
            reasons.append(f"{name}: {check.reason}")
    if absent:
        ran = [f"{name} {_pct(errors)} %" for (name, _, runs), errors in zip(arms, (a, b), strict=True) if runs]
        words = "; ".join([absent, *reasons]) + (f"; unjudged, test error {', '.join(ran)}" if ran else "")
        return Verdict.INCONCLUSIVE, words, None, False, True
    verdict, numbers, within = _verdict(a, b, arms[0][0], arms[1][0])
    if reasons:
        return Verdict.NOT_COMPARABLE, f"{'; '.join(reasons)}; {numbers}", None, False, False
    return verdict, numbers, within, True, False


def _comparable_count(comparable: Sequence[bool], noun: str = "cells", missing: int = 0) -> str:
    """``"1 of 2 priors comparable with the paper's"`` from one flag per cell, ``, 1 with runs missing`` added for
    the ``missing`` of them with runs missing (not comparable: they are not judged; inconclusive, so the headline
    never reads *holds*)."""
    text = f"{sum(comparable)} of {len(comparable)} {noun} comparable with the paper's"
    return text + (f", {missing} with runs missing" if missing else "")


def _training_cells(runs: Sequence[RunRecord], cell: tuple[str, str, str]) -> list[str]:
    """The table cells ``training`` and ``comparable`` of ``cell``'s runs."""
    check = cell_check(runs, cell)
    return [check.summary, "yes" if check.comparable else f"no: {check.reason}"]
