"""Tables, figures and verdicts of ``implicit-bnn`` from its run records.

Verdict rules (each comparison is Welch's t-test over seeds at level 0.05, :func:`~pyro_bnn.reproduce.report.compare`):

- **Weight-space VI underfits more as depth grows; node noise does not**: :mod:`.implicit_bnn_cubic`.
- **Node noise beats weight-space VI in error and ECE at every width** (LeNet). Per width: *holds* when node noise's
  test error and ECE are both below VI's (separated), *does not hold* when either is above (separated),
  *inconclusive* otherwise; one verdict over the widths by :func:`~pyro_bnn.reproduce.report.overall_verdict`.
- **Node noise's predictive entropy rises with corruption** (the paper's Fig. 8): per corruption, *holds* when the
  mean predictive entropy at the strongest level is above the clean one (separated), *does not hold* when it is not
  above (separated gap <= 0); one verdict over the two corruptions.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.papers.implicit_bnn import METHODS, OOD_DATA
from pyro_bnn.reproduce.papers.implicit_bnn_cubic import cubic_section
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    CONFORMAL_NOTE,
    compare,
    format_mean_sd,
    markdown_table,
    mean_sd,
    metric_cells,
    overall_verdict,
    select,
    write_csv,
)
from pyro_bnn.reproduce.shift_measures import CORRUPTIONS
from pyro_bnn.reproduce.spec import Analysis, Headline, Profile, RunRecord, Section, Verdict

METHOD_NAMES = {
    "node-noise": "node noise (K = 4)",
    "vi": "weight-space VI",
    "mc-dropout": "MC dropout",
    "ensemble": "deep ensemble",
    "deterministic": "deterministic",
    "temperature": "deterministic + temperature",
}
CORRUPTION_NAMES = {"gaussian": "Gaussian blend (γ)", "salt-pepper": "salt and pepper (p)"}


def _seconds_per_epoch(record: RunRecord) -> float | None:
    times = [entry["time_s"] for entry in record.history if "time_s" in entry]
    return statistics.fmean(times) if times else None


# ----------------------------------------------------------------------------------------------------------- LeNet


def _method_metrics(record: RunRecord, method: str) -> dict[str, float]:
    """Test accuracy, NLL, ECE and, where the record has them, the conformal coverage and set size of one method's
    record (``temperature`` reads the tempered predictive, which has no conformal sets)."""
    if method == "temperature":
        return record.metrics["shift"]["tempered"]["test"]
    conformal = {key: record.metrics[key] for key, _ in CONFORMAL_COLUMNS if key in record.metrics}
    return {**{key: record.metrics[key] for key in ("accuracy", "nll", "ece")}, **conformal}


def _method_records(records: list[RunRecord], method: str, **tags: object) -> list[RunRecord]:
    stored = "deterministic" if method == "temperature" else method
    found = select(records, part="lenet", method=stored, **tags)
    if stored == "node-noise":
        found = [r for r in found if r.spec.tag("k") == "4"]
    return found


def _ensemble_seconds(records: list[RunRecord], width: int, seed: str | None) -> float | None:
    """Seconds per epoch of training all members of one ensemble (the members train one after another)."""
    members = [
        r
        for r in select(records, part="lenet", width=width)
        if r.spec.tag("method") in ("deterministic", "member") and r.spec.tag("seed") == seed
    ]
    times = [_seconds_per_epoch(r) for r in members]
    return sum(times) if times and None not in times else None


def _widths(records: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, Headline]:
    rows, csv_rows, verdicts, reasons = [], [], [], []
    for width in profile["widths"]:
        values: dict[str, dict[str, list[float]]] = {}
        for method in METHODS:
            runs = _method_records(records, method, width=width)
            metrics = [_method_metrics(r, method) for r in runs]
            if method == "ensemble":
                seconds = [_ensemble_seconds(records, width, r.spec.tag("seed")) for r in runs]
            elif method == "temperature":
                seconds = [None] * len(runs)  # the deterministic run's; fitting T takes well under a second
            else:
                seconds = [_seconds_per_epoch(r) for r in runs]
            values[method] = {
                "error": [100 * (1 - m["accuracy"]) for m in metrics],
                "nll": [m["nll"] for m in metrics],
                "ece": [m["ece"] for m in metrics],
            }
            name = METHOD_NAMES[method]
            if method == "temperature":
                name += f" (T = {format_mean_sd([r.metrics['shift']['temperature'] for r in runs], 2)})"
            rows.append(
                [
                    f"x{width}",
                    name,
                    len(runs),
                    format_mean_sd(values[method]["error"], 2),
                    format_mean_sd(values[method]["nll"], 3),
                    format_mean_sd(values[method]["ece"], 3),
                    *metric_cells(runs if method != "temperature" else []),
                    format_mean_sd([t for t in seconds if t is not None], 1),
                ]
            )
            for r, m, t in zip(runs, metrics, seconds, strict=True):
                csv_rows.append(
                    {"width": width, "method": method, "seed": r.spec.tag("seed"), **m, "seconds_per_epoch": t}
                )
        error = compare(values["node-noise"]["error"], values["vi"]["error"])
        ece = compare(values["node-noise"]["ece"], values["vi"]["ece"])
        if error.separated and error.gap < 0 and ece.separated and ece.gap < 0:
            verdicts.append(Verdict.HOLDS)
        elif (error.separated and error.gap > 0) or (ece.separated and ece.gap > 0):
            verdicts.append(Verdict.DOES_NOT_HOLD)
        else:
            verdicts.append(Verdict.INCONCLUSIVE)
        nn, vi = values["node-noise"], values["vi"]
        reasons.append(
            f"x{width}: error {mean_sd(nn['error'])[0]:.2f} % vs {mean_sd(vi['error'])[0]:.2f} %, ECE "
            f"{mean_sd(nn['ece'])[0]:.3f} vs {mean_sd(vi['ece'])[0]:.3f} ({verdicts[-1].value})"
        )
    write_csv(out / "lenet.csv", csv_rows)
    table = markdown_table(
        ["width", "method", "seeds", "test error %", "NLL", "ECE (15 bins)", "coverage (α = 0.1)", "set size",
         "s / epoch"],
        rows,
        "llrrrrrrr",
    )  # fmt: skip
    text = (
        "LeNet widened by M (``lenet:M``: M = 2 has 4x the parameters, the paper's Fig. 4 axis) on Fashion-MNIST, "
        "every method on the same training examples for the same epochs. Test metrics on the whole test set, mean ± "
        "sd over seeds (per seed in `lenet.csv`). *deterministic* is the ensemble's first member; *+ temperature* "
        "tempers its predictive with T fitted on the validation split (NLL, L-BFGS on log T). *s / epoch*: training "
        "only, one CPU thread; for the ensemble, all members together. The grid ran two runs at a time on a 2-core "
        "machine that also did other work, so the seconds compare only roughly. The tempered predictive has no "
        f"conformal sets (—). {CONFORMAL_NOTE}"
    )
    section = Section("LeNet width: node noise against weight-space VI and the baselines (Fig. 4)", text, [table])
    section.csv_files.append("lenet.csv")
    headline = Headline(
        "Node noise beats weight-space VI in test error and ECE at every LeNet width (Fashion-MNIST).",
        overall_verdict(verdicts),
        "Node noise vs weight-space VI, " + "; ".join(reasons) + ".",
    )
    return section, headline


def _components(records: list[RunRecord], profile: Profile, out: Path) -> Section:
    width = profile["widths"][0]
    rows, csv_rows = [], []
    for k in profile["ks"]:
        runs = [r for r in select(records, part="lenet", method="node-noise", width=width) if r.spec.tag("k") == str(k)]
        error = [100 * (1 - r.metrics["accuracy"]) for r in runs]
        seconds = [_seconds_per_epoch(r) for r in runs]
        rows.append(
            [
                k,
                len(runs),
                format_mean_sd(error, 2),
                format_mean_sd([r.metrics["ece"] for r in runs], 3),
                format_mean_sd([r.metrics["nll"] for r in runs], 3),
                *metric_cells(runs),
                format_mean_sd([t for t in seconds if t is not None], 1),
            ]
        )
        csv_rows += [
            {"k": k, "seed": r.spec.tag("seed"), "accuracy": r.metrics["accuracy"], "ece": r.metrics["ece"],
             "nll": r.metrics["nll"], **{c: r.metrics.get(c) for c, _ in CONFORMAL_COLUMNS}, "seconds_per_epoch": t}
            for r, t in zip(runs, seconds, strict=True)
        ]  # fmt: skip
    write_csv(out / "components.csv", csv_rows)
    table = markdown_table(
        ["K", "seeds", "test error %", "ECE", "NLL", "coverage (α = 0.1)", "set size", "s / epoch"], rows, "rrrrrrrr"
    )
    text = (
        f"Node noise on LeNet x{width} with K mixture components and variational learning rate 0.075 K (S = 2 copies "
        "per example, so a training step costs "
        f"the same for every K), {profile['samples_per_component']} test samples per component. Seconds per epoch "
        "as in the width table (a shared machine: they compare only roughly); coverage and set size as there."
    )
    return Section("Mixture components K", text, [table], csv_files=["components.csv"])


def _shift_values(record: RunRecord, method: str) -> dict[str, Any]:
    shift = record.metrics["shift"]
    return shift["tempered"] if method == "temperature" else shift


def _corruptions(records: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, Headline]:
    csv_rows = []
    curves: dict[tuple[int, str, str], list[list[dict[str, float]]]] = {}
    for width in profile["widths"]:
        for method in METHODS:
            for r in _method_records(records, method, width=width):
                for corruption, levels in _shift_values(r, method)["corruptions"].items():
                    curves.setdefault((width, method, corruption), []).append(levels)
                    csv_rows += [
                        {
                            "width": width,
                            "method": method,
                            "seed": r.spec.tag("seed"),
                            "corruption": corruption,
                            **level,
                        }
                        for level in levels
                    ]
    write_csv(out / "corruptions.csv", csv_rows)
    figures = []
    for width in profile["widths"]:
        name = f"corruptions-x{width}.png"
        save_figure(_corruption_figure(curves, width), out / name)
        figures.append(name)
    verdicts, reasons = [], []
    width = profile["widths"][0]
    for corruption in CORRUPTIONS:
        seeds = curves.get((width, "node-noise", corruption), [])
        clean = [levels[0]["entropy"] for levels in seeds]
        strongest = [levels[-1]["entropy"] for levels in seeds]
        rises = compare(strongest, clean)
        if rises.separated and rises.gap > 0:
            verdicts.append(Verdict.HOLDS)
        elif rises.separated:
            verdicts.append(Verdict.DOES_NOT_HOLD)
        else:
            verdicts.append(Verdict.INCONCLUSIVE)
        name = CORRUPTION_NAMES[corruption].split(" (")[0]
        reasons.append(f"{name}: {mean_sd(clean)[0]:.3f} -> {mean_sd(strongest)[0]:.3f} nats")
    text = (
        f"The first {profile['shift_images']} test images corrupted at rising intensity (level 0: clean), every method "
        "of a seed on the same corrupted images: accuracy, ECE and the mean predictive entropy split into its "
        "aleatoric part (expected entropy of one sample) and its epistemic part (mutual information); mean over "
        "seeds, one figure per width (per seed in `corruptions.csv`). A deterministic network has no epistemic part; "
        "temperature scaling tempers the mean predictive, so it has none either."
    )
    section = Section("Corrupted inputs (Fig. 8)", text, figures=figures, csv_files=["corruptions.csv"])
    headline = Headline(
        "Node noise's mean predictive entropy rises as the inputs are corrupted (Gaussian blend, salt and pepper).",
        overall_verdict(verdicts),
        f"Node noise at LeNet x{width}, clean -> strongest corruption: " + "; ".join(reasons) + ".",
    )
    return section, headline


def _corruption_figure(curves: dict, width: int) -> Figure:
    panels = (("accuracy", "accuracy"), ("ece", "ECE"), ("aleatoric", "aleatoric MPE (nats)"),
              ("epistemic", "epistemic MPE (nats)"))  # fmt: skip
    figure = Figure(figsize=(13, 6), layout="constrained")
    axes = figure.subplots(len(CORRUPTIONS), len(panels), squeeze=False)
    for row, corruption in enumerate(CORRUPTIONS):
        for column, (key, label) in enumerate(panels):
            ax = axes[row][column]
            for method in METHODS:
                seeds = curves.get((width, method, corruption))
                if not seeds:
                    continue
                levels = [entry["level"] for entry in seeds[0]]
                mean = np.mean([[entry[key] for entry in levels_] for levels_ in seeds], axis=0)
                ax.plot(levels, mean, marker="o", ms=3, label=METHOD_NAMES[method])
            ax.set_xlabel(CORRUPTION_NAMES[corruption])
            ax.set_ylabel(label)
    axes[0][0].legend(fontsize=7)
    figure.suptitle(f"LeNet x{width} on corrupted Fashion-MNIST (mean over seeds)")
    return figure


def _ood(records: list[RunRecord], profile: Profile, out: Path) -> Section:
    rows, csv_rows = [], []
    for width in profile["widths"]:
        for method in METHODS:
            runs = _method_records(records, method, width=width)
            oods = [_shift_values(r, method)["ood"] for r in runs]
            cells = []
            for score in ("entropy", "mutual_information"):
                if method in ("deterministic", "temperature") and score == "mutual_information":
                    cells += ["—"] * 3  # one sample: no mutual information
                    continue
                cells += [
                    format_mean_sd([o[score][key] for o in oods], 3) for key in ("auroc", "aupr_out", "fpr_at_95_tpr")
                ]
            rows.append([f"x{width}", METHOD_NAMES[method], len(runs), *cells])
            scores = ("entropy", "mutual_information", "max_probability")
            csv_rows += [
                {"width": width, "method": method, "seed": r.spec.tag("seed"), "score": score, **o[score]}
                for r, o in zip(runs, oods, strict=True)
                for score in scores
            ]
    write_csv(out / "ood.csv", csv_rows)
    table = markdown_table(
        ["width", "method", "seeds", "AUROC (entropy)", "AUPR (entropy)", "FPR95 (entropy)", "AUROC (MI)",
         "AUPR (MI)", "FPR95 (MI)"],
        rows,
        "llrrrrrrr",
    )  # fmt: skip
    text = (
        f"Fashion-MNIST test images (in) against {OOD_DATA.upper()} test images (out), the first "
        f"{profile['shift_images']} of each, scored by the total predictive entropy and by the mutual information "
        "(epistemic part); AUPR with the out-of-domain images as positives; FPR95: false-positive rate at 95 % "
        "true-positive rate. Mean ± sd over seeds (per seed, with max-probability scores, in `ood.csv`)."
    )
    return Section(
        f"Out-of-domain detection: Fashion-MNIST in, {OOD_DATA.upper()} out", text, [table], csv_files=["ood.csv"]
    )


def _cifar(records: list[RunRecord], profile: Profile, out: Path) -> Section:
    rows, csv_rows = [], []
    for dataset, model in profile["cifar"]:
        for method in ("node-noise", "deterministic"):
            runs = select(records, part="cifar", dataset=dataset, model=model, method=method)
            rows.append(
                [
                    dataset,
                    model,
                    METHOD_NAMES[method],
                    len(runs),
                    format_mean_sd([100 * (1 - r.metrics["accuracy"]) for r in runs], 2),
                    format_mean_sd([r.metrics["nll"] for r in runs], 3),
                    format_mean_sd([r.metrics["ece"] for r in runs], 3),
                    *metric_cells(runs),
                ]
            )
            csv_rows += [
                {"dataset": dataset, "model": model, "method": method, "seed": r.spec.tag("seed"),
                 **{key: r.metrics[key] for key in ("accuracy", "nll", "ece")},
                 **{key: r.metrics.get(key) for key, _ in CONFORMAL_COLUMNS}}
                for r in runs
            ]  # fmt: skip
    write_csv(out / "cifar.csv", csv_rows)
    table = markdown_table(
        ["data", "network", "method", "seeds", "test error %", "NLL", "ECE", "coverage (α = 0.1)", "set size"],
        rows,
        "lllrrrrrr",
    )
    text = (
        f"The paper's large networks ({profile['cifar_epochs']} epochs, no augmentation): node noise with the "
        "authors' setting against the same network trained deterministically. Mean ± sd over seeds; coverage and set "
        "size as in the LeNet width table."
    )
    return Section("VGG16 and WRN-28x10 on CIFAR (Table 2)", text, [table], csv_files=["cifar.csv"])


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines (see the module docstring for the verdict rules)."""
    cubic, cubic_headline = cubic_section(records, profile, out)
    widths, width_headline = _widths(records, profile, out)
    components = _components(records, profile, out)
    corruptions, corruption_headline = _corruptions(records, profile, out)
    ood = _ood(records, profile, out)
    sections = [cubic, widths, components, corruptions, ood]
    if profile["cifar"]:
        sections.append(_cifar(records, profile, out))
    return Analysis(sections, [cubic_headline, width_headline, corruption_headline])
