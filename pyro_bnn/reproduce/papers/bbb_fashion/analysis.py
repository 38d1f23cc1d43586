"""Tables, figures and verdicts of ``bbb-fashion`` from its run records.

- **Comparability first** (:mod:`pyro_bnn.reproduce.comparability`): both claims are about the tutorial's trained
  network, so both are judged only when the runs (one cell: every seed) are comparable with it under
  :data:`~pyro_bnn.reproduce.papers.bbb_fashion.COMPARABLE`: every run converged, which for runs like the tutorial's,
  without a validation set, means it trained the tutorial's 20 epochs (a shorter run, the ``cpu`` profile's 10, has no
  validation history to show it converged), and their mean test accuracy (the 10-sample ensemble's) lies within the
  tolerance of the tutorial's 87.65 %. Otherwise both read *not comparable at this scale*, with the reason and the
  numbers, never *does not hold*, and each headline says how many cells were comparable. The verdicts count seeds,
  not an interval of an effect, so neither reads *no effect*. Before either, a grid with any of its planned seeds
  not done (or not scored) reads *inconclusive*, ``runs missing (k of n planned)``: an unfinished grid never reads
  *holds*, however many seeds it has.
- **Ensemble > posterior mean > single samples**, per seed: the 10-sample ensemble's test accuracy above the
  posterior-mean network's, and that above the best of the 10 single samples. *Holds* when the order holds in every
  seed, *does not hold* when it fails in more than half of them, *inconclusive* otherwise (and with one seed).
- **Out-of-domain inputs get more uncertain predictions**: MNIST digits against the Fashion-MNIST test set.
  *Holds* when, in every seed, the mean predictive entropy and the mean mutual information are higher on MNIST and
  the AUROC of both scores is above 0.5; *does not hold* when the mean AUROC of both scores over the seeds is at
  most 0.5; *inconclusive* otherwise (and with one seed).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.evaluation.ood import DETECTION_KEYS, OodScore
from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.comparability import CellCheck, training_state
from pyro_bnn.reproduce.figures import reliability_figure
from pyro_bnn.reproduce.papers.bbb_fashion.plan import COMPARABLE, ENSEMBLE_DEFINITION, PAPER_EPOCHS, PUBLISHED
from pyro_bnn.reproduce.planned import Analysis, Headline, Profile, RunRecord, Section, Status, Verdict
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    CONFORMAL_NOTE,
    format_mean_sd,
    markdown_table,
    runs_missing,
    write_csv,
)

OOD_NAME = "MNIST"
FASHION_CLASSES = ("T-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")


def _pct(values: list[float]) -> str:
    return format_mean_sd([100 * v for v in values], digits=2)


def _epochs(run: RunRecord) -> int:
    return int(run.metrics.get("epochs_run", len(run.history)))


def cell_check(runs: list[RunRecord]) -> CellCheck:
    """The comparability of the runs (every seed: the one cell both claims judge) with the tutorial's network, under
    :data:`~pyro_bnn.reproduce.papers.bbb_fashion.COMPARABLE`; the reason says when runs trained fewer epochs than the
    tutorial."""
    check = COMPARABLE.check(runs, PUBLISHED["ensemble"])
    short = sum(_epochs(r) < PAPER_EPOCHS for r in runs)
    if check.comparable or not short:
        return check
    reason = f"{check.reason}; {short} of {len(runs)} runs trained fewer than the tutorial's {PAPER_EPOCHS} epochs"
    return dataclasses.replace(check, reason=reason)


def _gate(
    verdict: Verdict, reason: str, check: CellCheck, runs: list[RunRecord], planned: int | None
) -> tuple[Verdict, str]:
    """``verdict`` when the cell is comparable (or has no runs yet), else *not comparable at this scale*; the reason
    says how many cells were comparable. A cell short of any of its ``planned`` runs (None: as many as ``runs``) is
    *inconclusive*, ``runs missing (k of n planned)``, whatever its seeds show: an unfinished grid never reads
    *holds*."""
    if runs and (absent := runs_missing((len(runs), len(runs) if planned is None else planned))):
        return (
            Verdict.INCONCLUSIVE,
            f"0 of 1 cells comparable with the tutorial's, 1 with runs missing; {absent}; unjudged, {reason}",
        )
    if runs and not check.comparable:
        return Verdict.NOT_COMPARABLE, f"0 of 1 cells comparable with the tutorial's ({check.reason}); {reason}"
    return verdict, f"{int(bool(runs))} of 1 cells comparable with the tutorial's; {reason}"


def _training(run: RunRecord) -> str:
    """One run's training state and epochs, for its table row."""
    state = training_state(run, COMPARABLE.metric, COMPARABLE.paper_epochs)
    return f"{state.value}, {_epochs(run)} of {PAPER_EPOCHS} epochs"


