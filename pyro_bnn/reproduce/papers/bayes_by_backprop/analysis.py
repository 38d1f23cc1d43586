"""Tables, figures and verdicts of ``bayes-by-backprop`` from its run records.

The test error of a run is ``1 - accuracy`` of its 10-sample predictive at the best epoch (by validation accuracy).
Groups of per-seed values are compared with :func:`~pyro_bnn.reproduce.report.compare` (Welch's t-test at level
0.05; "separated" when the seeds tell the groups apart):

- **Comparability first** (:mod:`pyro_bnn.reproduce.comparability`): a comparison is judged only when every run of
  both its groups converged (the paper's 600 epochs, or validation accuracy flat over the last epochs at the cap)
  and each group's mean accuracy lies within the tolerance of
  :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.COMPARABLE` of its published one
  (:data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.PUBLISHED_ACCURACY`; a group without one is checked for
  convergence alone); otherwise it is *not comparable at this scale*, with the reason, never *does not hold*, and a
  headline counts the comparable cells only and says how many there were.
- **Scale mixture against Gaussian** (uniform weighting, /126 inputs): *holds* when the ``pi = 0.5`` mixture's test
  error is separated below the Gaussian prior's, *does not hold* when it is separated above; otherwise *no effect
  within ±x* when the 95 % interval of the gap lies within
  :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.NO_EFFECT_WITHIN` of zero (x: its farther end), else
  *inconclusive*. (The ``pi = 0.25`` mixture is reported beside it.)
- **Blundell weighting**, per prior (/126 inputs): Blundell's against uniform weighting, the same rule; over the
  comparable priors (:func:`~pyro_bnn.reproduce.report.overall_verdict`), *holds* when every one holds, *does not
  hold* when at least half do not, *no effect* when every one shows none, *inconclusive* otherwise.
- **Pruning** (the ``pi = 0.5`` mixture, uniform weighting, /126 inputs): at 75 % and at 95 % pruned, the test
  error after pruning by ``|mu| / sigma`` against by ``|mu|``: *holds* when signal-to-noise is separated below at
  both, *does not hold* when magnitude is separated below at one of them, *no effect* when neither fraction shows
  one, *inconclusive* otherwise; judged only when the pruned network's cell is comparable.

A cell without finished runs makes its verdict inconclusive, so an unfinished grid never reads *holds*.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn._io import write_json_atomically
from pyro_bnn.diagnostics.weight_stats import statistics_from_dict
from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.figures import reliability_figure
from pyro_bnn.reproduce.papers.bayes_by_backprop.plan import (
    BASE_NORMALIZATION,
    BASE_PRIOR,
    BASE_WEIGHTING,
    COMPARABLE,
    NO_EFFECT_WITHIN,
    NORMALIZATIONS,
    PRIOR_LABELS,
    PUBLISHED,
    PUBLISHED_ACCURACY,
    WEIGHTINGS,
)
from pyro_bnn.reproduce.planned import Analysis, Headline, Profile, RunRecord, Section, Status, Verdict
from pyro_bnn.reproduce.records import RUNS
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

PRUNING_CLAIM_FRACTIONS = (0.75, 0.95)


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
    from scipy.stats import t

    mean_a, sd_a, n_a = mean_sd(a)
    mean_b, sd_b, n_b = mean_sd(b)
    if n_a < 2 or n_b < 2:
        return math.nan
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    if va + vb == 0:
        return abs(mean_a - mean_b)
    dof = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    return abs(mean_a - mean_b) + float(t.ppf(1 - alpha / 2, dof)) * math.sqrt(va + vb)


def _verdict(a: list[float], b: list[float], a_name: str, b_name: str) -> tuple[Verdict, str, float | None]:
    """Is ``a`` (test errors) lower than ``b``? The verdict, the numbers, and for *no effect* the interval's
    half-width (see the module docstring; call it on comparable cells only)."""
    result = compare(a, b)
    se = "n/a" if math.isnan(result.standard_error) else f"{100 * result.standard_error:.2f}"
    numbers = (
        f"test error {a_name} {_pct(a)} % against {b_name} {_pct(b)} % (gap {100 * result.gap:+.2f} points, se {se})"
    )
    if result.separated:
        return (Verdict.HOLDS if result.gap < 0 else Verdict.DOES_NOT_HOLD), numbers, None
    if min(len(a), len(b)) < 2:
        return Verdict.INCONCLUSIVE, numbers + ": fewer than 2 seeds", None
    within = _interval(a, b)
    if within <= NO_EFFECT_WITHIN:
        return (
            Verdict.NO_EFFECT,
            numbers + f": the 95 % interval of the gap lies within ±{100 * within:.2f} points",
            within,
        )
    return (
        Verdict.INCONCLUSIVE,
        numbers + f": the seed spread covers the gap (95 % interval ±{100 * within:.2f} points)",
        None,
    )


def cell_check(runs: Sequence[RunRecord], cell: tuple[str, str, str]) -> CellCheck:
    """The comparability of the runs of ``cell`` ``(prior, weighting, inputs)`` under
    :data:`~pyro_bnn.reproduce.papers.bayes_by_backprop.COMPARABLE`, against the cell's published accuracy if any."""
    return COMPARABLE.check(runs, PUBLISHED_ACCURACY.get(cell))


