"""The sections of ``implicit-bnn``'s report about what node noise's predictions are made of and how they move:
its components, the corrupted-input curves (the paper's Fig. 8, drawn per width) and out-of-distribution detection,
each with its table and CSV file; the corruption headline is judged by the rules of :mod:`.verdicts`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.papers.implicit_bnn.measures import CORRUPTIONS
from pyro_bnn.reproduce.papers.implicit_bnn.plan import (
    COMPARABLE,
    METHODS,
    OOD_DATA,
    PUBLISHED_LENET_ACCURACY,
    lenet_methods,
)
from pyro_bnn.reproduce.papers.implicit_bnn.records import (
    CORRUPTION_NAMES,
    METHOD_NAMES,
    _method_records,
    _seconds_per_epoch,
    _shift_values,
)
from pyro_bnn.reproduce.papers.implicit_bnn.verdicts import _missing_text
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Verdict
from pyro_bnn.reproduce.report import (
    CONFORMAL_COLUMNS,
    compare,
    format_mean_sd,
    markdown_table,
    mean_sd,
    metric_cells,
    overall_verdict,
    select,
    write_csv,
)


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
                COMPARABLE.check(runs, PUBLISHED_LENET_ACCURACY).summary,
            ]
        )
        csv_rows += [
            {"k": k, "seed": r.spec.tag("seed"), "accuracy": r.metrics["accuracy"], "ece": r.metrics["ece"],
             "nll": r.metrics["nll"], **{c: r.metrics.get(c) for c, _ in CONFORMAL_COLUMNS}, "seconds_per_epoch": t}
            for r, t in zip(runs, seconds, strict=True)
        ]  # fmt: skip
    write_csv(out / "components.csv", csv_rows)
    table = markdown_table(
        ["K", "seeds", "test error %", "ECE", "NLL", "coverage (α = 0.1)", "set size", "s / epoch", "training"],
        rows,
        "rrrrrrrrl",
    )
    text = (
        f"Node noise on LeNet x{width} with K mixture components and variational learning rate 0.075 K (S = 2 copies "
        "per example, so a training step costs "
        f"the same for every K), {profile['samples_per_component']} test samples per component. Seconds per epoch "
        "as in the width table (a shared machine: they compare only roughly); coverage, set size and training as "
        "there. No verdict rests on this table."
    )
    return Section("Mixture components K", text, [table], csv_files=["components.csv"])


def _corruptions(records: list[RunRecord], profile: Profile, out: Path) -> tuple[Section, Headline]:
    csv_rows = []
    curves: dict[tuple[int, str, str], list[list[dict[str, float]]]] = {}
    for width in profile["widths"]:
        for method in lenet_methods(profile):
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
        if not any(key[0] == width for key in curves):
            continue  # no run of this width scored yet (a grid part-way): no empty figure
        name = f"corruptions-x{width}.png"
        save_figure(_corruption_figure(curves, width), out / name)
        figures.append(name)
    verdicts, reasons, missing = [], [], 0
    width = profile["widths"][0]
    check = COMPARABLE.check(_method_records(records, "node-noise", width=width), PUBLISHED_LENET_ACCURACY)
    for corruption in CORRUPTIONS:
        seeds = curves.get((width, "node-noise", corruption), [])
        clean = [levels[0]["entropy"] for levels in seeds]
        strongest = [levels[-1]["entropy"] for levels in seeds]
        rises = compare(strongest, clean)
        if rises.separated and rises.gap > 0:
            verdict, shows = Verdict.HOLDS, "rises, separated"
        elif rises.separated:
            verdict, shows = Verdict.DOES_NOT_HOLD, "falls, separated"
        elif not seeds:  # inconclusive, so an unfinished grid never reads holds, but neither judged nor comparable
            verdict, shows, missing = Verdict.INCONCLUSIVE, "runs missing", missing + 1
        else:
            verdict, shows = (
                Verdict.INCONCLUSIVE,
                "fewer than 2 seeds" if len(seeds) < 2 else "the seeds' spread covers it",
            )
        if seeds and not check.comparable:
            verdict = Verdict.NOT_COMPARABLE
        verdicts.append(verdict)
        name = CORRUPTION_NAMES[corruption].split(" (")[0]
        judged = "not comparable, unjudged" if verdict is Verdict.NOT_COMPARABLE else verdict.value
        reasons.append(f"{name}: {mean_sd(clean)[0]:.3f} -> {mean_sd(strongest)[0]:.3f} nats ({shows}; {judged})")
    text = (
        "The paper's Fig. 8 shows the mean predictive entropy of WRN-28x10 on corrupted CIFAR-10/100; here LeNet on "
        "Fashion-MNIST. The accuracy and ECE under corruption, and their verdicts, are our extension (Fig. 8 reports "
        "entropy only). "
        f"The first {profile['shift_images']} test images corrupted at rising intensity (level 0: clean), every method "
        "of a seed on the same corrupted images: accuracy, ECE and the mean predictive entropy split into its "
        "aleatoric part (expected entropy of one sample) and its epistemic part (mutual information); mean over "
        "seeds, one figure per width (per seed in `corruptions.csv`). A deterministic network has no epistemic part; "
        "temperature scaling tempers the mean predictive, so it has none either. The verdicts on accuracy and ECE "
        "under corruption are in *Node noise against its rivals*; the entropy verdict is judged only when node "
        "noise's runs converged (training as in the width table)."
    )
    images = f"{profile['shift_images']:,}".replace(",", " ")
    section = Section(
        "Corrupted inputs (the paper's Fig. 8 on CIFAR; here LeNet on Fashion-MNIST)",
        text,
        figures=figures,
        csv_files=["corruptions.csv"],
    )
    headline = Headline(
        "Node noise's mean predictive entropy rises as the inputs are corrupted (Gaussian blend, salt and pepper; "
        "paper: Fig. 8, WRN-28x10 on corrupted CIFAR-10/100; here: LeNet "
        f"x{profile['widths'][0]} on the first {images} Fashion-MNIST test images).",
        overall_verdict(verdicts),
        f"{sum(v is not Verdict.NOT_COMPARABLE for v in verdicts) - missing} of {len(verdicts)} cells comparable"
        + _missing_text(missing)
        + ("" if check.comparable else f" (node noise at x{width}: {check.reason})")
        + f"; node noise at LeNet x{width}, clean -> strongest corruption: "
        + "; ".join(reasons)
        + ".",
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
        for method in lenet_methods(profile):
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
