"""Tables and verdicts of ``priors`` on moons and circles, from its run records (figures: :mod:`.figures`;
the CNN: :mod:`.cnn`).

A **cell** is one (data set, noise, prior) of the grid. The fixed scale of each family is **tuned** per data set and
noise: the scale of :data:`~.priors.FIXED_SCALES` with the highest mean validation accuracy over seeds (ties: the
lower validation NLL). The verdicts read the **test** points, which neither the tuning nor the choice of the best
hyperprior saw (the paper reports validation accuracy, the number its tuning was chosen on; ours is beside it).

**Comparability** (issue 39): a verdict judges a cell only when :func:`cell_check` passes it under the data set's
rule :data:`~.priors.COMPARABLE`: every run converged (its validation accuracy flat over its last history rows at
its step cap; the paper states no step count, so there is no paper's schedule to meet), and, for a hierarchical cell
at the high noise, its mean test accuracy within :data:`~.priors.ACCURACY_TOLERANCE` of the paper's best (the paper
publishes no other number, so fixed-scale, flat and low-noise cells are checked for convergence alone). A verdict
on a cell that fails is *not comparable at this scale*, with the reason, never *does not hold*; a headline counts the
comparable cells only (:func:`~pyro_bnn.reproduce.report.overall_verdict`) and says how many there were. Every
judged cell's training state is in the report's comparability table.

Every effect is stated as mean ± the half-width of its 95 % t interval. Where the cells are comparable (the paper's
network, data sizes and accuracy) and the interval covers zero within ±:data:`TIGHT`, the verdict is *no effect
within ±x*, x the larger of the interval's ends in absolute value (the interval lies within [-x, x]); an interval
that covers zero but is wider stays *inconclusive*.

Verdict rules (a paired test over seeds: the per-seed gains against 0 by :func:`~pyro_bnn.reproduce.report.compare`,
which is then the paired t-test, level 0.05; every seed's cells see the same points):

- **A hierarchical prior beats the tuned fixed scale** (per data set, at the high noise): the gain is the test
  accuracy of the best hierarchical cell (by mean validation accuracy) minus that of the best tuned fixed cell.
  *Not comparable* unless both cells are comparable. *Does not hold* when the gain is negative and separated;
  *holds* when it is positive and separated with a mean of at least :data:`MIN_GAIN`; *no effect within ±x* when
  its interval covers zero within ±:data:`TIGHT`; *does not hold* when its interval lies below :data:`MIN_GAIN`
  (no gain worth the name); *inconclusive* otherwise. One verdict over the data sets by
  :func:`~pyro_bnn.reproduce.report.overall_verdict`.
- **The gain is larger at the higher noise** (per data set): the per-seed gains at the high and the low noise
  compared by Welch's t-test (its 95 % interval with Welch's degrees of freedom). *Not comparable* unless the four
  cells (best hierarchical and best tuned fixed at both noises) are. *Does not hold* when the high-noise gain does
  not hold by the rule above or is smaller than the low-noise one (separated); *holds* when the high-noise gain
  holds and is the larger (separated); *no effect within ±x* when the difference's interval covers zero within
  ±:data:`TIGHT`; *inconclusive* otherwise.

Cells are chosen (the tuned scale, the best cells) on the seeds every candidate of the panel has finished, so an
interrupted grid does not favour the cells with more seeds.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from pyro_bnn.data.bayes_optimal import bayes_optimal_accuracy
from pyro_bnn.predict import Samples, predict
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.priors.measures import draw_stored_posterior
from pyro_bnn.reproduce.papers.priors.plan import (
    ACCURACY_TOLERANCE,
    COMPARABLE,
    HYPERPRIORS,
    NOISE,
    PUBLISHED,
    TEST,
    TRAIN,
    VAL,
)
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Verdict
from pyro_bnn.reproduce.report import (
    CONFORMAL_NOTE,
    compare,
    format_mean_sd,
    markdown_table,
    mean_sd,
    overall_verdict,
    select,
)
from pyro_bnn.runs.runs import build_bnn, load_data
from pyro_bnn.runs.scoring import CONFORMAL_KEYS

MIN_GAIN = 0.005
"""A test-accuracy gain below half a point is no gain worth the name."""

TIGHT = 0.02
"""The widest interval, as ±x around zero, that reads *no effect within ±x* (two points of test accuracy). The
paper's accuracies are single measurements on 300 validation points, with a binomial standard error of 0.021
(moons) and 0.025 (circles); the difference of two such numbers has one of about 0.03, so a gain the paper's own
numbers could have shown is at least twice that, 0.06. An interval within ±0.02 rules out every such gain with room
to spare; wider intervals that cover zero say only that the seeds' spread covers the effect (*inconclusive*)."""