def _judged(
    arms: Sequence[tuple[str, tuple[str, str, str], list[RunRecord]]], a: list[float], b: list[float]
) -> tuple[Verdict, str, float | None]:
    """The verdict of one comparison of ``a`` (test errors of the first arm) against ``b``: *not comparable at this
    scale* unless both ``arms`` ``(name, cell, runs)`` are (their reasons and the numbers), else :func:`_verdict`."""
    verdict, numbers, within = _verdict(a, b, arms[0][0], arms[1][0])
    if not all(runs for _, _, runs in arms):
        return verdict, numbers, within  # runs missing: inconclusive, as an unfinished grid
    checks = [(name, cell_check(runs, cell)) for name, cell, runs in arms]
    if all(check.comparable for _, check in checks):
        return verdict, numbers, within
    why = "; ".join(f"{name}: {check.reason}" for name, check in checks if check.reason)
    return Verdict.NOT_COMPARABLE, f"{why}; {numbers}", None


def _comparable_count(verdicts: Sequence[Verdict], noun: str = "cells") -> str:
    comparable = sum(v is not Verdict.NOT_COMPARABLE for v in verdicts)
    return f"{comparable} of {len(verdicts)} {noun} comparable with the paper's"


def _training_cells(runs: Sequence[RunRecord], cell: tuple[str, str, str]) -> list[str]:
    """The table cells ``training`` and ``comparable`` of ``cell``'s runs."""
    check = cell_check(runs, cell)
    return [check.summary, "yes" if check.comparable else f"no: {check.reason}"]


