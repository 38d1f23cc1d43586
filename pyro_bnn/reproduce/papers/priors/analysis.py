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

A verdict none of whose cells has counted runs (all not counted, failed or not run yet) reads *not judged*, with
the runs it waits for (e.g. those that await ``--retrain-stale``); its :class:`~pyro_bnn.reproduce.planned.Verdict`
stays *inconclusive*, so that nothing counting verdicts changes. The gain table and the gain verdicts say how each
side trained (batched by :mod:`pyro_bnn.batched` or singly, from the records' ``batched_runs``) and, where the two
differ, the batched-against-single offset measured in :data:`~.verdicts.BATCHED_CHECK` (about the size of the
gains): the rule itself is unchanged, as the offsets lie inside the gains' intervals.

Cells are chosen (the tuned scale, the best cells) on the seeds every candidate of the panel has finished, so an
interrupted grid does not favour the cells with more seeds. A gain (or the noise comparison of two) whose chosen
cells are short of any planned run (the grid's records are its plan: a seed not run, failed or not counted) is not
judged on the seeds it has: it is *inconclusive*, *runs missing (k of n planned)*, so an unfinished grid never reads
*holds*, and its headline tallies it apart (*with runs missing*).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pyro_bnn.data.bayes_optimal import bayes_optimal_accuracy
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.priors.cells import FAMILY_NAMES as FAMILY_NAMES
from pyro_bnn.reproduce.papers.priors.cells import SCALE_NAMES as SCALE_NAMES
from pyro_bnn.reproduce.papers.priors.cells import VAL_SAMPLES as VAL_SAMPLES
from pyro_bnn.reproduce.papers.priors.cells import Cells as Cells
from pyro_bnn.reproduce.papers.priors.cells import absent_text
from pyro_bnn.reproduce.papers.priors.cells import add_validation_scores as add_validation_scores
from pyro_bnn.reproduce.papers.priors.cells import cell_name as cell_name
from pyro_bnn.reproduce.papers.priors.cells import gain_arms as gain_arms
from pyro_bnn.reproduce.papers.priors.cells import gains as gains
from pyro_bnn.reproduce.papers.priors.cells import metric as metric
from pyro_bnn.reproduce.papers.priors.plan import ACCURACY_TOLERANCE, COMPARABLE, NOISE, PUBLISHED, TEST, TRAIN, VAL
from pyro_bnn.reproduce.papers.priors.verdicts import (
    BATCHED_CHECK,
    Absence,
    batched_offset_text,
    crossing_note,
    gain_paths,
    gain_verdict_text,
    panel_absence,
)
from pyro_bnn.reproduce.papers.priors.verdicts import MIN_GAIN as MIN_GAIN
from pyro_bnn.reproduce.papers.priors.verdicts import TIGHT as TIGHT
from pyro_bnn.reproduce.papers.priors.verdicts import _gain_verdict as _gain_verdict
from pyro_bnn.reproduce.papers.priors.verdicts import _hierarchical_headline as _hierarchical_headline
from pyro_bnn.reproduce.papers.priors.verdicts import _noise_headline as _noise_headline
from pyro_bnn.reproduce.papers.priors.verdicts import cell_check as cell_check
from pyro_bnn.reproduce.papers.priors.verdicts import comparable_count as comparable_count
from pyro_bnn.reproduce.papers.priors.verdicts import effect_text as effect_text
from pyro_bnn.reproduce.papers.priors.verdicts import joint_check as joint_check
from pyro_bnn.reproduce.papers.priors.verdicts import judge_gain as judge_gain
from pyro_bnn.reproduce.papers.priors.verdicts import no_effect_width as no_effect_width
from pyro_bnn.reproduce.papers.priors.verdicts import overall_width as overall_width
from pyro_bnn.reproduce.papers.priors.verdicts import panel_check as panel_check
from pyro_bnn.reproduce.papers.priors.verdicts import t_interval as t_interval
from pyro_bnn.reproduce.papers.priors.verdicts import verdict_text as verdict_text
from pyro_bnn.reproduce.papers.priors.verdicts import welch_interval as welch_interval
from pyro_bnn.reproduce.planned import Section
from pyro_bnn.reproduce.report import CONFORMAL_NOTE, format_mean_sd, markdown_table, runs_missing
from pyro_bnn.runs.scoring import CONFORMAL_KEYS


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
    if not rows:
        waiting = [
            f"{d} {n}: {absent_text(found)}"
            for d in cells.profile["datasets"]
            for n in cells.profile["noises"]
            if (found := cells.absent(d, n, "fixed"))
        ]
        why = f" Instead: {'; '.join(waiting)}." if waiting else ""
        return Section("Tuning the fixed scale", f"No fixed-scale cell has counted runs, so none is tuned.{why}")
    return Section("Tuning the fixed scale", text, [markdown_table(["data set", "noise", "prior", *scales], rows)])


def absences_by_panel(cells: Cells) -> Absence:
    """Per panel of the profile without both a hierarchical and a tuned fixed cell: why, and what its runs are
    instead (:func:`~.verdicts.panel_absence`)."""
    found = {}
    for dataset in cells.profile["datasets"]:
        for noise in cells.profile["noises"]:
            if (absence := panel_absence(cells, dataset, noise)).text:
                found[(dataset, noise)] = absence
    return found


def panel_notes(cells: Cells) -> dict[tuple[str, str], str]:
    """Per panel whose best hierarchical and best tuned fixed cells trained differently (batched or singly): how,
    with the offset measured between the two (:func:`~.verdicts.crossing_note`)."""
    notes = {}
    for dataset, noise in cells.panels():
        hyper, fixed = cells.best(dataset, noise, "hyper"), cells.best(dataset, noise, "fixed")
        if hyper is not None and fixed is not None and (note := crossing_note(cells, dataset, noise, hyper, fixed)):
            notes[(dataset, noise)] = note
    return notes


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
    short = cells.seeds_short()
    if short:
        text += (
            " Cells with counted runs of fewer seeds than the grid planned (the header's seeds per cell; the rest "
            f"not counted, failed or not run yet): {'; '.join(short)}."
        )
    return Section("Accuracy, NLL and ECE of every prior", text, tables, csv_files=["synthetic.csv"]), csv_rows


def _gain_table(cells: Cells) -> tuple[str, dict[tuple[str, str], dict[int, float]], dict[tuple[str, str], CellCheck]]:
    rows, per_panel, checks, crossed, arms = [], {}, {}, False, gain_arms(cells)
    for dataset, noise in cells.panels():
        found, check = gains(cells, dataset, noise), panel_check(cells, dataset, noise)
        if found is None or check is None:
            continue
        values, hyper, fixed = found
        per_panel[(dataset, noise)], checks[(dataset, noise)] = values, check
        low, high = t_interval(list(values.values()))
        missing = runs_missing(*arms[(dataset, noise)])  # a cell short of planned runs: not judged on its seeds
        verdict, width, text = judge_gain(list(values.values()), check, missing=missing)
        hyper_check, fixed_check = (cell_check(cells, dataset, noise, *c) for c in (hyper, fixed))
        crossing, paths = gain_paths(cells, dataset, noise, hyper, fixed)
        crossed |= crossing
        trained = " / ".join(paths)
        if crossing:
            trained += "; " + batched_offset_text(dataset, noise, brief=True)
        rows.append(
            (dataset, noise, cell_name(*hyper), cell_name(*fixed), format_mean_sd(list(values.values())),
             f"[{low:+.3f}, {high:+.3f}]", hyper_check.summary, fixed_check.summary, trained,
             text if missing else gain_verdict_text(verdict, width, list(values.values())) if check.comparable
             else f"{verdict.value}: {check.reason}")
        )  # fmt: skip
    header = ["data set", "noise", "best hierarchical", "best tuned fixed", "test-accuracy gain", "95 % interval",
              "training, hierarchical", "training, fixed", "batched or single (hierarchical / fixed)",
              "verdict"]  # fmt: skip
    if not rows:
        absent = absences_by_panel(cells)
        why = "; ".join(f"{d} {n}: {absence.text}" for (d, n), absence in absent.items())
        return f"No panel has counted runs of both a hierarchical and a tuned fixed cell ({why}).", per_panel, checks
    note = (
        "\n\n*batched or single*: batched runs train 32 or so to a vectorised model (`pyro_bnn.batched`), the "
        "others one at a time. Where the two cells of a gain trained differently, *batched - single* is the test "
        "accuracy of batched minus one-by-one training measured on the same cells and seeds, the median over the "
        f"panel's 15 fixed-scale cells (5 seeds each, at the cpu profile's 1 000 steps) in `{BATCHED_CHECK}`: an "
        "offset the gain may carry beside its own, which its interval does not include (the cells of a panel share "
        "seeds, so that median's cells are not independent)."
        if crossed
        else ""
    )
    return markdown_table(header, rows) + note, per_panel, checks


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