def _accuracies(runs: list[RunRecord], out: Path, planned: int | None = None) -> tuple[Section, Headline]:
    rows, csv_rows, ordered = [], [], []
    for run in runs:
        m = run.metrics
        samples = m["sample_accuracies"]
        order = m["ensemble_accuracy"] > m["mean_network_accuracy"] > max(samples)
        ordered.append(order)
        rows.append(
            [
                run.config.seed,
                f"{100 * min(samples):.2f} – {100 * max(samples):.2f}",
                f"{100 * m['mean_network_accuracy']:.2f}",
                f"{100 * m['ensemble_accuracy']:.2f}",
                *(f"{m[key]:.{digits}f}" if key in m else "—" for key, digits in CONFORMAL_COLUMNS),
                "yes" if order else "no",
                _training(run),
            ]
        )
        csv_rows.append(
            {
                "seed": run.config.seed,
                **{f"sample_{i}": a for i, a in enumerate(samples)},
                "posterior_mean": m["mean_network_accuracy"],
                "ensemble": m["ensemble_accuracy"],
                "nll": m.get("nll"),
                "ece": m.get("ece"),
                **{key: m.get(key) for key, _ in CONFORMAL_COLUMNS},
                "epochs_run": m.get("epochs_run"),
                "train_time_s": m.get("train_time_s"),
            }
        )
    low, high = PUBLISHED["samples"]
    rows.append(
        [
            "tutorial",
            f"{100 * low:.2f} – {100 * high:.2f}",
            f"{100 * PUBLISHED['posterior_mean']:.2f}",
            f"{100 * PUBLISHED['ensemble']:.2f}",
            "—",
            "—",
            "yes",
            f"no early stopping, {PAPER_EPOCHS} epochs",
        ]
    )
    write_csv(out / "accuracies.csv", csv_rows)
    table = markdown_table(
        ["seed", "single samples %", "posterior mean %", "10-sample ensemble %", "coverage (α = 0.1)", "set size",
         "ensemble > mean > samples", "training"],
        rows,
        "lrrrrrll",
    )  # fmt: skip
    if len(runs) >= 2 and all(ordered):
        verdict = Verdict.HOLDS
    elif len(runs) >= 2 and sum(not o for o in ordered) * 2 > len(ordered):
        verdict = Verdict.DOES_NOT_HOLD
    else:
        verdict = Verdict.INCONCLUSIVE
    ensemble = _pct([r.metrics["ensemble_accuracy"] for r in runs])
    mean_net = _pct([r.metrics["mean_network_accuracy"] for r in runs])
    best_sample = _pct([max(r.metrics["sample_accuracies"]) for r in runs])
    reason = (
        f"the order holds in {sum(ordered)} of {len(ordered)} seed(s); test accuracy of the ensemble {ensemble} %, "
        f"the posterior mean {mean_net} %, the best single sample {best_sample} %"
        if runs
        else "no run done yet"
    )
    check = cell_check(runs)
    verdict, reason = _gate(verdict, reason, check, runs, planned)
    headline = Headline(
        "The 10-sample ensemble is more accurate than the posterior-mean network, which is more accurate than any "
        "single posterior sample",
        verdict,
        reason,
    )
    figures = []
    if runs:
        save_figure(reliability_figure(runs[0].metrics["reliability"], "first seed"), out / "reliability.png")
        figures.append("reliability.png")
    text = (
        "Test accuracy after the last epoch; the tutorial's numbers in the last row. Estimator: Pyro's `Trace_ELBO` "
        "(`--elbo auto` is it for the bbb guide), 2 weight draws per step and the KL by Monte Carlo, as in the "
        "tutorial. Coverage and set size are of the "
        f"10-sample ensemble's sets. *Training*: how each run's training ended. The runs together: {check.summary}"
        + ("" if check.comparable else f"; not comparable at this scale ({check.reason})")
        + f". {COMPARABLE.describe()} {CONFORMAL_NOTE} {ENSEMBLE_DEFINITION}"
    )
    section = Section("Single samples, posterior mean and ensemble", text, [table], figures, ["accuracies.csv"])
    return section, headline