SCALE_NAMES = {"halfnormal": "HalfNormal(1)", "halfcauchy": "HalfCauchy(1)", "inversegamma": "InverseGamma(1, 1)"}
FAMILY_NAMES = {"normal": "Normal", "laplace": "Laplace", "cauchy": "Cauchy", "flat": "flat"}


VAL_SAMPLES = 100
"""Posterior samples behind the validation metrics (as many as behind the test metrics)."""


def metric(record: RunRecord, key: str) -> float:
    """A test metric (``accuracy``, ``nll``, ``ece``; the conformal ones NaN where the record predates them) or a
    validation one (``val_accuracy``, ``val_nll``, filled in by :func:`add_validation_scores`)."""
    if key in CONFORMAL_KEYS:
        return float(record.metrics.get(key, math.nan))
    return float(record.metrics[key])


def add_validation_scores(record: RunRecord) -> None:
    """Adds ``val_accuracy`` and ``val_nll`` to ``record.metrics``: the final posterior's predictive on the run's
    validation points, with :data:`VAL_SAMPLES` draws from the posterior the record stores (the history's
    validation checks use a few samples each and move with the optimiser)."""
    config = record.config
    data = load_data(config)
    bnn, _ = build_bnn(config, data)
    draws = draw_stored_posterior(record.metrics, VAL_SAMPLES, seed=config.seed)
    scores = predict(bnn, Samples(draws), (data.val.x, data.val.y)).metrics()
    record.metrics.update(val_accuracy=scores["accuracy"], val_nll=scores["nll"])


class Cells:
    """The finished synthetic records grouped by cell, with the tuned scale of every family."""

    def __init__(self, records: list[RunRecord], profile: Profile) -> None:
        self.profile = profile
        self.runs: dict[tuple[str, str, str, str], list[RunRecord]] = {}
        for record in select(records, part="synthetic"):
            key = tuple(record.spec.tag(k) for k in ("dataset", "noise", "family", "scale"))
            self.runs.setdefault(key, []).append(record)
        for runs in self.runs.values():
            runs.sort(key=lambda r: int(r.spec.tag("seed")))

    def panels(self) -> list[tuple[str, str]]:
        """``(dataset, noise)`` pairs with any finished run, in the profile's order."""
        return [
            (d, n)
            for d in self.profile["datasets"]
            for n in self.profile["noises"]
            if any(key[:2] == (d, n) for key in self.runs)
        ]

    def values(self, dataset: str, noise: str, family: str, scale: str, key: str) -> dict[int, float]:
        """``{seed: value}`` of one cell."""
        return {int(r.spec.tag("seed")): metric(r, key) for r in self.runs.get((dataset, noise, family, scale), [])}

    def common_seeds(self, dataset: str, noise: str) -> set[int]:
        """The seeds every cell of a panel has finished: what choices between its cells are made on."""
        seeds = [
            {int(r.spec.tag("seed")) for r in runs} for key, runs in self.runs.items() if key[:2] == (dataset, noise)
        ]
        return set.intersection(*seeds) if seeds else set()

    def _choice_key(self, dataset: str, noise: str, family: str, scale: str) -> tuple[float, float]:
        """Mean validation accuracy and minus mean validation NLL over the panel's common seeds."""
        seeds = self.common_seeds(dataset, noise)

        def mean(key: str) -> float:
            values = self.values(dataset, noise, family, scale, key)
            return mean_sd([v for seed, v in values.items() if seed in seeds])[0]

        accuracy, nll = mean("val_accuracy"), mean("val_nll")
        return (accuracy if math.isfinite(accuracy) else -math.inf, -nll if math.isfinite(nll) else -math.inf)

    def tuned(self, dataset: str, noise: str, family: str) -> str | None:
        """The fixed scale of ``family`` with the best mean validation accuracy (ties: lower validation NLL)."""
        scales = [f"{v:g}" for v in self.profile["fixed_scales"] if self.runs.get((dataset, noise, family, f"{v:g}"))]
        if not scales:
            return None
        return max(scales, key=lambda s: self._choice_key(dataset, noise, family, s))

    def rows(self, dataset: str, noise: str) -> list[tuple[str, str, str]]:
        """``(family, scale, kind)`` of the cells a table shows: each family's tuned fixed scale and hyperpriors,
        and flat."""
        rows = []
        for family in self.profile["families"]:
            tuned = self.tuned(dataset, noise, family)
            if tuned is not None:
                rows.append((family, tuned, "fixed"))
            hypers = [h for h in self.profile["hyperpriors"] if self.runs.get((dataset, noise, family, h))]
            rows += [(family, h, "hyper") for h in hypers]
        if self.runs.get((dataset, noise, "flat", "none")):
            rows.append(("flat", "none", "flat"))
        return rows

    def best(self, dataset: str, noise: str, kind: str | None = None) -> tuple[str, str] | None:
        """The ``(family, scale)`` among :meth:`rows` of ``kind`` (any: None) with the best mean validation
        accuracy (ties: lower validation NLL)."""
        candidates = [(f, s) for f, s, k in self.rows(dataset, noise) if kind is None or k == kind]
        if not candidates:
            return None
        return max(candidates, key=lambda c: self._choice_key(dataset, noise, *c))


