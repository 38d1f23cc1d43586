"""The MNIST CNN of ``priors``: what its posterior predictive says about its own mistakes.

Verdict rule of **the CNN's uncertainty is higher on its mistakes**: per seed, the mean predictive entropy of the
wrongly predicted test images against that of the right ones, and the referral curve (accuracy on the images kept
after referring the most uncertain, by entropy) at 50 % referred against none. The seeds form one cell, judged only
when it is comparable under :data:`~.priors.CNN_COMPARABLE`: every run converged (validation accuracy flat over its
last epochs at the epoch cap; the paper gives neither an epoch count nor an accuracy for its CNN, so convergence is
all that is checked), else *not comparable at this scale* with the reason. *Holds* when every seed's wrong
predictions have the higher mean entropy and every seed's curve rises; *does not hold* when any seed's do not;
*inconclusive* without a finished seed. The entropy gap (wrong - right) is stated as mean ± the half-width of its
95 % t interval over seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from pyro_bnn.evaluation.galleries import GalleryEntry
from pyro_bnn.plots import plot_gallery, save_figure
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.priors.analysis import effect_text, t_interval
from pyro_bnn.reproduce.papers.priors.measures import decode_pixels
from pyro_bnn.reproduce.papers.priors.plan import CNN_COMPARABLE
from pyro_bnn.reproduce.planned import Headline, RunRecord, Section, Verdict
from pyro_bnn.reproduce.report import CONFORMAL_NOTE, format_mean_sd, markdown_table, metric_cells

CLAIM = "The CNN's uncertainty is higher on its mistakes (entropy of wrong > right, and the referral curve rises)."


def _summary_table(runs: list[RunRecord], check: CellCheck) -> list[str]:
    scores = markdown_table(
        ["test accuracy", "NLL", "ECE (15 bins)", "coverage (α = 0.1)", "set size", "seeds",
         "training (converged, epochs, test accuracy)", "comparable"],
        [
            (
                format_mean_sd([r.metrics["accuracy"] for r in runs], 4),
                format_mean_sd([r.metrics["nll"] for r in runs]),
                format_mean_sd([r.metrics["ece"] for r in runs], 4),
                *metric_cells(runs),
                len(runs),
                check.summary,
                "yes" if check.comparable else f"no: {check.reason}",
            )
        ],
    )  # fmt: skip
    rows = []
    for side in ("right", "wrong"):
        values = [r.metrics["uncertainty"][side] for r in runs]
        rows.append(
            (side, format_mean_sd([v["count"] for v in values], 0),
             *(format_mean_sd([v.get(k, float("nan")) for v in values], 4)
               for k in ("entropy", "mutual_information", "expected_error", "variance")))
        )  # fmt: skip
    confident = format_mean_sd([r.metrics["uncertainty"]["confident_mistakes"] for r in runs], 0)
    rows.append(("wrong with expected error 0", confident, "", "", "", ""))
    split = markdown_table(
        ["test predictions", "images", "mean entropy", "mean mutual information", "expected error rate",
         "predictive variance"],
        rows,
    )  # fmt: skip
    return [scores, split]


def _per_class_figure(runs: list[RunRecord], path: Path) -> str:
    side = "validation" if all("validation" in r.metrics["uncertainty"] for r in runs) else "test"

    def per_class(r: RunRecord) -> list[dict[str, Any]]:
        u = r.metrics["uncertainty"]
        return (u["validation"] if side == "validation" else u)["per_class"]

    labels = sorted({row["label"] for r in runs for row in per_class(r)})
    by_label = [{row["label"]: row for row in per_class(r)} for r in runs]
    mean = {  # over the seeds whose images hold the class
        key: np.array([np.mean([rows[c][key] for rows in by_label if c in rows]) for c in labels])
        for key in ("error", "expected_error", "variance")
    }
    figure = Figure(figsize=(11, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    x = np.arange(len(labels))
    left.bar(x - 0.2, mean["error"], 0.4, label="error rate")
    left.bar(x + 0.2, mean["expected_error"], 0.4, label="expected error rate (samples disagreeing)")
    left.set(xticks=x, xticklabels=labels, xlabel="true class", ylabel="rate", title="error and expected error")
    left.legend(fontsize=8)
    right.bar(x, mean["variance"], 0.6, color="tab:purple")
    right.set(xticks=x, xticklabels=labels, xlabel="true class", ylabel="variance",
              title="predictive variance (mean over classes and images)")  # fmt: skip
    figure.suptitle(f"MNIST CNN, {side} images, mean over {len(runs)} seed(s)")
    save_figure(figure, path)
    return side


def _referral_figure(runs: list[RunRecord], path: Path) -> None:
    figure = Figure(figsize=(5.5, 4.0), layout="constrained")
    ax = figure.subplots()
    for score, name in (("entropy", "by entropy"), ("mutual_information", "by mutual information")):
        curves = [r.metrics["uncertainty"]["referral"][score] for r in runs]
        fractions = np.array(curves[0]["fractions"]) * 100
        accuracy = np.array([c["accuracy"] for c in curves])
        ax.plot(fractions, accuracy.mean(0), marker="o", ms=3, label=name)
        if len(curves) > 1:
            ax.fill_between(fractions, accuracy.min(0), accuracy.max(0), alpha=0.2)
    ax.set(xlabel="% of test images referred (most uncertain first)", ylabel="accuracy on the rest",
           title="Referral curves (band: range over seeds)")  # fmt: skip
    ax.legend()
    save_figure(figure, path)


def _gallery_figure(record: RunRecord, name: str, title: str, path: Path) -> bool:
    u = record.metrics["uncertainty"]
    stored = u["galleries"][name]
    if not stored:
        return False
    images = torch.stack([decode_pixels(e["pixels"], u["image_shape"]) for e in stored])
    entries = [GalleryEntry(i, e["label"], e["predicted"], e["probability"], e["spread"]) for i, e in enumerate(stored)]
    save_figure(plot_gallery(images, entries, columns=5, title=title), path)
    return True


def _headline(runs: list[RunRecord]) -> Headline:
    if not runs:
        return Headline(CLAIM, Verdict.INCONCLUSIVE, "no CNN run finished.")
    check = CNN_COMPARABLE.check(runs, None)
    if not check.comparable:
        return Headline(CLAIM, Verdict.NOT_COMPARABLE, f"0 of 1 cells comparable ({check.summary}): {check.reason}.")
    higher, rising, parts, gaps = [], [], [], []
    for r in runs:
        u = r.metrics["uncertainty"]
        wrong, right = u["wrong"].get("entropy"), u["right"].get("entropy")
        curve = u["referral"]["entropy"]["accuracy"]
        higher.append(wrong is not None and right is not None and wrong > right)
        rising.append(curve[-1] > curve[0])
        if wrong is not None and right is not None:
            gaps.append(wrong - right)
        parts.append(
            f"seed {r.spec.tag('seed')}: entropy {wrong if wrong is not None else float('nan'):.3f} (wrong) vs "
            f"{right if right is not None else float('nan'):.3f} (right), accuracy {curve[0]:.4f} -> {curve[-1]:.4f} "
            f"at {100 * u['referral']['entropy']['fractions'][-1]:.0f} % referred"
        )
    verdict = Verdict.HOLDS if all(higher) and all(rising) else Verdict.DOES_NOT_HOLD
    gap = (
        f"entropy gap (wrong - right) {effect_text(float(np.mean(gaps)), *t_interval(gaps))} over {len(gaps)} seeds; "
        if gaps
        else ""
    )
    return Headline(CLAIM, verdict, f"1 of 1 cells comparable ({check.summary}); " + gap + "; ".join(parts) + ".")


def cnn_section(runs: list[RunRecord], out: Path) -> tuple[Section, Headline]:
    runs = sorted(runs, key=lambda r: int(r.spec.tag("seed")))
    if not runs:
        return Section("The MNIST CNN", "No CNN run has finished."), _headline(runs)
    u = runs[0].metrics["uncertainty"]
    side = _per_class_figure(runs, out / "cnn-per-class.png")
    _referral_figure(runs, out / "cnn-referral.png")
    figures = ["cnn-per-class.png", "cnn-referral.png"]
    for name, title in (
        ("most_confident_mistakes", "Most confident mistakes (true / predicted, p ± sd over samples)"),
        ("least_confident", "Least confident test images"),
    ):
        file = f"cnn-{name.replace('_', '-')}.png"
        if _gallery_figure(runs[0], name, f"{title}, seed {runs[0].spec.tag('seed')}", out / file):
            figures.append(file)
    text = (
        f"`tanh-cnn` on MNIST under a N(0, 1) prior with the mean-field guide; {u['num_samples']} posterior samples "
        "per image. The *expected error rate* of an image is the share of posterior samples whose own label differs "
        "from the predicted one (the paper's Fig. 4; no true label involved), the *predictive variance* the "
        "variance over samples of the class probabilities, averaged over classes. The per-class figure is on the "
        f"{side} images (the paper's Fig. 4 is on its validation set); the rest on the test images. Galleries: the "
        "paper's Figs. 5 and 6 (seed 0; under each image its true / predicted class, the predicted class's "
        "probability and its spread over the samples, and 'wrong with expected error 0' counts the paper's "
        "'mistakes with zero expected error rate'). The verdict is a low bar that most working classifiers pass; "
        f"how much of the error the referral removes is in the curve. {CONFORMAL_NOTE}"
    )
    text += (
        " The seeds are judged only when every run converged (validation accuracy flat over its last "
        "epochs at the epoch cap; the paper gives no accuracy or epoch count for its CNN): the *training* column."
    )
    check = CNN_COMPARABLE.check(runs, None)
    return Section("The MNIST CNN's uncertainty", text, _summary_table(runs, check), figures), _headline(runs)
