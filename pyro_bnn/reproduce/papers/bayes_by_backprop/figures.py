"""The sections of ``bayes-by-backprop``'s report drawn as figures: the error curves during training, the weight
histograms (the paper's Fig. 1), pruning by signal-to-noise against by magnitude (Table 2 and Fig. 3, with its
headline, judged by the rules of :mod:`.verdicts`) and the reliability diagrams, each with its table or CSV file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn._io import write_json_atomically
from pyro_bnn.diagnostics.weight_stats import statistics_from_dict
from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.figures import reliability_figure
from pyro_bnn.reproduce.papers.bayes_by_backprop.plan import (
    BASE_NORMALIZATION,
    BASE_PRIOR,
    BASE_WEIGHTING,
    NORMALIZATIONS,
    PRIOR_LABELS,
    PUBLISHED,
)
from pyro_bnn.reproduce.papers.bayes_by_backprop.verdicts import (
    _cell,
    _comparable_count,
    _pct,
    _planned,
    _verdict,
    cell_check,
)
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Verdict
from pyro_bnn.reproduce.records import RUNS
from pyro_bnn.reproduce.report import markdown_table, overall_width, runs_missing, write_csv

PRUNING_CLAIM_FRACTIONS = (0.75, 0.95)


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


def _pruning(cells, profile: Profile, out: Path, records: list[RunRecord] | None = None) -> tuple[Section, Headline]:
    """The pruning table and headline from the done runs by cell; ``records``: the grid's records of any status,
    the pruned cell's planned runs (None, hand-made cells: the runs done are all planned)."""
    cell = (BASE_PRIOR, BASE_WEIGHTING, BASE_NORMALIZATION)
    runs = [r for r in cells.get(cell, []) if "pruning" in r.metrics]
    # a done run without pruning measured counts as missing: the verdict would read fewer seeds than planned
    absent = runs_missing((len(runs), _planned(records, cell, len(runs))))
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
    if absent:
        verdict = Verdict.INCONCLUSIVE
        reasons.insert(0, f"the pruned networks: {absent}; unjudged")
    elif not check.comparable:
        verdict = Verdict.NOT_COMPARABLE
        reasons.insert(0, f"the pruned networks: {check.reason}")
    elif all(v is Verdict.HOLDS for v in verdicts):
        verdict = Verdict.HOLDS
    elif any(v is Verdict.DOES_NOT_HOLD for v in verdicts):
        verdict = Verdict.DOES_NOT_HOLD
    elif all(v is Verdict.NO_EFFECT for v in verdicts):
        verdict = Verdict.NO_EFFECT
        interval = overall_width(verdict, intervals)
    else:
        verdict = Verdict.INCONCLUSIVE
    headline = Headline(
        "Pruning by signal-to-noise |μ|/σ keeps a lower test error than pruning by |μ| at 75-95 % pruned (Blundell "
        "et al.; Singh found the opposite)",
        verdict,
        f"{_comparable_count([not absent and verdict is not Verdict.NOT_COMPARABLE], missing=int(bool(absent)))}. "
        + "; ".join(reasons),
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