def _error_table(cells, profile: Profile, out: Path) -> tuple[Section, list[Headline]]:
    rows, csv_rows = [], []
    for prior in profile["priors"]:
        for weighting in profile["weightings"]:
            runs = cells.get((prior, weighting, BASE_NORMALIZATION), [])
            published = ""
            if prior == "gaussian" and weighting == "uniform":
                published = f"{100 * PUBLISHED['gaussian_error']:.2f} (Singh); {100 * PUBLISHED['blundell_error']:.2f}"
                published += " (Blundell, as Singh quotes it)"
            elif (prior, weighting) == (BASE_PRIOR, BASE_WEIGHTING):
                published = f"{100 * PUBLISHED['pruning'][0.0][0]:.2f} (Singh's pruning baseline)"
            rows.append(
                [
                    PRIOR_LABELS[prior],
                    WEIGHTINGS[weighting],
                    _pct(_errors(runs)),
                    _pct(_errors(runs, "posterior_mean_accuracy")),
                    *metric_cells(runs),
                    ", ".join(str(_best_epoch(r)) for r in runs) or "—",
                    len(runs),
                    published or "—",
                    *_training_cells(runs, (prior, weighting, BASE_NORMALIZATION)),
                ]
            )
    for (prior, weighting, normalization), runs in sorted(cells.items()):
        csv_rows += [
            {
                "prior": prior,
                "weighting": weighting,
                "normalization": normalization,
                "seed": r.config.seed,
                "test_error": 1 - r.metrics["accuracy"],
                "posterior_mean_test_error": 1 - r.metrics["posterior_mean_accuracy"],
                "test_nll": r.metrics.get("nll"),
                "test_ece": r.metrics.get("ece"),
                **{key: r.metrics.get(key) for key, _ in CONFORMAL_COLUMNS},
                "best_epoch": _best_epoch(r),
                "epochs_run": r.metrics.get("epochs_run"),
                "train_time_s": r.metrics.get("train_time_s"),
            }
            for r in runs
        ]
    write_csv(out / "test-errors.csv", csv_rows)
    table = markdown_table(
        [
            "prior",
            "KL weighting",
            "test error % (10 samples)",
            "test error % (posterior mean)",
            "coverage (α = 0.1)",
            "set size",
            "best epochs",
            "seeds",
            "published %",
            "training",
            "comparable",
        ],
        rows,
        "llrrrrrrlll",
    )

    base_cell, gaussian_cell = (BASE_PRIOR, "uniform", BASE_NORMALIZATION), ("gaussian", "uniform", BASE_NORMALIZATION)
    base, gaussian = cells.get(base_cell, []), cells.get(gaussian_cell, [])
    arms = (("scale mixture (π = 0.5)", base_cell, base), ("Gaussian", gaussian_cell, gaussian))
    verdict, numbers, within = _judged(arms, _errors(base), _errors(gaussian))
    other = cells.get(("mixture-0.25", "uniform", BASE_NORMALIZATION), [])
    if other:
        numbers += f"; the π = 0.25 mixture: {_pct(_errors(other))} %"
    prior_headline = Headline(
        "The scale-mixture prior gives a lower test error than the Gaussian prior (Blundell et al.; Singh found the "
        "opposite)",
        verdict,
        f"{_comparable_count([verdict])}. {numbers}",
        interval=within,
    )
    verdicts, reasons, intervals = [], [], []
    for prior in profile["priors"]:
        blundell_cell, uniform_cell = (prior, "blundell", BASE_NORMALIZATION), (prior, "uniform", BASE_NORMALIZATION)
        blundell, uniform = cells.get(blundell_cell, []), cells.get(uniform_cell, [])
        arms = (("Blundell", blundell_cell, blundell), ("uniform", uniform_cell, uniform))
        verdict, numbers, within = _judged(arms, _errors(blundell), _errors(uniform))
        if verdict is not Verdict.NOT_COMPARABLE and uniform_cell not in PUBLISHED_ACCURACY:
            numbers += "; no published accuracy for this prior, judged on convergence alone"
        verdicts.append(verdict)
        intervals.append(within)
        reasons.append(f"{PRIOR_LABELS[prior]}: {verdict.value} ({numbers})")
    overall = overall_verdict(verdicts)
    weighting_headline = Headline(
        "Blundell's KL weighting lowers the test error (Singh: by 0.3 points)",
        overall,
        f"{_comparable_count(verdicts, 'priors')}. " + "; ".join(reasons),
        interval=max((x for x in intervals if x is not None), default=None) if overall is Verdict.NO_EFFECT else None,
    )
    all_runs = [r for runs in cells.values() for r in runs]
    late = sum(1 for r in all_runs if (_best_epoch(r) or 0) >= profile["epochs"] - 1)
    text = (
        f"Test error of the 10-sample predictive and of the posterior-mean network at the best of "
        f"{profile['epochs']} epochs (by validation accuracy on {profile['val_images']:,} held-out training images), "
        f"mean ± sd over seeds, inputs /126. The published runs trained 600 epochs; here {late} of "
        f"{len(all_runs)} runs had their best epoch among the last two"
        + (
            " (the error curves below): their validation accuracy was still rising when they stopped, and the "
            "*training* column says whether it rose by more than the comparability rule's flatness margin."
            if late * 2 > len(all_runs)
            else "."
        )
        + " *Training*: the runs' convergence (`converged k/n`), epochs and mean test accuracy against the published "
        "one where the papers give it; *comparable*: whether the cell may be judged, and why not. "
        + COMPARABLE.describe()
        + " "
        + CONFORMAL_NOTE
    )
    return Section("Test error by prior and KL weighting", text, [table], [], ["test-errors.csv"]), [
        prior_headline,
        weighting_headline,
    ]