def cell_name(family: str, scale: str) -> str:
    """``Normal, s = 0.3`` / ``Laplace + HalfCauchy(1)`` / ``flat``."""
    if family == "flat":
        return "flat"
    if scale in HYPERPRIORS:
        return f"{FAMILY_NAMES[family]} + {SCALE_NAMES[scale]}"
    return f"{FAMILY_NAMES[family]}, s = {scale}"


def gains(cells: Cells, dataset: str, noise: str) -> tuple[dict[int, float], tuple[str, str], tuple[str, str]] | None:
    """Per-seed test-accuracy gain of the best hierarchical cell over the best tuned fixed cell, and the two."""
    hyper, fixed = cells.best(dataset, noise, "hyper"), cells.best(dataset, noise, "fixed")
    if hyper is None or fixed is None:
        return None
    a, b = cells.values(dataset, noise, *hyper, "accuracy"), cells.values(dataset, noise, *fixed, "accuracy")
    return {s: a[s] - b[s] for s in sorted(a.keys() & b.keys())}, hyper, fixed


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
    (rounded to 3 decimals, as the interval is printed) when it covers zero and lies within ±``tight``; else None."""
    if not (low <= 0 <= high):
        return None
    width = round(max(abs(low), abs(high)), 3)
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


def overall_width(verdict: Verdict, widths: list[float | None]) -> float | None:
    """The x of an overall *no effect within ±x*: the widest of its cells' (None for any other verdict)."""
    found = [w for w in widths if w is not None]
    return max(found) if verdict is Verdict.NO_EFFECT and found else None


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


def _noise_text(cells: Cells) -> Section:
    rows = []
    for dataset in cells.profile["datasets"]:
        for level in cells.profile["noises"]:
            noise = NOISE[dataset][level]
            published = f"{PUBLISHED[dataset][0]:.3f}" if level == "high" else ""
            rows.append((dataset, level, f"{noise:g}", f"{bayes_optimal_accuracy(dataset, noise):.3f}", published))
    text = (
        f"Each seed draws {TRAIN} training, {VAL} validation and {TEST} test points from one pool of the generator. "
        "The paper's 'large noise' is not given; the high noise is the one whose Bayes-optimal accuracy (the best "
        "any classifier can do, `pyro_bnn.data.bayes_optimal`, 20 000 points) is nearest the paper's best "
        "validation accuracy, and 0.2 is the lower noise. Network 2-5-5-2 tanh; mean-field Normal guide started "
        f"with sigma 0.05, trained by Pyro's Trace_ELBO (ADVI's estimator) under every prior, the KL weight rising "
        "from 0 to 1 over the first 30 % of the steps; full-batch Adam at "
        f"{cells.profile['lr']} (decayed to a tenth between 50 % and 90 % of "
        f"the steps) for {cells.profile['steps']} steps; "
        f"{cells.profile['samples']} posterior samples for the test metrics."
    )
    table = markdown_table(["data set", "noise level", "noise", "Bayes-optimal accuracy", "paper's best"], rows)
    return Section("Data and noise levels", text, [table])


