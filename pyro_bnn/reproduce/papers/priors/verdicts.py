"""The verdict rules of ``priors`` as functions: the t intervals of a gain, when one reads *no effect within ±x*,
each cell's comparability check, the verdict on a panel's gain (:func:`judge_gain`) and the two headlines over the
data sets. The rules in words are the docstring of :mod:`pyro_bnn.reproduce.papers.priors.analysis`, which the
report cites.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.priors.batched import BATCHED_CHECK as BATCHED_CHECK
from pyro_bnn.reproduce.papers.priors.batched import BATCHED_OFFSET as BATCHED_OFFSET
from pyro_bnn.reproduce.papers.priors.batched import batched_offset_text as batched_offset_text
from pyro_bnn.reproduce.papers.priors.batched import crossing_note as crossing_note
from pyro_bnn.reproduce.papers.priors.batched import gain_paths as gain_paths
from pyro_bnn.reproduce.papers.priors.batched import training_path as training_path
from pyro_bnn.reproduce.papers.priors.cells import Cells, absent_text, cell_name, gains
from pyro_bnn.reproduce.papers.priors.plan import COMPARABLE, HYPERPRIORS, PUBLISHED
from pyro_bnn.reproduce.planned import Headline, Status, Verdict
from pyro_bnn.reproduce.report import compare, finite_seeds, mean_sd, overall_verdict, overall_width, runs_missing

MIN_GAIN = 0.005
"""A test-accuracy gain below half a point is no gain worth the name."""

TIGHT = 0.02
"""The widest interval, as ±x around zero, that reads *no effect within ±x* (two points of test accuracy). The
paper's accuracies are single measurements on 300 validation points, with a binomial standard error of 0.021
(moons) and 0.025 (circles); the difference of two such numbers has one of about 0.03, so a gain the paper's own
numbers could have shown is at least twice that, 0.06. An interval within ±0.02 rules out every such gain with room
to spare; wider intervals that cover zero say only that the seeds' spread covers the effect (*inconclusive*)."""


class PanelAbsence(NamedTuple):
    """Why a panel has no gain to judge (:func:`panel_absence`).

    Attributes:
        text: The reason in words (empty: the panel has a gain).
        counts: The uncountable records of its missing side(s), by status.
        uncounted_only: Whether the only reason is that a side has no counted runs (the records in ``counts``);
            False where counted runs share no seed to choose or compare on.
    """

    text: str = ""
    counts: Mapping[Status, int] = MappingProxyType({})
    uncounted_only: bool = True


@dataclass(frozen=True)
class PriorsHeadline(Headline):
    """A headline that may be *not judged*: ``unjudged`` (the label then) says what is missing, e.g. ``not judged:
    no counted runs of a tuned fixed scale (300 await `--retrain-stale`, ...)``. The verdict stays
    :attr:`Verdict.INCONCLUSIVE` for whatever counts verdicts; only the words differ."""

    unjudged: str = ""

    @property
    def label(self) -> str:
        return self.unjudged or super().label


def not_judged(what: str, panels: dict[str, PanelAbsence]) -> str:
    """The label of a headline none of whose panels has a comparison, from each panel's :class:`PanelAbsence` by
    name (``moons``, ``moons low``): where every panel only lacks counted runs, ``not judged: no counted runs of
    WHAT (N await `--retrain-stale`, ...)``; else each panel's own reason, named (``not judged: moons: no seed
    shared by ...; circles: no counted runs of ...``)."""
    if all(p.uncounted_only for p in panels.values()):
        missing = absent_text(sum((Counter(p.counts) for p in panels.values()), Counter()))
        return f"not judged: no counted runs of {what}" + (f" ({missing})" if missing else "")
    return "not judged: " + "; ".join(f"{name}: {p.text}" for name, p in panels.items() if p.text)