def _ood(runs: list[RunRecord], out: Path, planned: int | None = None) -> tuple[Section, Headline]:
    runs = [r for r in runs if "ood" in r.metrics]
    rows, csv_rows = [], []
    for score in OodScore:
        per_seed = [r.metrics["ood"][score.value] for r in runs]
        rows.append(
            [
                score.value.replace("_", " "),
                format_mean_sd([s["mean_in"] for s in per_seed]),
                format_mean_sd([s["mean_out"] for s in per_seed]),
                *(format_mean_sd([s[key] for s in per_seed]) for key in DETECTION_KEYS),
            ]
        )
        csv_rows += [{"seed": r.config.seed, "score": score.value, **r.metrics["ood"][score.value]} for r in runs]
    write_csv(out / "ood.csv", csv_rows)
    table = markdown_table(
        ["score", "mean (Fashion-MNIST)", f"mean ({OOD_NAME})", "AUROC", "AUPR in", "AUPR out", "FPR at 95 % TPR"],
        rows,
        "lrrrrrr",
    )
    every = [
        all(
            r.metrics["ood"][s]["mean_out"] > r.metrics["ood"][s]["mean_in"] and r.metrics["ood"][s]["auroc"] > 0.5
            for s in ("entropy", "mutual_information")
        )
        for r in runs
    ]
    mean_auroc = {
        s: statistics.fmean(r.metrics["ood"][s]["auroc"] for r in runs) if runs else float("nan")
        for s in ("entropy", "mutual_information")
    }
    if len(runs) >= 2 and all(every):
        verdict = Verdict.HOLDS
    elif runs and all(v <= 0.5 for v in mean_auroc.values()):
        verdict = Verdict.DOES_NOT_HOLD
    else:
        verdict = Verdict.INCONCLUSIVE
    reason = (
        f"in {sum(every)} of {len(every)} seed(s) both scores are higher on {OOD_NAME} with AUROC > 0.5; mean AUROC "
        f"by entropy {mean_auroc['entropy']:.3f}, by mutual information {mean_auroc['mutual_information']:.3f}"
        if runs
        else f"no run has scored {OOD_NAME} yet"
    )
    check = cell_check(runs)
    verdict, reason = _gate(verdict, reason, check, runs, planned)
    headline = Headline(
        f"Out-of-domain inputs ({OOD_NAME} digits) get more uncertain predictions (higher predictive entropy and "
        "mutual information) than Fashion-MNIST test images",
        verdict,
        reason,
    )
    figures = []
    first = runs[0].metrics if runs else {}
    if "ood_examples" in first:
        save_figure(_examples_figure(first["ood_examples"]), out / "ood-examples.png")
        figures.append("ood-examples.png")
    if "ood_uncertainty" in first:
        save_figure(_uncertainty_figure(first["ood_uncertainty"]), out / "ood-uncertainty.png")
        figures.append("ood-uncertainty.png")
    samples = runs[0].metrics["ood"]["num_samples"] if runs else "—"
    text = (
        f"The Fashion-MNIST model on the Fashion-MNIST test set (in-domain) and on the {OOD_NAME} test set "
        f"(out-of-domain), {samples} posterior samples; mean ± sd over seeds. Scores are larger for inputs that look "
        "more out-of-domain (max probability: 1 - the largest mean class probability). Figures: first seed. "
        f"Training of these runs: {check.summary}"
        + ("" if check.comparable else f"; not comparable at this scale ({check.reason})")
        + "."
    )
    return Section("Out-of-domain inputs", text, [table], figures, ["ood.csv"]), headline


def _examples_figure(examples: dict) -> Figure:
    """Histograms of the sampled predicted classes of the first five test images of each domain."""
    figure = Figure(figsize=(14, 5.5), layout="constrained")
    axes = figure.subplots(2, len(examples["in"]["class_counts"]), squeeze=False)
    for row, (domain, name) in zip(axes, (("in", "Fashion-MNIST"), ("out", OOD_NAME)), strict=True):
        for ax, counts, label in zip(row, examples[domain]["class_counts"], examples[domain]["labels"], strict=True):
            ax.bar(range(len(counts)), counts, color="C0" if domain == "in" else "C3")
            ax.set_xticks(range(len(counts)))
            if domain == "in":
                ax.set_xticklabels(FASHION_CLASSES, rotation=90, fontsize=7)
                ax.set_title(f"{name}: {FASHION_CLASSES[label]}", fontsize=9)
            else:
                ax.set_xticklabels(FASHION_CLASSES, rotation=90, fontsize=7)
                ax.set_title(f"{name}: digit {label}", fontsize=9)
        row[0].set_ylabel("posterior samples")
    figure.suptitle("Predicted class of each posterior sample, five test images per domain")
    return figure


def _uncertainty_figure(uncertainty: dict) -> Figure:
    """Distributions of predictive entropy and mutual information on both test sets."""
    figure = Figure(figsize=(11, 4), layout="constrained")
    axes = figure.subplots(1, 2)
    edges = np.linspace(0, uncertainty["edges_high"], uncertainty["bins"] + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    for ax, key, label in zip(
        axes, ("entropy", "mutual_information"), ("predictive entropy (nats)", "mutual information (nats)"), strict=True
    ):
        for domain, name, color in (("in", "Fashion-MNIST", "C0"), ("out", OOD_NAME, "C3")):
            counts = np.asarray(uncertainty[domain][key], dtype=float)
            ax.step(centres, counts / max(1.0, counts.sum()), where="mid", color=color, label=name)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of test images")
        ax.legend(fontsize=8)
    figure.suptitle("Uncertainty on in-domain and out-of-domain test images")
    return figure


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines for ``bbb-fashion`` (figures and CSV files written to ``out``)."""
    runs = sorted(
        (r for r in records if r.status is Status.DONE and "sample_accuracies" in r.metrics),
        key=lambda r: r.config.seed,
    )
    # the grid's records are its plan, one per seed: a seed not done yet leaves both claims unjudged
    accuracies, order_headline = _accuracies(runs, out, planned=len(records))
    ood, ood_headline = _ood(runs, out, planned=len(records))
    return Analysis([accuracies, ood], [order_headline, ood_headline])
