"""Tables, figures and verdicts of ``leaky-calibration`` from its run records.

The rules behind the verdicts (per-seed values compared with :func:`~pyro_bnn.reproduce.report.compare`, Welch's
t-test at level 0.05: a gap "is separated" when the seeds tell the two groups apart):

- **Comparability first** (:mod:`pyro_bnn.reproduce.comparability`): a Table 1 cell is judged only when every
  run of both activations converged (stopped by patience, or flat at the epoch cap) and each activation's mean
  accuracy lies within the tolerance of :data:`~pyro_bnn.reproduce.papers.leaky_calibration.COMPARABLE` of the
  paper's; otherwise it is *not comparable at this
  scale*, with the reason, and a headline counts the comparable cells only. A sweep curve is judged only when all
  its runs converged.
- **Table 1, per cell** (model, data set, objective), on the authors' ECE (10 bins, sampled-label frequencies):
  *holds* when Leaky's ECE is lower than ReLU's by a separated gap and Leaky's accuracy is at most
  :data:`ACCURACY_TOLERANCE` below ReLU's; *does not hold* when ReLU's ECE is lower by a separated gap, or Leaky is
  better calibrated but less accurate by more than the tolerance (separated); *inconclusive* otherwise (fewer than 2
  seeds, or the seed spread covers the gap). Per objective, over the comparable cells: *holds* when every one
  holds, *does not hold* when at least half of them do not, *inconclusive* otherwise; a cell without runs yet
  counts as inconclusive, so an unfinished grid never reads *holds*; no comparable cell: *not comparable*.
- **Slope sweep, per curve**: the ECE at slope 0 (ReLU) against the ECE at each slope farther than
  :data:`NEAR_ZERO` from 0, fixed contrasts at level 0.05 / (number of those slopes) (Bonferroni), and against those
  slopes' values pooled (one contrast at 0.05, which 2 seeds per slope can decide where a dozen Bonferroni contrasts
  cannot): *holds* when slope 0 is separated above every one of them, or has the highest mean ECE of the curve and
  is separated above the pool; *does not hold* when one of them, or the pool, is separated above slope 0;
  *inconclusive* otherwise. Over the curves the profile plans, as for Table 1.
- **Plateaus**: *holds* when every ReLU weight tensor has sampled weights with a plateau and no Leaky one has any;
  *does not hold* when the Leaky networks' pooled plateau fraction is at least ReLU's; *inconclusive* otherwise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.leaky_calibration.plan import (
    ACTIVATIONS,
    COMPARABLE,
    LEAKY,
    OBJECTIVES,
    PUBLISHED_TABLE_1,
)
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    CONFORMAL_NOTE,
    compare,
    format_mean_sd,
    markdown_table,
    mean_sd,
    metric_cells,
    overall_verdict,
    write_csv,
)
from pyro_bnn.reproduce.spec import Analysis, Headline, Profile, RunRecord, Section, Status, Verdict

ACCURACY_TOLERANCE = 0.02
"""How much lower Leaky's accuracy may be for "about equal accuracy" (the paper's Table 1 differs by up to 0.01)."""


NEAR_ZERO = 0.2
"""Slopes within this distance of 0 count as "near slope 0"."""

ECE_SAMPLED = "ece_sampled_10"
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


def _count(verdicts: list[Verdict]) -> str:
    return ", ".join(f"{sum(v is kind for v in verdicts)} {kind.value}" for kind in Verdict)


def table_1_cell(leaky: list[RunRecord], relu: list[RunRecord]) -> tuple[Verdict, str]:
    """The verdict of one Table 1 cell and its numbers (see the module docstring)."""
    ece = compare(_values(leaky, ECE_SAMPLED), _values(relu, ECE_SAMPLED))
    acc = compare(_values(leaky, "accuracy"), _values(relu, "accuracy"))
    se = "n/a" if math.isnan(ece.standard_error) else f"{ece.standard_error:.3f}"
    numbers = f"ECE gap Leaky - ReLU {ece.gap:+.3f} (se {se}), accuracy gap {acc.gap:+.3f}"
    if ece.separated and ece.gap > 0:
        return Verdict.DOES_NOT_HOLD, numbers + ": ReLU is better calibrated"
    if ece.separated and ece.gap < 0:
        if acc.gap < -ACCURACY_TOLERANCE and acc.separated:
            return Verdict.DOES_NOT_HOLD, numbers + ": Leaky is better calibrated but less accurate"
        if acc.gap >= -ACCURACY_TOLERANCE:
            return Verdict.HOLDS, numbers
        return Verdict.INCONCLUSIVE, numbers + ": Leaky is better calibrated, but may be less accurate"
    if min(len(leaky), len(relu)) < 2:
        return Verdict.INCONCLUSIVE, numbers + ": fewer than 2 seeds"
    return Verdict.INCONCLUSIVE, numbers + ": the seed spread covers the gap"


def table_1_check(
    leaky: list[RunRecord], relu: list[RunRecord], published: tuple[float, float, float, float]
) -> tuple[CellCheck, CellCheck]:
    """The comparability of a Table 1 cell's Leaky and ReLU runs against the paper's accuracies."""
    return COMPARABLE.check(leaky, published[0]), COMPARABLE.check(relu, published[1])


def _table_1(runs: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, list[Headline]]:
    table1 = [r for r in runs if r.config.activation in ACTIVATIONS]
    cells = _cells(table1, lambda r: (r.spec.tag("objective"), r.config.dataset, r.config.model, r.config.activation))
    write_csv(
        out / "table1.csv",
        [
            {
                "objective": r.spec.tag("objective"),
                "dataset": r.config.dataset,
                "model": r.config.model,
                "activation": r.config.activation,
                "seed": r.config.seed,
                "accuracy": r.metrics.get("accuracy"),
                "ece_sampled_10": r.metrics.get(ECE_SAMPLED),
                "ece_mean_15": r.metrics.get("ece"),
                "nll": r.metrics.get("nll"),
                **{key: r.metrics.get(key) for key, _ in CONFORMAL_COLUMNS},
                "epochs_run": r.metrics.get("epochs_run"),
                "seconds": round(r.seconds, 1),
            }
            for r in sorted(table1, key=lambda r: r.spec.label)
        ],
    )
    tables, headlines = [], []
    header = [
        "data set",
        "model",
        "accuracy Leaky",
        "accuracy ReLU",
        "ECE Leaky (10 bins, sampled)",
        "ECE ReLU (10 bins, sampled)",
        "ECE Leaky (15 bins, mean)",
        "ECE ReLU (15 bins, mean)",
        "coverage Leaky (α = 0.1)",
        "coverage ReLU (α = 0.1)",
        "set size Leaky",
        "set size ReLU",
        "paper: accuracy L / R, ECE L / R",
        "seeds L / R",
        "training Leaky",
        "training ReLU",
        "verdict",
    ]
    for objective in profile.settings.get("objectives", list(OBJECTIVES)):
        objective_name = OBJECTIVES[objective]
        rows, verdicts, reasons, comparable = [], [], [], 0
        for dataset in profile["datasets"]:
            for model in profile["models"]:
                leaky = cells.get((objective, dataset, model, LEAKY), [])
                relu = cells.get((objective, dataset, model, "relu"), [])
                published = PUBLISHED_TABLE_1[(dataset, model)]
                checks = table_1_check(leaky, relu, published)
                if not (leaky and relu):
                    verdict = Verdict.INCONCLUSIVE
                    status = "runs missing"
                elif not all(c.comparable for c in checks):
                    verdict = Verdict.NOT_COMPARABLE
                    named = zip(("Leaky", "ReLU"), checks, strict=True)
                    why = "; ".join(f"{name}: {c.reason}" for name, c in named if c.reason)
                    reasons.append(f"{model} on {dataset}: {verdict.value} ({why})")
                    status = verdict.value
                else:
                    verdict, why = table_1_cell(leaky, relu)
                    reasons.append(f"{model} on {dataset}: {verdict.value} ({why})")
                    status = verdict.value
                    comparable += 1
                verdicts.append(verdict)
                rows.append(
                    [
                        dataset,
                        model,
                        format_mean_sd(_values(leaky, "accuracy")),
                        format_mean_sd(_values(relu, "accuracy")),
                        format_mean_sd(_values(leaky, ECE_SAMPLED)),
                        format_mean_sd(_values(relu, ECE_SAMPLED)),
                        format_mean_sd(_values(leaky, "ece")),
                        format_mean_sd(_values(relu, "ece")),
                        *metric_cells(leaky, [COVERAGE]),
                        *metric_cells(relu, [COVERAGE]),
                        *metric_cells(leaky, [SET_SIZE]),
                        *metric_cells(relu, [SET_SIZE]),
                        "{:.2f} / {:.2f}, {:.3f} / {:.3f}".format(*published),
                        f"{len(leaky)} / {len(relu)}",
                        checks[0].summary,
                        checks[1].summary,
                        status,
                    ]
                )
        tables.append(
            f"**{objective_name}** (`kl_scale={objective}`)\n\n"
            + markdown_table(header, rows, align="ll" + "r" * (len(header) - 3) + "l")
        )
        overall = overall_verdict(verdicts)
        headlines.append(
            Headline(
                f"Leaky ReLU has lower ECE than ReLU at about equal accuracy, per cell of Table 1, under the "
                f"{objective_name}",
                overall,
                f"{comparable} of {len(verdicts)} cells comparable with the paper's. Cells: {_count(verdicts)}. "
                + "; ".join(reasons),
            )
        )
    text = (
        "Test accuracy (mean probabilities) and ECE, mean ± sd over seeds. The paper's numbers (Leaky / ReLU) use "
        "the authors' objective and ECE. Guide `flat:0.1,loc=median` (AutoDiagonalNormal's start: prior-median "
        "locations, scale 0.1) trained with the authors' estimator, Pyro's `Trace_ELBO` (one weight draw per step, "
        "the KL by Monte Carlo); the fused objective is an ablation (its own section). Verdict rule: module "
        "docstring of `pyro_bnn.reproduce.papers.leaky_calibration.analysis`. "
        + COMPARABLE.describe()
        + " "
        + CONFORMAL_NOTE
    )
    return Section("Table 1: accuracy and ECE", text, tables, csv_files=["table1.csv"]), headlines


def _ablation(records: list[RunRecord], runs: list[RunRecord], profile: Profile, out: Path) -> Section | None:
    """The fused objective against the authors' estimator on the same cells (authors' objective), or None when the
    profile plans no ablation."""
    models = profile.settings.get("ablation_models", [])
    if not models:
        return None
    fused = [r for r in records if r.spec.tag("part") == "ablation" and r.status is Status.DONE]
    trace = [r for r in runs if r.spec.tag("objective") == "paper" and r.config.activation in ACTIVATIONS]
    key = lambda r: (r.config.model, r.config.dataset, r.config.activation)  # noqa: E731
    fused_cells, trace_cells = _cells(fused, key), _cells(trace, key)
    rows, csv_rows, gaps = [], [], []
    for model in models:
        for dataset in profile["datasets"]:
            for activation, name in ACTIVATIONS.items():
                a, b = (
                    fused_cells.get((model, dataset, activation), []),
                    trace_cells.get((model, dataset, activation), []),
                )
                gap = compare(_values(a, ECE_SAMPLED), _values(b, ECE_SAMPLED))
                if a and b:
                    gaps.append(gap.gap)
                se = "—" if math.isnan(gap.standard_error) else f"{gap.standard_error:.3f}"
                rows.append([
                    model, dataset, name,
                    format_mean_sd(_values(b, ECE_SAMPLED)), format_mean_sd(_values(a, ECE_SAMPLED)),
                    f"{gap.gap:+.3f} (se {se}{', separated' if gap.separated else ''})" if a and b else "—",
                    format_mean_sd(_values(b, "accuracy")), format_mean_sd(_values(a, "accuracy")),
                    f"{len(b)} / {len(a)}",
                ])  # fmt: skip
                csv_rows += [
                    {"model": model, "dataset": dataset, "activation": activation, "estimator": r.spec.tag("estimator"),
                     "seed": r.config.seed, "accuracy": r.metrics.get("accuracy"),
                     "ece_sampled_10": r.metrics.get(ECE_SAMPLED), "epochs_run": r.metrics.get("epochs_run")}
                    for r in sorted(a + b, key=lambda r: (r.spec.tag("estimator") or "", r.config.seed))
                ]  # fmt: skip
    write_csv(out / "estimator.csv", csv_rows)
    header = ["model", "data set", "activation", "ECE authors' estimator", "ECE fused", "gap fused - authors'",
              "accuracy authors'", "accuracy fused", "seeds authors' / fused"]  # fmt: skip
    measured = (
        f"Measured effect of the fused objective on the authors' ECE, mean over the {len(gaps)} cells with both: "
        f"{sum(gaps) / len(gaps):+.3f}."
        if gaps
        else "No cell has runs of both estimators yet."
    )
    text = (
        "The same cells (authors' objective) trained with the fused objective instead of the authors' `Trace_ELBO`: "
        "antithetic weight draws and the closed-form KL, equal in expectation, with less gradient noise. Gap: the "
        "fused runs' ECE (10 bins, sampled labels) minus the authors' estimator's, with its standard error over "
        f"seeds; 'separated' at level 0.05. {measured}"
    )
    title = "Estimator ablation: the fused objective against the authors' Trace_ELBO"
    return Section(title, text, [markdown_table(header, rows, "lll" + "r" * 6)], csv_files=["estimator.csv"])


def _sweep(runs: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, Headline]:
    # Table 1's ReLU runs are the sweep's slope 0; only the sweep's seeds are used, so every slope has as many.
    sweep = [
        r
        for r in runs
        if r.spec.tag("objective") == "paper"
        and _slope(r.config.activation) in profile["slopes"]
        and r.config.seed < profile["sweep_seeds"]
    ]
    curves = _cells(sweep, lambda r: (r.config.model, r.config.dataset))
    rows, csv_rows, verdicts, reasons = [], [], [], []
    figure = Figure(figsize=(10, 4))
    axes = figure.subplots(1, 2)
    for model in profile["sweep_models"]:
        for dataset in profile["sweep_datasets"]:
            by_slope = _cells(curves.get((model, dataset), []), lambda r: (_slope(r.config.activation),))
            slopes = sorted(s for (s,) in by_slope)
            ece = {s: _values(by_slope[(s,)], ECE_SAMPLED) for s in slopes}
            acc = {s: _values(by_slope[(s,)], "accuracy") for s in slopes}
            if slopes:
                for ax, values in zip(axes, (ece, acc), strict=True):
                    means = [mean_sd(values[s])[0] for s in slopes]
                    sds = [mean_sd(values[s])[1] for s in slopes]
                    ax.errorbar(slopes, means, yerr=sds, marker="o", capsize=3, label=f"{model}, {dataset}")
            for s in slopes:
                rows.append([model, dataset, f"{s:g}", format_mean_sd(ece[s]), format_mean_sd(acc[s])])
                csv_rows += [
                    {
                        "model": model,
                        "dataset": dataset,
                        "slope": s,
                        "seed": r.config.seed,
                        "ece_sampled_10": r.metrics.get(ECE_SAMPLED),
                        "accuracy": r.metrics.get("accuracy"),
                    }
                    for r in sorted(by_slope[(s,)], key=lambda r: r.config.seed)
                ]
            verdict, why = _sweep_curve(ece)
            check = COMPARABLE.check(curves.get((model, dataset), []), None)
            if len(slopes) < len(profile["slopes"]):
                verdict, why = Verdict.INCONCLUSIVE, f"{len(slopes)} of {len(profile['slopes'])} slopes have runs"
            elif not check.comparable:
                verdict, why = Verdict.NOT_COMPARABLE, f"{check.reason}; {why}"
            verdicts.append(verdict)
            reasons.append(f"{model} on {dataset}: {verdict.value} ({why})")
    for ax, label in zip(axes, ("ECE (10 bins, sampled labels)", "test accuracy"), strict=True):
        ax.set_xlabel("Leaky ReLU negative slope (0: ReLU)")
        ax.set_ylabel(label)
        ax.axvline(0, color="grey", lw=0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    figure.suptitle("ECE and accuracy against the Leaky ReLU slope (mean ± sd over seeds)")
    save_figure(figure, out / "slopes.png")
    write_csv(out / "slopes.csv", csv_rows)
    table = markdown_table(["model", "data set", "slope", "ECE (10 bins, sampled)", "accuracy"], rows, "llrrr")
    headline = Headline(
        "ECE is highest at slope 0 (ReLU)",
        overall_verdict(verdicts),
        f"Curves: {_count(verdicts)}. " + "; ".join(reasons),
    )
    text = f"Authors' objective, slopes {profile['slopes']}, seeds 0 to {profile['sweep_seeds'] - 1} at every slope."
    title = "ECE against the Leaky ReLU slope (the paper's Fig. 2)"
    return Section(title, text, [table], ["slopes.png"], ["slopes.csv"]), headline


def _sweep_curve(ece: dict[float, list[float]]) -> tuple[Verdict, str]:
    """The verdict of one sweep curve from ``{slope: per-seed ECE}`` (see the module docstring)."""
    zero = ece.get(0.0, [])
    far = {s: v for s, v in ece.items() if abs(s) > NEAR_ZERO + 1e-9 and v}
    if not zero or not far:
        return Verdict.INCONCLUSIVE, "the sweep lacks slope 0 or slopes away from it"
    alpha = 0.05 / len(far)
    contrasts = {s: compare(zero, v, alpha=alpha) for s, v in far.items()}
    pooled = compare(zero, [value for values in far.values() for value in values])
    top = max(far, key=lambda s: mean_sd(far[s])[0])
    numbers = (
        f"ECE at slope 0: {mean_sd(zero)[0]:.3f}; highest away from 0: {mean_sd(far[top])[0]:.3f} at {top:g}; "
        f"slope 0 minus the far slopes pooled: {pooled.gap:+.3f}"
    )
    above = [s for s, c in contrasts.items() if c.separated and c.gap < 0]
    if above:
        return Verdict.DOES_NOT_HOLD, numbers + f"; separated above slope 0 at {', '.join(f'{s:g}' for s in above)}"
    if pooled.separated and pooled.gap < 0:
        return Verdict.DOES_NOT_HOLD, numbers + "; the far slopes pooled are separated above slope 0"
    if all(c.separated and c.gap > 0 for c in contrasts.values()):
        return Verdict.HOLDS, numbers + f"; slope 0 separated above all {len(far)} slopes farther than {NEAR_ZERO:g}"
    if pooled.separated and pooled.gap > 0 and mean_sd(zero)[0] > mean_sd(far[top])[0]:
        return Verdict.HOLDS, numbers + ": slope 0 has the highest mean and is separated above the far slopes pooled"
    below = sum(c.separated and c.gap > 0 for c in contrasts.values())
    return Verdict.INCONCLUSIVE, numbers + f"; slope 0 separated above {below} of {len(far)} slopes"


def _decalibration(runs: list[RunRecord], profile: Profile, out: Path) -> Section:
    table1 = [r for r in runs if r.config.activation in ACTIVATIONS and r.spec.tag("objective") == "paper"]
    cells = _cells(table1, lambda r: (r.config.model, r.config.dataset))
    figure = Figure(figsize=(10, 3.2 * max(1, len(cells))))
    axes = np.atleast_2d(figure.subplots(max(1, len(cells)), 2, squeeze=False))
    rows = []
    for row_axes, ((model, dataset), cell_runs) in zip(axes, sorted(cells.items()), strict=False):
        for activation, name in ACTIVATIONS.items():
            histories = [r.history for r in cell_runs if r.config.activation == activation and r.history]
            rises = [_rises_after_minimum(h) for h in histories]
            rows.append([model, dataset, name, f"{sum(rises)} / {len(rises)}"])
            for ax, key in zip(row_axes, ("val_accuracy", "val_ece"), strict=True):
                for i, history in enumerate(histories):
                    epochs = [e["epoch"] for e in history if key in e]
                    ax.plot(
                        epochs,
                        [e[key] for e in history if key in e],
                        color="C0" if activation == "relu" else "C1",
                        alpha=0.8,
                        label=name if i == 0 else None,
                    )
                ax.set_title(f"{model}, {dataset}: {key.replace('_', ' ')}", fontsize=9)
                ax.set_xlabel("epoch")
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, out / "decalibration.png")
    header = ["model", "data set", "activation", "runs whose validation ECE rose after its minimum"]
    table = markdown_table(header, rows, "lllr")
    text = (
        "Validation accuracy and ECE (15 bins, mean probabilities) per epoch under the authors' objective, one line "
        "per seed. \"Rose\" means the last epoch's validation ECE exceeds the run's minimum by more than 0.005 "
        "(the paper's Fig. 3 shows ReLU's ECE falling, then rising before accuracy has converged)."
    )
    return Section("Decalibration during training (the paper's Fig. 3)", text, [table], ["decalibration.png"])


def _rises_after_minimum(history: list[dict]) -> bool:
    ece = [e["val_ece"] for e in history if "val_ece" in e]
    return bool(ece) and ece[-1] > min(ece) + 0.005


def _plateaus(records: list[RunRecord], out: Path) -> tuple[Section, Headline]:
    runs = [r for r in records if r.spec.tag("part") == "plateaus" and r.status is Status.DONE]
    rows, csv_rows = [], []
    pooled: dict[str, list[int]] = {a: [0, 0] for a in ACTIVATIONS}
    every_relu_layer, any_leaky = True, False
    figure = Figure(figsize=(8, 3.5))
    ax = figure.subplots()
    dead_inputs = None
    first_layer: dict[str, float] = {}
    for i, run in enumerate(sorted(runs, key=lambda r: (r.config.model, r.config.activation))):
        fractions, sampled = run.metrics["plateau_fraction"], run.metrics["plateau_sampled"]
        name = ACTIVATIONS.get(run.config.activation, run.config.activation)
        dead_inputs = run.metrics.get("dead_input_fraction", dead_inputs)
        for position, (layer, fraction) in enumerate(fractions.items()):
            flagged = round(fraction * sampled[layer])
            first = position == 0
            note = " (first layer: not judged)" if first else ""
            rows.append([run.config.model, name, layer + note, f"{flagged}/{sampled[layer]} ({fraction:.0%})"])
            csv_rows.append(
                {
                    "model": run.config.model,
                    "activation": run.config.activation,
                    "layer": layer,
                    "with_plateau": flagged,
                    "sampled": sampled[layer],
                    "fraction": fraction,
                }
            )
            if first:
                first_layer[run.config.activation] = fraction
                continue  # its plateaus include weights on inputs that are 0 on every image, flat for any activation
            pooled.setdefault(run.config.activation, [0, 0])
            pooled[run.config.activation][0] += flagged
            pooled[run.config.activation][1] += sampled[layer]
            if run.config.activation == "relu" and flagged == 0:
                every_relu_layer = False
            if run.config.activation == LEAKY and flagged:
                any_leaky = True
        width = 0.8 / len(runs)
        positions = np.arange(len(fractions)) + width * i
        ax.bar(positions, list(fractions.values()), width=width, label=f"{run.config.model} {name}")
        ax.set_xticks(np.arange(len(fractions)) + 0.4 - width / 2, list(fractions), fontsize=8)
    ax.set_ylabel("sampled weights with a plateau")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    save_figure(figure, out / "plateaus.png")
    write_csv(out / "plateaus.csv", csv_rows)
    relu_fraction = pooled["relu"][0] / max(1, pooled["relu"][1])
    leaky_fraction = pooled[LEAKY][0] / max(1, pooled[LEAKY][1])
    if not pooled["relu"][1] or not pooled[LEAKY][1]:
        verdict, why = Verdict.INCONCLUSIVE, "the plateau runs have not finished"
    elif every_relu_layer and not any_leaky:
        verdict, why = Verdict.HOLDS, "every judged ReLU weight tensor has weights with a plateau, no Leaky one has any"
    elif leaky_fraction >= relu_fraction:
        verdict, why = Verdict.DOES_NOT_HOLD, "the Leaky networks have at least as many plateaus as the ReLU ones"
    else:
        verdict, why = Verdict.INCONCLUSIVE, "some ReLU layers show none, or some Leaky weights show plateaus"
    reason = (
        f"Pooled over the layers after the first: ReLU {relu_fraction:.0%}, Leaky {leaky_fraction:.0%} of the "
        f"sampled weights; {why}."
    )
    if first_layer:
        shown = ", ".join(f"{ACTIVATIONS.get(a, a)} {f:.0%}" for a, f in sorted(first_layer.items()))
        reason += f" First layer (not judged, see the section): {shown}."
    dead = "" if dead_inputs is None else f" ({dead_inputs:.1%} of the input pixels are 0 on every slice image here)"
    text = (
        "Deterministic networks (`--guide mle`) trained on MNIST images; the likelihood of those training images as "
        "one sampled weight varies (`pyro-bnn diagnose --slices`), flagged when it has a flat plateau. The first "
        "layer is shown but not judged: a weight on an input pixel that is 0 on every image has an exactly flat "
        f"likelihood under any activation{dead}, which is a property of the data, not of ReLU; the paper's "
        "mechanism (Proposition 1: inputs h >= 0 from a ReLU) acts on the layers after it."
    )
    header = ["model", "activation", "weight tensor", "sampled weights with a plateau"]
    table = markdown_table(header, rows, "lllr")
    title = "Flat plateaus of the likelihood (the paper's section 2.1)"
    section = Section(title, text, [table], ["plateaus.png"], ["plateaus.csv"])
    return section, Headline("ReLU networks have flat likelihood plateaus and Leaky ReLU ones do not", verdict, reason)


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines for ``leaky-calibration`` (figures and CSV files written to ``out``)."""
    runs = _bnn_runs(records)
    table, headlines = _table_1(runs, profile, out)
    sections = [table]
    ablation = _ablation(records, runs, profile, out)
    if ablation is not None:
        sections.append(ablation)
    if profile["slopes"]:  # a profile of Table 1 alone (full-3fc) plans no sweep and no plateaus
        sweep, sweep_headline = _sweep(runs, profile, out)
        sections.append(sweep)
        headlines.append(sweep_headline)
    sections.append(_decalibration(runs, profile, out))
    if profile["plateau_models"]:
        plateaus, plateau_headline = _plateaus(records, out)
        sections.append(plateaus)
        headlines.append(plateau_headline)
    return Analysis(sections, headlines)