def _tuning_section(cells: Cells, out: Path) -> Section:
    scales = [f"{v:g}" for v in cells.profile["fixed_scales"]]
    rows = []
    for dataset, noise in cells.panels():
        for family in cells.profile["families"]:
            tuned = cells.tuned(dataset, noise, family)
            if tuned is None:
                continue
            row = [dataset, noise, FAMILY_NAMES[family]]
            for scale in scales:
                text = format_mean_sd(list(cells.values(dataset, noise, family, scale, "val_accuracy").values()))
                row.append(f"**{text}**" if scale == tuned else text)
            rows.append(row)
    text = (
        "Validation accuracy of every fixed scale (mean ± sd over seeds); the tuned one, in bold, is the best mean "
        "(ties: the lower validation NLL). It is the fixed-scale row of the tables below."
    )
    return Section("Tuning the fixed scale", text, [markdown_table(["data set", "noise", "prior", *scales], rows)])


def _results_section(cells: Cells, out: Path) -> tuple[Section, list[dict[str, Any]]]:
    panels = cells.panels()
    names = [f"{d} ({n} noise)" for d, n in panels]
    tables = []
    csv_rows = [
        {"dataset": d, "noise": n, "family": f, "scale": s, "seed": r.spec.tag("seed"),
         **{k: metric(r, k) for k in ("val_accuracy", "accuracy", "nll", "ece", *CONFORMAL_KEYS)}}
        for (d, n, f, s), runs in sorted(cells.runs.items()) for r in runs
    ]  # fmt: skip
    seeds = {
        (d, n): max(len(runs) for key, runs in cells.runs.items() if key[:2] == (d, n)) for d, n in panels
    }  # the most seeds any cell of a panel has: fewer is said in the cell
    for key, title, digits in (
        ("val_accuracy", "Validation accuracy (the paper's number)", 3),
        ("accuracy", "Test accuracy", 3),
        ("nll", "Test NLL", 3),
        ("ece", "Test ECE (15 bins)", 3),
        ("conformal_coverage", "Test coverage of the conformal sets (α = 0.1)", 3),
        ("conformal_set_size", "Mean size of the conformal sets (α = 0.1)", 2),
    ):
        by_cell: dict[tuple[str, str], list[str]] = {}
        order: list[tuple[str, str]] = []
        for i, (dataset, noise) in enumerate(panels):
            for family, scale, kind in cells.rows(dataset, noise):
                label = (family, "fixed") if kind == "fixed" else (family, scale)
                if label not in by_cell:
                    by_cell[label] = ["—"] * len(panels)
                    order.append(label)
                values = {s: v for s, v in cells.values(dataset, noise, family, scale, key).items() if math.isfinite(v)}
                text = format_mean_sd(list(values.values()), digits)
                if 1 < len(values) < seeds[(dataset, noise)]:
                    text += f" (n = {len(values)})"
                by_cell[label][i] = f"{text} (s = {scale})" if kind == "fixed" else text
        rows = [
            [cell_name(f, s) if s != "fixed" else f"{FAMILY_NAMES[f]}, tuned fixed scale", *by_cell[(f, s)]]
            for f, s in order
        ]
        if key == "val_accuracy":
            rows.append(
                [
                    "paper's best",
                    *[
                        f"{PUBLISHED[d][0]:.3f} ({cell_name(PUBLISHED[d][1], PUBLISHED[d][2])})" if n == "high" else ""
                        for d, n in panels
                    ],
                ]
            )
        tables.append(f"**{title}**, mean ± sd over seeds\n\n" + markdown_table(["prior", *names], rows))
    text = (
        "Every prior: each family with its tuned fixed scale and with each hyperprior (one scale per layer), and the "
        "flat prior. The paper reports validation accuracy only, the number its fixed scales were tuned on; the "
        f"test points are untouched by any choice. {CONFORMAL_NOTE}"
    )
    return Section("Accuracy, NLL and ECE of every prior", text, tables, csv_files=["synthetic.csv"]), csv_rows


