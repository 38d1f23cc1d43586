"""Tables, figures and verdicts of ``bayes-by-backprop`` from its run records.

The test error of a run is ``1 - accuracy`` of its 10-sample predictive at the best epoch (by validation accuracy).
Groups of per-seed values are compared with :func:`~pyro_bnn.reproduce.report.compare` (Welch's t-test at level
0.05; "separated" when the seeds tell the groups apart):

- **Scale mixture against Gaussian** (uniform weighting, /126 inputs): *holds* when the ``pi = 0.5`` mixture's test
  error is separated below the Gaussian prior's, *does not hold* when it is separated above, *inconclusive*
  otherwise. (The ``pi = 0.25`` mixture is reported beside it.)
- **Blundell weighting**, per prior (/126 inputs): Blundell's against uniform weighting, the same rule; over the
  priors, *holds* when every prior holds, *does not hold* when at least half do not, *inconclusive* otherwise.
- **Pruning** (the ``pi = 0.5`` mixture, uniform weighting, /126 inputs): at 75 % and at 95 % pruned, the test
  error after pruning by ``|mu| / sigma`` against by ``|mu|``: *holds* when signal-to-noise is separated below at
  both, *does not hold* when magnitude is separated below at one of them, *inconclusive* otherwise.

A cell without finished runs makes its verdict inconclusive, so an unfinished grid never reads *holds*.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn._io import write_json_atomically
from pyro_bnn.diagnostics.weight_stats import statistics_from_dict
from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.figures import reliability_figure
from pyro_bnn.reproduce.papers.bayes_by_backprop import (
    BASE_NORMALIZATION,
    BASE_PRIOR,
    BASE_WEIGHTING,
    NORMALIZATIONS,
    PRIOR_LABELS,
    PUBLISHED,
    WEIGHTINGS,
)
from pyro_bnn.reproduce.records import RUNS
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    CONFORMAL_NOTE,
    compare,
    format_mean_sd,
    markdown_table,
    metric_cells,
    overall_verdict,
    write_csv,
)
from pyro_bnn.reproduce.spec import Analysis, Headline, Profile, RunRecord, Section, Status, Verdict

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


def _verdict(a: list[float], b: list[float], a_name: str, b_name: str) -> tuple[Verdict, str]:
    """Is ``a`` (test errors) lower than ``b``? The verdict and the numbers."""
    result = compare(a, b)
    se = "n/a" if math.isnan(result.standard_error) else f"{100 * result.standard_error:.2f}"
    numbers = (
        f"test error {a_name} {_pct(a)} % against {b_name} {_pct(b)} % (gap {100 * result.gap:+.2f} points, se {se})"
    )
    if result.separated:
        return (Verdict.HOLDS if result.gap < 0 else Verdict.DOES_NOT_HOLD), numbers
    if min(len(a), len(b)) < 2:
        return Verdict.INCONCLUSIVE, numbers + ": fewer than 2 seeds"
    return Verdict.INCONCLUSIVE, numbers + ": the seed spread covers the gap"


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
        ],
        rows,
        "llrrrrrrl",
    )

    base = cells.get((BASE_PRIOR, "uniform", BASE_NORMALIZATION), [])
    gaussian = cells.get(("gaussian", "uniform", BASE_NORMALIZATION), [])
    verdict, numbers = _verdict(_errors(base), _errors(gaussian), "scale mixture (π = 0.5)", "Gaussian")
    other = cells.get(("mixture-0.25", "uniform", BASE_NORMALIZATION), [])
    if other:
        numbers += f"; the π = 0.25 mixture: {_pct(_errors(other))} %"
    prior_headline = Headline(
        "The scale-mixture prior gives a lower test error than the Gaussian prior (Blundell et al.; Singh found the "
        "opposite)",
        verdict,
        numbers,
    )
    verdicts, reasons = [], []
    for prior in profile["priors"]:
        blundell = _errors(cells.get((prior, "blundell", BASE_NORMALIZATION), []))
        uniform = _errors(cells.get((prior, "uniform", BASE_NORMALIZATION), []))
        verdict, numbers = _verdict(blundell, uniform, "Blundell", "uniform")
        verdicts.append(verdict)
        reasons.append(f"{PRIOR_LABELS[prior]}: {verdict.value} ({numbers})")
    weighting_headline = Headline(
        "Blundell's KL weighting lowers the test error (Singh: by 0.3 points)",
        overall_verdict(verdicts),
        "; ".join(reasons),
    )
    all_runs = [r for runs in cells.values() for r in runs]
    late = sum(1 for r in all_runs if (_best_epoch(r) or 0) >= profile["epochs"] - 1)
    text = (
        f"Test error of the 10-sample predictive and of the posterior-mean network at the best of "
        f"{profile['epochs']} epochs (by validation accuracy on {profile['val_images']:,} held-out training images), "
        f"mean ± sd over seeds, inputs /126. The published runs trained 600 epochs; here {late} of "
        f"{len(all_runs)} runs had their best epoch among the last two"
        + (
            ", so most were still improving when they stopped (the error curves below)."
            if late * 2 > len(all_runs)
            else "."
        )
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
            ]
        )
    table = markdown_table(
        ["inputs", "test error % (10 samples)", "test error % (posterior mean)", "seeds"], rows, "lrrr"
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
    runs = [r for r in cells.get((BASE_PRIOR, BASE_WEIGHTING, BASE_NORMALIZATION), []) if "pruning" in r.metrics]
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
    verdicts, reasons = [], []
    for fraction in PRUNING_CLAIM_FRACTIONS:
        errors = by_fraction.get(fraction, {})
        verdict, numbers = _verdict(errors.get("snr", []), errors.get("magnitude", []), "|μ|/σ", "|μ|")
        verdicts.append(verdict)
        reasons.append(f"{100 * fraction:g} % pruned: {numbers}")
    if all(v is Verdict.HOLDS for v in verdicts):
        verdict = Verdict.HOLDS
    elif any(v is Verdict.DOES_NOT_HOLD for v in verdicts):
        verdict = Verdict.DOES_NOT_HOLD
    else:
        verdict = Verdict.INCONCLUSIVE
    headline = Headline(
        "Pruning by signal-to-noise |μ|/σ keeps a lower test error than pruning by |μ| at 75-95 % pruned (Blundell "
        "et al.; Singh found the opposite)",
        verdict,
        "; ".join(reasons),
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
        f"mean ± sd over {len(runs)} seed(s). Singh's networks trained 600 epochs."
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
            ]
        )
    table = markdown_table(["cell", "single samples %", "posterior mean %", "10-sample ensemble %"], rows, "lrrr")
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