def headline_or_unjudged(
    claim: str, overall: Verdict, reason: str, widths: list[float | None], comparable: list[bool | None], unjudged: str
) -> PriorsHeadline:
    """The headline of ``claim``, labelled ``unjudged`` (from :func:`not_judged`) when none of its cells has counted
    runs (every entry of ``comparable`` None)."""
    none_counted = bool(comparable) and all(c is None for c in comparable)
    return PriorsHeadline(claim, overall, reason, overall_width(overall, widths), unjudged if none_counted else "")


def t_interval(values: list[float]) -> tuple[float, float]:
    """The 95 % t interval of the mean of ``values`` (NaN for fewer than 2)."""
    from scipy.stats import t

    mean, sd, n = mean_sd(values)
    if n < 2:
        return math.nan, math.nan
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def welch_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """The 95 % interval of ``mean(a) - mean(b)`` with Welch's degrees of freedom (the test of
    :func:`~pyro_bnn.reproduce.report.compare`; NaN for fewer than 2 values on a side)."""
    from scipy.stats import t

    (mean_a, sd_a, n_a), (mean_b, sd_b, n_b) = mean_sd(a), mean_sd(b)
    if n_a < 2 or n_b < 2:
        return math.nan, math.nan
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    if va + vb == 0:
        return mean_a - mean_b, mean_a - mean_b
    dof = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    half = float(t.ppf(0.975, dof)) * math.sqrt(va + vb)
    return mean_a - mean_b - half, mean_a - mean_b + half


def no_effect_width(low: float, high: float, tight: float = TIGHT) -> float | None:
    """The x of *no effect within ±x* for the interval ``[low, high]``: the larger of its ends in absolute value
    when it covers zero and lies within ±``tight``; else None. Unrounded: the report prints it rounded up
    (:func:`~pyro_bnn.reproduce.planned.no_effect_text`), never below the end."""
    if not (low <= 0 <= high):
        return None
    width = max(abs(low), abs(high))
    return width if width <= tight else None


def effect_text(mean: float, low: float, high: float) -> str:
    """``+0.004 ± 0.012 (95 % interval [-0.008, +0.016])``: an effect as mean ± the half-width of its interval
    (``+0.004 (no interval)`` where there is none: a single seed)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{mean:+.3f} (no interval)"
    return f"{mean:+.3f} ± {(high - low) / 2:.3f} (95 % interval [{low:+.3f}, {high:+.3f}])"


def verdict_text(verdict: Verdict, width: float | None = None) -> str:
    """A cell's verdict as the reasons print it (``no effect within ±0.016`` for :attr:`Verdict.NO_EFFECT`)."""
    return Headline("", verdict, "", interval=width).label


def cell_check(cells: Cells, dataset: str, noise: str, family: str, scale: str) -> CellCheck:
    """Whether one cell can be judged (the module docstring): its runs under the data set's rule
    :data:`~.priors.COMPARABLE`, against the paper's best accuracy for a hierarchical cell at the high noise (the
    paper's best was one) and for convergence alone elsewhere (the paper gives no other number)."""
    published = PUBLISHED[dataset][0] if noise == "high" and scale in HYPERPRIORS else None
    return COMPARABLE[dataset].check(cells.runs.get((dataset, noise, family, scale), []), published)


def joint_check(checks: dict[str, CellCheck]) -> CellCheck:
    """The checks of the cells one verdict compares (name -> check) as one: comparable when every one is."""
    reasons = [f"{name}: {check.reason}" for name, check in checks.items() if not check.comparable]
    summary = "; ".join(f"{name}: {check.summary}" for name, check in checks.items())
    return CellCheck(not reasons, "; ".join(reasons), summary)


def panel_check(cells: Cells, dataset: str, noise: str) -> CellCheck | None:
    """The joint check of a panel's best hierarchical and best tuned fixed cells (None without both)."""
    hyper, fixed = cells.best(dataset, noise, "hyper"), cells.best(dataset, noise, "fixed")
    if hyper is None or fixed is None:
        return None
    return joint_check({cell_name(*c): cell_check(cells, dataset, noise, *c) for c in (hyper, fixed)})