def judge_gain(values: list[float], check: CellCheck | None) -> tuple[Verdict, float | None, str]:
    """The verdict on one panel's per-seed gains ``values`` (the module docstring's first rule), the x of its *no
    effect within ±x* (or None), and the text a headline prints for it."""
    if check is None or not values:
        return Verdict.INCONCLUSIVE, None, "no counted runs of both a hierarchical and a tuned fixed cell"
    if not check.comparable:
        return Verdict.NOT_COMPARABLE, None, f"{Verdict.NOT_COMPARABLE.value} ({check.reason})"
    if len(values) < 2:
        return Verdict.INCONCLUSIVE, None, f"gain {values[0]:+.3f} on 1 seed, {Verdict.INCONCLUSIVE.value}"
    verdict, width = _gain_verdict(values)
    low, high = t_interval(values)
    text = f"gain {effect_text(statistics.fmean(values), low, high)} over {len(values)} seeds"
    return verdict, width, f"{text}: {verdict_text(verdict, width)}"


def _gain_table(cells: Cells) -> tuple[str, dict[tuple[str, str], dict[int, float]], dict[tuple[str, str], CellCheck]]:
    rows, per_panel, checks = [], {}, {}
    for dataset, noise in cells.panels():
        found, check = gains(cells, dataset, noise), panel_check(cells, dataset, noise)
        if found is None or check is None:
            continue
        values, hyper, fixed = found
        per_panel[(dataset, noise)], checks[(dataset, noise)] = values, check
        low, high = t_interval(list(values.values()))
        verdict, width, _ = judge_gain(list(values.values()), check)
        hyper_check, fixed_check = (cell_check(cells, dataset, noise, *c) for c in (hyper, fixed))
        rows.append(
            (dataset, noise, cell_name(*hyper), cell_name(*fixed), format_mean_sd(list(values.values())),
             f"[{low:+.3f}, {high:+.3f}]", hyper_check.summary, fixed_check.summary,
             verdict_text(verdict, width) if check.comparable else f"{verdict.value}: {check.reason}")
        )  # fmt: skip
    header = ["data set", "noise", "best hierarchical", "best tuned fixed", "test-accuracy gain", "95 % interval",
              "training, hierarchical", "training, fixed", "verdict"]  # fmt: skip
    if not rows:
        return "No panel has counted runs of both a hierarchical and a tuned fixed cell.", per_panel, checks
    return markdown_table(header, rows), per_panel, checks


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


def comparable_count(comparable: list[bool], what: str) -> str:
    """``1 of 2 cells (...) comparable with the paper's``: how many of a headline's cells it could judge (a cell
    without runs is not among them)."""
    return f"{sum(comparable)} of {len(comparable)} {what} comparable with the paper's"


def _hierarchical_headline(
    per_panel: dict[tuple[str, str], dict[int, float]], checks: dict[tuple[str, str], CellCheck], datasets
) -> Headline:
    claim = "A hierarchical prior beats the tuned fixed scale on each data set (at the high noise)."
    verdicts, widths, reasons, comparable = [], [], [], []
    for dataset in datasets:
        values = list(per_panel.get((dataset, "high"), {}).values())
        check = checks.get((dataset, "high"))
        verdict, width, text = judge_gain(values, check)
        comparable.append(bool(values) and check is not None and check.comparable)
        verdicts.append(verdict)
        widths.append(width)
        reasons.append(f"{dataset}: {text}")
    overall = overall_verdict(verdicts)
    count = comparable_count(comparable, "cells (data sets at the high noise)")
    return Headline(claim, overall, f"{count}; " + "; ".join(reasons) + ".", overall_width(overall, widths))


