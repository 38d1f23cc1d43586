"""Tables and verdicts of ``priors`` on moons and circles, from its run records (figures: :mod:`.priors_figures`;
the CNN: :mod:`.priors_cnn`).

A **cell** is one (data set, noise, prior) of the grid. The fixed scale of each family is **tuned** per data set and
noise: the scale of :data:`~.priors.FIXED_SCALES` with the highest mean validation accuracy over seeds (ties: the
lower validation NLL). The verdicts read the **test** points, which neither the tuning nor the choice of the best
hyperprior saw (the paper reports validation accuracy, the number its tuning was chosen on; ours is beside it).

Verdict rules (a paired test over seeds: the per-seed gains against 0 by :func:`~pyro_bnn.reproduce.report.compare`,
which is then the paired t-test, level 0.05; every seed's cells see the same points):

- **A hierarchical prior beats the tuned fixed scale** (per data set, at the high noise): the gain is the test
  accuracy of the best hierarchical cell (by mean validation accuracy) minus that of the best tuned fixed cell.
  *Does not hold* when the gain is negative and separated, or when its 95 % interval lies below :data:`MIN_GAIN`
  (no gain worth the name); else *holds* when it is positive and separated with a mean of at least
  :data:`MIN_GAIN`; *inconclusive* otherwise. One verdict over the data sets by
  :func:`~pyro_bnn.reproduce.report.overall_verdict`.
- **The gain is larger at the higher noise** (per data set): the per-seed gains at the high and the low noise
  compared by Welch's t-test. *Does not hold* when the high-noise gain is no gain by the rule above or is smaller
  than the low-noise one (separated); else *holds* when the high-noise gain holds by the rule above and is the
  larger (separated); *inconclusive* otherwise.

Cells are chosen (the tuned scale, the best cells) on the seeds every candidate of the panel has finished, so an
interrupted grid does not favour the cells with more seeds.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from pyro_bnn.data.bayes_optimal import bayes_optimal_accuracy
from pyro_bnn.experiments.runs import build_bnn, load_data
from pyro_bnn.experiments.scoring import CONFORMAL_KEYS
from pyro_bnn.predict import Samples, predict
from pyro_bnn.reproduce.papers.priors import HYPERPRIORS, NOISE, PUBLISHED, TEST, TRAIN, VAL
from pyro_bnn.reproduce.priors_measures import draw_stored_posterior
from pyro_bnn.reproduce.report import (
    CONFORMAL_NOTE,
    compare,
    format_mean_sd,
    markdown_table,
    mean_sd,
    overall_verdict,
    select,
)
from pyro_bnn.reproduce.spec import Analysis, Headline, Profile, RunRecord, Section, Verdict

MIN_GAIN = 0.005
"""A test-accuracy gain below half a point is no gain worth the name."""


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


def _interval(values: list[float]) -> tuple[float, float]:
    """The 95 % t interval of the mean of ``values`` (NaN for fewer than 2)."""
    from scipy.stats import t

    mean, sd, n = mean_sd(values)
    if n < 2:
        return math.nan, math.nan
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


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


def _gain_table(cells: Cells) -> tuple[str, dict[tuple[str, str], dict[int, float]]]:
    rows, per_panel = [], {}
    for dataset, noise in cells.panels():
        found = gains(cells, dataset, noise)
        if found is None:
            continue
        values, hyper, fixed = found
        per_panel[(dataset, noise)] = values
        low, high = _interval(list(values.values()))
        rows.append(
            (dataset, noise, cell_name(*hyper), cell_name(*fixed), format_mean_sd(list(values.values())),
             f"[{low:+.3f}, {high:+.3f}]")
        )  # fmt: skip
    header = ["data set", "noise", "best hierarchical", "best tuned fixed", "test-accuracy gain", "95 % interval"]
    return markdown_table(header, rows), per_panel


def _gain_verdict(values: list[float]):
    """The verdict on per-seed gains ``values`` being a gain worth the name (the module docstring's rule), and the
    paired test behind it."""
    test = compare(values, [0.0] * len(values))
    if (test.separated and test.gap < 0) or _interval(values)[1] < MIN_GAIN:
        return Verdict.DOES_NOT_HOLD, test
    if test.separated and test.gap >= MIN_GAIN:
        return Verdict.HOLDS, test
    return Verdict.INCONCLUSIVE, test


def _hierarchical_headline(per_panel: dict[tuple[str, str], dict[int, float]], datasets) -> Headline:
    claim = "A hierarchical prior beats the tuned fixed scale on each data set (at the high noise)."
    verdicts, reasons = [], []
    for dataset in datasets:
        values = list(per_panel.get((dataset, "high"), {}).values())
        if len(values) < 2:
            verdicts.append(Verdict.INCONCLUSIVE)
            reasons.append(f"{dataset}: fewer than 2 seeds")
            continue
        verdict, test = _gain_verdict(values)
        low, high = _interval(values)
        verdicts.append(verdict)
        reasons.append(f"{dataset}: gain {test.gap:+.3f} (95 % interval [{low:+.3f}, {high:+.3f}]), {verdict.value}")
    return Headline(claim, overall_verdict(verdicts), "; ".join(reasons) + ".")


def _noise_headline(per_panel: dict[tuple[str, str], dict[int, float]], datasets) -> Headline:
    claim = "The hyperpriors' gain is larger on noisier data."
    verdicts, reasons = [], []
    for dataset in datasets:
        high = list(per_panel.get((dataset, "high"), {}).values())
        low = list(per_panel.get((dataset, "low"), {}).values())
        if len(high) < 2 or len(low) < 2:
            verdicts.append(Verdict.INCONCLUSIVE)
            reasons.append(f"{dataset}: fewer than 2 seeds at a noise")
            continue
        test = compare(high, low)
        at_high = _gain_verdict(high)[0]
        if at_high is Verdict.DOES_NOT_HOLD or (test.separated and test.gap < 0):
            verdict = Verdict.DOES_NOT_HOLD
        elif at_high is Verdict.HOLDS and test.separated and test.gap > 0:
            verdict = Verdict.HOLDS
        else:
            verdict = Verdict.INCONCLUSIVE
        verdicts.append(verdict)
        reasons.append(
            f"{dataset}: gain {statistics.fmean(high):+.3f} at the high noise against {statistics.fmean(low):+.3f} "
            f"at the low ({verdict.value})"
        )
    return Headline(claim, overall_verdict(verdicts), "; ".join(reasons) + ".")


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    from pyro_bnn.reproduce.papers.priors_cnn import cnn_section
    from pyro_bnn.reproduce.papers.priors_figures import loss_section, map_section, sparsity_section
    from pyro_bnn.reproduce.report import write_csv

    for record in select(records, part="synthetic"):
        if "val_accuracy" not in record.metrics:
            add_validation_scores(record)
    cells = Cells(records, profile)
    sections, headlines = [_noise_text(cells)], []
    if cells.panels():
        sections.append(_tuning_section(cells, out))
        results, csv_rows = _results_section(cells, out)
        write_csv(out / "synthetic.csv", csv_rows)
        table, per_panel = _gain_table(cells)
        results.tables.append(
            "**Gain of the best hierarchical prior over the best tuned fixed scale** (both chosen by validation "
            "accuracy), test accuracy, per-seed differences on the same points\n\n" + table
        )
        sections += [results, loss_section(cells, out), map_section(cells, out)]
        sparsity, sparsity_headline = sparsity_section(cells, out)
        sections.append(sparsity)
        headlines += [
            _hierarchical_headline(per_panel, profile["datasets"]),
            _noise_headline(per_panel, profile["datasets"]),
            sparsity_headline,
        ]
    cnn, cnn_headline = cnn_section(select(records, part="cnn"), out)
    sections.append(cnn)
    headlines.append(cnn_headline)
    return Analysis(sections, headlines)