def judge_gain(
    values: list[float], check: CellCheck | None, absent: str = "", missing: str = ""
) -> tuple[Verdict, float | None, str]:
    """The verdict on one panel's per-seed gains ``values`` (the module docstring's first rule), the x of its *no
    effect within ±x* (or None), and the text a headline prints for it (``absent``: why a panel without gains has
    none, from :func:`panel_absence`; ``missing``: ``runs missing (k of n planned)`` where a cell of the gain is
    short of planned runs, which leaves it *inconclusive*, not judged on the seeds it has). A seed without a finite
    gain is left out and named."""
    (kept,), left_out = finite_seeds({"": values}, "gain")
    note = f" ({left_out})" if left_out else ""
    if check is None or not values:
        return (
            Verdict.INCONCLUSIVE,
            None,
            f"not judged: {absent or 'no counted runs of both a hierarchical and a tuned fixed cell'}",
        )
    if missing:
        return Verdict.INCONCLUSIVE, None, f"{Verdict.INCONCLUSIVE.value}, {missing}"
    if not check.comparable:
        return Verdict.NOT_COMPARABLE, None, f"{Verdict.NOT_COMPARABLE.value} ({check.reason})"
    if not kept:
        return Verdict.INCONCLUSIVE, None, f"no finite gain on any of {len(values)} seeds, {Verdict.INCONCLUSIVE.value}"
    if len(kept) < 2:
        return Verdict.INCONCLUSIVE, None, f"gain {kept[0]:+.3f} on 1 seed{note}, {Verdict.INCONCLUSIVE.value}"
    verdict, width = _gain_verdict(kept)
    low, high = t_interval(kept)
    text = f"gain {effect_text(statistics.fmean(kept), low, high)} over {len(kept)} seeds{note}"
    return verdict, width, f"{text}: {gain_verdict_text(verdict, width, kept)}"


def gain_verdict_text(verdict: Verdict, width: float | None, values: list[float]) -> str:
    """:func:`verdict_text` of a panel's gain, saying why a gain does not hold when its 95 % interval
    (:func:`t_interval` of the per-seed ``values``) lies at or above 0 but below :data:`MIN_GAIN`."""
    words = verdict_text(verdict, width)
    if verdict is Verdict.DOES_NOT_HOLD and t_interval(values)[0] >= 0:
        words += f" (a gain whose interval lies below {MIN_GAIN}, the smallest worth the name)"
    return words


def _gain_verdict(values: list[float]) -> tuple[Verdict, float | None]:
    """The verdict on per-seed gains ``values`` of comparable cells (the module docstring's rule) and the x of its
    *no effect within ±x* (None for any other verdict)."""
    test = compare(values, [0.0] * len(values))
    low, high = t_interval(values)
    if test.separated and test.gap < 0:
        return Verdict.DOES_NOT_HOLD, None
    if test.separated and test.gap >= MIN_GAIN:
        return Verdict.HOLDS, None
    width = no_effect_width(low, high)
    if width is not None:
        return Verdict.NO_EFFECT, width
    if high < MIN_GAIN:
        return Verdict.DOES_NOT_HOLD, None
    return Verdict.INCONCLUSIVE, None