def _noise_headline(
    per_panel: dict[tuple[str, str], dict[int, float]], checks: dict[tuple[str, str], CellCheck], datasets
) -> Headline:
    claim = "The hyperpriors' gain is larger on noisier data."
    verdicts, widths, reasons, comparable = [], [], [], []
    for dataset in datasets:
        high = list(per_panel.get((dataset, "high"), {}).values())
        low = list(per_panel.get((dataset, "low"), {}).values())
        at = {noise: checks.get((dataset, noise)) for noise in ("high", "low")}
        width = None
        comparable.append(bool(high and low) and all(c is not None and c.comparable for c in at.values()))
        if not high or not low or None in at.values():
            verdict, text = Verdict.INCONCLUSIVE, "no counted runs of both cells at a noise"
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
        verdicts.append(verdict)
        widths.append(width)
        reasons.append(f"{dataset}: {text}")
    overall = overall_verdict(verdicts)
    count = comparable_count(comparable, "cells (data sets at both noises)")
    return Headline(claim, overall, f"{count}; " + "; ".join(reasons) + ".", overall_width(overall, widths))


def _comparability_section(cells: Cells, judged: dict[tuple[str, str], dict[tuple[str, str], str]]) -> Section:
    """Every shown cell's training state and comparability; ``judged``: per panel, the cells a verdict reads beyond
    the gain's (cell -> the verdict), e.g. the sparsity verdict's shared scale."""
    rows = []
    for dataset, noise in cells.panels():
        readers: dict[tuple[str, str], list[str]] = {}
        pair = [cells.best(dataset, noise, kind) for kind in ("hyper", "fixed")]
        for best in pair if None not in pair else []:  # the gain needs both cells
            readers.setdefault(best, []).append("gain, noise" if noise == "high" else "noise")
        for cell, name in judged.get((dataset, noise), {}).items():
            readers.setdefault(cell, []).append(name)
        shown = [(f, s) for f, s, _ in cells.rows(dataset, noise)]
        shown += [c for c in readers if c not in shown and cells.runs.get((dataset, noise, *c))]
        for family, scale in shown:
            check = cell_check(cells, dataset, noise, family, scale)
            rows.append(
                (dataset, noise, cell_name(family, scale), ", ".join(readers.get((family, scale), [])) or "—",
                 check.summary, "yes" if check.comparable else f"no: {check.reason}")
            )  # fmt: skip
    datasets = [d for d in cells.profile["datasets"] if d in COMPARABLE]
    rules = f"**{datasets[0]}**: {COMPARABLE[datasets[0]].describe()}" if datasets else ""
    rules += "".join(
        f" **{d}**: the same, with a tolerance of {ACCURACY_TOLERANCE[d]:g} (twice the binomial standard error of "
        f"the paper's {PUBLISHED[d][0]:.3f})."
        for d in datasets[1:]
    )
    text = (
        "Whether each cell can be judged against the paper (`pyro_bnn.reproduce.comparability`, rules declared in "
        f"`pyro_bnn.reproduce.papers.priors.COMPARABLE`). {rules} The runs are full-batch with no early stopping and "
        "the paper states no step count, so a run converged when its validation accuracy is flat at its step cap; "
        "an 'epoch' of this check is one row of the run's history, the mean over a bin of steps (at most 100 rows). "
        "The accuracy check applies where the paper has a number: the hierarchical cells at the high noise, against "
        f"the paper's best ({', '.join(f'{d} {PUBLISHED[d][0]:.3f} ± {t:g}' for d, t in ACCURACY_TOLERANCE.items())}); "
        "fixed-scale, flat and low-noise cells are checked for convergence alone. A verdict reads only comparable "
        "cells; where they are comparable and an effect's 95 % interval covers zero within "
        f"±{TIGHT:g}, the verdict is *no effect within ±x* (rule and reasons: the module docstring of "
        "`pyro_bnn.reproduce.papers.priors.analysis`). *read by*: the verdicts that judge the cell (gain: a "
        "hierarchical prior beats the tuned fixed scale; noise: the gain is larger on noisier data; sparsity: the "
        "Laplace posterior is sparser than the Cauchy one)."
    )
    training = "training (converged runs, epochs = full-batch steps, test accuracy vs the paper's)"
    header = ["data set", "noise", "prior", "read by", training, "comparable"]
    return Section("Comparability with the paper", text, [markdown_table(header, rows)])