def _normalization_table(cells, profile: Profile) -> Section:
    rows = []
    for normalization in profile["normalizations"]:
        runs = cells.get((BASE_PRIOR, BASE_WEIGHTING, normalization), [])
        rows.append(
            [
                NORMALIZATIONS[normalization],
                _pct(_errors(runs)),
                _pct(_errors(runs, "posterior_mean_accuracy")),
                len(runs),
                *_training_cells(runs, (BASE_PRIOR, BASE_WEIGHTING, normalization)),
            ]
        )
    table = markdown_table(
        ["inputs", "test error % (10 samples)", "test error % (posterior mean)", "seeds", "training", "comparable"],
        rows,
        "lrrrll",
    )
    text = (
        f"{PRIOR_LABELS[BASE_PRIOR]}, {WEIGHTINGS[BASE_WEIGHTING]} KL weighting. Singh: /126 was 0.1-0.2 points "
        "better than the other two."
    )
    return Section("Input scaling", text, [table])


def _curves(cells, profile: Profile, out: Path) -> Section:
    figure = Figure(figsize=(11, 4), layout="constrained")
    left, right = figure.subplots(1, 2)
    for (prior, weighting, normalization), runs in sorted(cells.items()):
        curves = [[1 - e["val_accuracy"] for e in r.history if e.get("val_accuracy") is not None] for r in runs]
        length = min((len(c) for c in curves), default=0)
        if not length:
            continue
        mean = np.mean([c[:length] for c in curves], axis=0) * 100
        epochs = np.arange(1, length + 1)
        if normalization == BASE_NORMALIZATION:
            style = "-" if weighting == "uniform" else "--"
            left.plot(epochs, mean, style, marker=".", label=f"{prior}, {weighting}")
        if (prior, weighting) == (BASE_PRIOR, BASE_WEIGHTING):
            right.plot(epochs, mean, marker=".", label=NORMALIZATIONS[normalization])
    for ax, title in ((left, "prior and KL weighting (/126 inputs)"), (right, f"input scaling ({BASE_PRIOR})")):
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation error % (mean over seeds)")
        ax.set_title(title, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    figure.suptitle("Error during training (the paper's Fig. 1a)")
    save_figure(figure, out / "error-curves.png")
    text = (
        "Error of the 10-sample predictive on the held-out validation images after every epoch (the test set is "
        "scored once, at the best epoch). Flat tails mean the runs had converged at this budget."
    )
    return Section("Error curves", text, figures=["error-curves.png"])


WEIGHT_HISTOGRAMS = "weight-histograms.json"
"""The histograms the weight figure draws, kept beside the report: the runs' ``weight_stats.json`` files are not
committed with the results, so a report rebuilt from a clean checkout reads them from here."""


def _picked_histograms(out: Path, record: RunRecord | None) -> list[dict] | None:
    """The first layer's mu and SNR histograms of ``record`` after its first, middle and last epoch."""
    if record is None:
        return None
    path = out / RUNS / record.spec.run_id / "weight_stats.json"
    if not path.exists():
        return None
    history = json.loads(path.read_text())
    picked = []
    for index in sorted({0, len(history) // 2, len(history) - 1}):
        layers = statistics_from_dict(history[index]["layers"])
        first = next(iter(layers.values())).weights
        picked.append({"epoch": history[index]["epoch"], "mu": first.mu.to_dict(), "snr_db": first.snr_db.to_dict()})
    return picked


def _histograms(cells, out: Path) -> Section:
    """The posterior means of the weights over epochs for the Gaussian and the first mixture prior (Figs. 1b/1c)."""
    histories = {}
    for prior in ("gaussian", BASE_PRIOR):
        record = next(iter(cells.get((prior, "uniform", BASE_NORMALIZATION), [])), None)
        picked = _picked_histograms(out, record)
        if picked:
            histories[prior] = picked
    if histories:
        write_json_atomically(out / WEIGHT_HISTOGRAMS, histories)
    elif (out / WEIGHT_HISTOGRAMS).exists():
        histories = json.loads((out / WEIGHT_HISTOGRAMS).read_text())
    if not histories:
        return Section("Weight distributions over epochs (Figs. 1b, 1c)", "No run has weight statistics yet.")
    figure = Figure(figsize=(11, 4 * len(histories)), layout="constrained")
    axes = figure.subplots(len(histories), 2, squeeze=False)
    for row, (prior, picked) in zip(axes, histories.items(), strict=True):
        for entry in picked:
            for ax, key, xlabel in ((row[0], "mu", "posterior mean μ"), (row[1], "snr_db", "|μ|/σ (dB)")):
                edges = np.asarray(entry[key]["edges"])
                counts = np.asarray(entry[key]["counts"], dtype=float)
                ax.plot((edges[:-1] + edges[1:]) / 2, counts / max(1.0, counts.sum()), label=f"epoch {entry['epoch']}")
                ax.set_xlabel(xlabel)
        row[0].set_title(f"{PRIOR_LABELS[prior]}: first layer's weights", fontsize=10)
        row[1].set_title("signal-to-noise of the same weights", fontsize=10)
        for ax in row:
            ax.set_ylabel("fraction of weights")
            ax.legend(fontsize=8)
    save_figure(figure, out / "weight-histograms.png")
    text = (
        "Histograms of the first layer's posterior means and signal-to-noise ratios (78 % of the weights) after "
        "the first, middle and last epoch, first seed, uniform weighting, /126 inputs. Singh: the mixture prior "
        "gives a spiked distribution, the Gaussian a wide one."
    )
    return Section(
        "Weight distributions over epochs (Figs. 1b, 1c)",
        text,
        figures=["weight-histograms.png"],
        csv_files=[WEIGHT_HISTOGRAMS],
    )


def _pruning(cells, profile: Profile, out: Path) -> tuple[Section, Headline]:
    cell = (BASE_PRIOR, BASE_WEIGHTING, BASE_NORMALIZATION)
    runs = [r for r in cells.get(cell, []) if "pruning" in r.metrics]
    check = cell_check(runs, cell)
    by_fraction: dict[float, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    csv_rows = []
    for run in runs:
        for row in run.metrics["pruning"]:
            by_fraction[row["fraction"]]["snr"].append(row["error_snr"])
            by_fraction[row["fraction"]]["magnitude"].append(row["error_magnitude"])
            csv_rows.append({"seed": run.config.seed, **row})
    write_csv(out / "pruning.csv", csv_rows)
    rows = []
    for fraction in profile["prune_fractions"]:
        errors = by_fraction.get(fraction, {})
        published = PUBLISHED["pruning"].get(fraction)
        rows.append(
            [
                f"{100 * fraction:g} %",
                _pct(errors.get("magnitude", [])),
                _pct(errors.get("snr", [])),
                "—" if published is None else f"{100 * published[0]:.2f}",
                "—" if published is None else f"{100 * published[1]:.2f}",
            ]
        )
    table = markdown_table(
        ["pruned", "naive |μ| (ours)", "|μ|/σ (ours)", "naive (Singh)", "|μ|/σ (Singh)"], rows, "lrrrr"
    )
    verdicts, reasons, intervals = [], [], []
    for fraction in PRUNING_CLAIM_FRACTIONS:
        errors = by_fraction.get(fraction, {})
        verdict, numbers, within = _verdict(errors.get("snr", []), errors.get("magnitude", []), "|μ|/σ", "|μ|")
        verdicts.append(verdict)
        intervals.append(within)
        reasons.append(f"{100 * fraction:g} % pruned: {numbers}")
    interval = None
    if runs and not check.comparable:
        verdict = Verdict.NOT_COMPARABLE
        reasons.insert(0, f"the pruned networks: {check.reason}")
    elif all(v is Verdict.HOLDS for v in verdicts):
        verdict = Verdict.HOLDS
    elif any(v is Verdict.DOES_NOT_HOLD for v in verdicts):
        verdict = Verdict.DOES_NOT_HOLD
    elif all(v is Verdict.NO_EFFECT for v in verdicts):
        verdict, interval = Verdict.NO_EFFECT, max(x for x in intervals if x is not None)
    else:
        verdict = Verdict.INCONCLUSIVE
    headline = Headline(
        "Pruning by signal-to-noise |μ|/σ keeps a lower test error than pruning by |μ| at 75-95 % pruned (Blundell "
        "et al.; Singh found the opposite)",
        verdict,
        f"{_comparable_count([verdict])}. " + "; ".join(reasons),
        interval=interval,
    )
    figures = []
    histograms = [r.metrics["snr_db_histogram"] for r in runs if "snr_db_histogram" in r.metrics]
    if histograms:
        edges = np.asarray(histograms[0]["edges"])
        counts = np.asarray(histograms[0]["counts"], dtype=float)
        centres = (edges[:-1] + edges[1:]) / 2
        figure = Figure(figsize=(11, 4), layout="constrained")
        left, right = figure.subplots(1, 2)
        left.bar(centres, counts / counts.sum(), width=edges[1] - edges[0], color="C0")
        right.plot(centres, np.cumsum(counts) / counts.sum(), color="C0")
        thresholds = runs[0].metrics.get("snr_db_thresholds", {})
        for (fraction, db), color in zip(sorted(thresholds.items()), ("m", "r", "g", "b", "k"), strict=False):
            for ax in (left, right):
                ax.axvline(db, color=color, lw=1, label=f"{100 * float(fraction):g} % cut")
        left.set_ylabel("fraction of weights")
        right.set_ylabel("cumulative fraction")
        for ax in (left, right):
            ax.set_xlabel("signal-to-noise 10 log10(|μ|/σ) (dB)")
        right.legend(fontsize=8)
        figure.suptitle(f"Signal-to-noise of all weights, {PRIOR_LABELS[BASE_PRIOR]}, first seed (the paper's Fig. 2)")
        save_figure(figure, out / "snr.png")
        figures.append("snr.png")
    text = (
        f"Test error (10-sample predictive) after removing a fraction of the weights of the best network, "
        f"{PRIOR_LABELS[BASE_PRIOR]}, uniform weighting, /126 inputs; weights pooled over layers, biases kept, "
        f"mean ± sd over {len(runs)} seed(s). Singh's networks trained 600 epochs. Training of these networks: "
        f"{check.summary}" + ("" if check.comparable else f"; not comparable at this scale ({check.reason})") + "."
    )
    return Section("Pruning (Singh's Table 1; the paper's Fig. 2)", text, [table], figures, ["pruning.csv"]), headline


def _accuracies(cells, out: Path) -> Section:
    rows = []
    runs_with = []
    for (prior, weighting, normalization), runs in sorted(cells.items()):
        runs = [r for r in runs if "sample_accuracies" in r.metrics]
        if not runs:
            continue
        runs_with.extend(runs)
        samples = [100 * (1 - a) for r in runs for a in r.metrics["sample_accuracies"]]
        rows.append(
            [
                f"{prior}, {weighting}, {normalization}",
                f"{min(samples):.2f} – {max(samples):.2f}",
                _pct([1 - r.metrics["mean_network_accuracy"] for r in runs]),
                _pct([1 - r.metrics["ensemble_accuracy"] for r in runs]),
                cell_check(runs, (prior, weighting, normalization)).summary,
            ]
        )
    header = ["cell", "single samples %", "posterior mean %", "10-sample ensemble %", "training"]
    table = markdown_table(header, rows, "lrrrl")
    figures = []
    base = next(iter(r for r in runs_with if _cell(r) == (BASE_PRIOR, BASE_WEIGHTING, BASE_NORMALIZATION)), None)
    if base is not None:
        figure = reliability_figure(base.metrics["reliability"], f"{BASE_PRIOR}, first seed")
        save_figure(figure, out / "reliability.png")
        figures.append("reliability.png")
    text = "Test error of each posterior sample alone, of the posterior-mean network and of their ensemble."
    return Section("Single samples, posterior mean and ensemble", text, [table], figures)


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines for ``bayes-by-backprop`` (figures and CSV files written to ``out``)."""
    cells = _done(records)
    errors, headlines = _error_table(cells, profile, out)
    pruning, pruning_headline = _pruning(cells, profile, out)
    sections = [
        errors,
        _normalization_table(cells, profile),
        _curves(cells, profile, out),
        _histograms(cells, out),
        pruning,
        _accuracies(cells, out),
    ]
    return Analysis(sections, [*headlines, pruning_headline])