def panel_absence(cells: Cells, dataset: str, noise: str) -> PanelAbsence:
    """Why a panel has no gain, e.g. ``no counted runs of a tuned fixed scale (75 await ...)`` or ``no seed shared
    by the candidates of a hierarchical prior``, each side's reason in turn; an empty one where it has a gain."""
    kinds = (("hyper", "a hierarchical prior"), ("fixed", "a tuned fixed scale"))
    unchosen = [(kind, name) for kind, name in kinds if cells.best(dataset, noise, kind) is None]
    # counted runs, but no seed every candidate finished: nothing to choose on
    unshared = [name for kind, name in unchosen if cells.counted(dataset, noise, kind)]
    uncounted = [(kind, name) for kind, name in unchosen if name not in unshared]
    counts = sum((Counter(cells.absent(dataset, noise, kind)) for kind, _ in uncounted), Counter())
    reasons = [f"no seed shared by the candidates of {name}" for name in unshared]
    if uncounted:
        found = absent_text(counts)
        reasons.append("no counted runs of " + " or ".join(n for _, n in uncounted) + (f" ({found})" if found else ""))
    if not unchosen and gains(cells, dataset, noise) is None:
        reasons.append("no seed shared by the best hierarchical and the best tuned fixed cell")
    return PanelAbsence("; ".join(reasons), dict(counts), not unshared and bool(uncounted))


def comparable_count(comparable: list[bool | None], what: str, missing: int = 0) -> str:
    """``1 of 2 cells (...) comparable with the paper's``: how many of a headline's cells it could judge; a cell
    without counted runs (None) is not among them, and is counted apart; so are the ``missing`` (False) cells short
    of planned runs (``, 1 with runs missing``)."""
    judged = [c for c in comparable if c is not None]
    without = len(comparable) - len(judged)
    if not judged:
        return f"None of the {len(comparable)} {what} has counted runs"
    text = f"{sum(judged)} of {len(judged)} {what} comparable with the paper's"
    return (
        text
        + (f", {missing} with runs missing" if missing else "")
        + (f" ({without} more without counted runs)" if without else "")
    )


Absence = dict[tuple[str, str], PanelAbsence]
"""Per panel without a gain: why (:func:`panel_absence`)."""

GainArms = dict[tuple[str, str], list[tuple[int, int]]]
"""Per panel with a gain, the ``(done, planned)`` runs of its two cells (:func:`~.cells.gain_arms`)."""


def _hierarchical_headline(
    per_panel: dict[tuple[str, str], dict[int, float]],
    checks: dict[tuple[str, str], CellCheck],
    datasets,
    absent: Absence | None = None,
    notes: dict[tuple[str, str], str] | None = None,
    arms: GainArms | None = None,
) -> Headline:
    """The gain headline over ``datasets``; ``arms``: each panel's planned runs (None: hand-made, none counted)."""
    claim = "A hierarchical prior beats the tuned fixed scale on each data set (at the high noise)."
    absent, notes, arms = absent or {}, notes or {}, arms or {}
    verdicts, widths, reasons, comparable, missing = [], [], [], [], 0
    for dataset in datasets:
        values = list(per_panel.get((dataset, "high"), {}).values())
        check = checks.get((dataset, "high"))
        short = runs_missing(*arms.get((dataset, "high"), []))
        verdict, width, text = judge_gain(values, check, absent.get((dataset, "high"), PanelAbsence()).text, short)
        judged = bool(values) and check is not None
        missing += bool(judged and short)  # inconclusive, never judged on the seeds it has: counted apart
        comparable.append((check.comparable and not short) if judged else None)
        verdicts.append(verdict)
        widths.append(width)
        note = None if short else notes.get((dataset, "high"))  # how unjudged cells trained says nothing
        reasons.append(f"{dataset}: {text}" + (f" ({note})" if note else ""))
    overall = overall_verdict(verdicts)
    count = comparable_count(comparable, "cells (data sets at the high noise)", missing)
    unjudged = not_judged(
        "both a hierarchical prior and a tuned fixed scale",
        {d: absent.get((d, "high"), PanelAbsence()) for d in datasets},
    )
    return headline_or_unjudged(claim, overall, f"{count}; " + "; ".join(reasons) + ".", widths, comparable, unjudged)


def _noise_headline(
    per_panel: dict[tuple[str, str], dict[int, float]],
    checks: dict[tuple[str, str], CellCheck],
    datasets,
    absent: Absence | None = None,
    notes: dict[tuple[str, str], str] | None = None,
    noises: tuple[str, ...] = ("high", "low"),
    arms: GainArms | None = None,
) -> Headline:
    """The noise headline over ``datasets``; not judged, saying so, where the profile's ``noises`` lack one;
    ``arms``: each panel's planned runs (None: hand-made, none counted)."""
    claim = "The hyperpriors' gain is larger on noisier data."
    if missing := [n for n in ("high", "low") if n not in noises]:
        unjudged = f"not judged: the profile trains no {' or '.join(missing)}-noise data"
        reason = "The cpu and paper profiles train both noises."
        return PriorsHeadline(claim, Verdict.INCONCLUSIVE, reason, None, unjudged)
    absent, notes, arms = absent or {}, notes or {}, arms or {}
    verdicts, widths, reasons, comparable, missing = [], [], [], [], 0
    for dataset in datasets:
        high = list(per_panel.get((dataset, "high"), {}).values())
        low = list(per_panel.get((dataset, "low"), {}).values())
        at = {noise: checks.get((dataset, noise)) for noise in ("high", "low")}
        width = None
        judged = bool(high and low) and None not in at.values()
        short = runs_missing(*arms.get((dataset, "high"), []), *arms.get((dataset, "low"), []))
        comparable.append(all(c.comparable for c in at.values()) and not short if judged else None)
        if not judged:
            why = "; ".join(
                f"{noise} noise: {absent[(dataset, noise)].text}"
                for noise in ("high", "low")
                if absent.get((dataset, noise), PanelAbsence()).text
            )
            verdict, text = Verdict.INCONCLUSIVE, f"not judged: {why or 'no counted runs of both cells at a noise'}"
        elif short:  # never judged on the seeds it has, counted apart
            verdict, text, missing = Verdict.INCONCLUSIVE, f"{Verdict.INCONCLUSIVE.value}, {short}", missing + 1
        elif not all(c.comparable for c in at.values()):
            why = "; ".join(f"{noise} noise: {c.reason}" for noise, c in at.items() if not c.comparable)
            verdict, text = Verdict.NOT_COMPARABLE, f"{Verdict.NOT_COMPARABLE.value} ({why})"
        elif len(high) < 2 or len(low) < 2:
            verdict, text = Verdict.INCONCLUSIVE, "fewer than 2 seeds at a noise"
        else:
            test = compare(high, low)
            lower, upper = welch_interval(high, low)
            at_high = _gain_verdict(high)[0]
            if at_high is Verdict.DOES_NOT_HOLD or (test.separated and test.gap < 0):
                verdict = Verdict.DOES_NOT_HOLD
            elif at_high is Verdict.HOLDS and test.separated and test.gap > 0:
                verdict = Verdict.HOLDS
            elif (width := no_effect_width(lower, upper)) is not None:
                verdict = Verdict.NO_EFFECT
            else:
                verdict = Verdict.INCONCLUSIVE
            text = (
                f"gain {statistics.fmean(high):+.3f} at the high noise against {statistics.fmean(low):+.3f} at the "
                f"low, difference {effect_text(test.gap, lower, upper)}: {verdict_text(verdict, width)}"
            )
            crossing = [
                f"{noise} noise: {notes[(dataset, noise)]}" for noise in ("high", "low") if notes.get((dataset, noise))
            ]
            text += f" ({'; '.join(crossing)})" if crossing else ""
        verdicts.append(verdict)
        widths.append(width)
        reasons.append(f"{dataset}: {text}")
    overall = overall_verdict(verdicts)
    count = comparable_count(comparable, "cells (data sets at both noises)", missing)
    unjudged = not_judged(
        "both a hierarchical prior and a tuned fixed scale at both noises",
        {f"{d} {n}": absent.get((d, n), PanelAbsence()) for d in datasets for n in ("high", "low")},
    )
    return headline_or_unjudged(claim, overall, f"{count}; " + "; ".join(reasons) + ".", widths, comparable, unjudged)
