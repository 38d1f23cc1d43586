"""Tables, the "which family for what" summary and the verdicts of ``posterior-families``, from its run records
(the figure: :mod:`.posterior_families_figures`).

Every number is a mean ± sd over the seeds a family finished. Comparisons between two families use Welch's t-test
over seeds (:func:`~pyro_bnn.reproduce.report.compare`, level 0.05): a difference is called one only when the seeds
separate it. The summary's lines are written from the measured values: for each question (closest to NUTS,
best NLL, best calibration, best out-of-domain detection, cheapest), the family with the best mean and the families
the seeds cannot tell from it.

Verdict rules (each an expectation from the literature that the issue asks to check):

- **Mean-field VI is narrower than NUTS** (moons): *holds* when the median sd ratio of mean-field VI is below 1 and
  separated from 1 over seeds, *does not hold* when it is above 1 and separated, *inconclusive* otherwise.
- **SG-MCMC's predictive is closer to NUTS than mean-field VI's** (moons; SGLD and cyclical SGLD each against
  mean-field, by the KL from NUTS): *holds* when both are smaller and separated, *does not hold* when one is larger
  and separated, *inconclusive* otherwise.
- **A deep ensemble detects out-of-domain inputs better than mean-field VI** (AUROC, per data set): *holds* when it
  is higher and separated on every data set, *does not hold* when lower and separated on half of them or more,
  *inconclusive* otherwise (:func:`~pyro_bnn.reproduce.report.overall_verdict`).
- **A Laplace approximation improves the NLL of its MAP network** (KFAC, per data set, against the MAP member it
  was fitted around): the same rule on the NLL (lower is better).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pyro_bnn.experiments.scoring import CONFORMAL_KEYS
from pyro_bnn.reproduce.papers.posterior_families import FAMILIES
from pyro_bnn.reproduce.report import (
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
from pyro_bnn.reproduce.spec import Analysis, Headline, Profile, RunRecord, Section, Verdict

DATASETS = {"moons": "Two moons (2-5-5-2 tanh net, NUTS reference)", "fashion-mnist": "Fashion-MNIST subset (3FC)"}

COLUMNS = {
    "accuracy": ("accuracy", 3, True),
    "nll": ("NLL", 3, False),
    "ece": ("ECE", 3, False),
    "conformal_coverage": ("coverage", 3, None),
    "conformal_set_size": ("set size", 2, False),
    "ood_auroc": ("OOD AUROC", 3, True),
    "fit_seconds": ("wall time (s)", 1, False),
    "kl_to_nuts": ("KL(NUTS ‖ family)", 4, False),
    "sd_ratio_median": ("sd ratio (median)", 2, None),
    "sd_ratio_output_median": ("sd ratio, output layer", 2, None),
}
"""Metric key -> (column title, digits, higher is better; None: closest to 1 is best). The conformal columns are
shown, not ranked."""

MOONS_ONLY = ("kl_to_nuts", "sd_ratio_median", "sd_ratio_output_median")

NAMES = {
    "nuts": "NUTS", "mean-field": "mean-field VI", "low-rank": "low-rank VI", "flow": "flow VI (IAF)",
    "laplace-last-layer": "Laplace, last layer", "laplace-kfac": "Laplace, KFAC", "sgld": "SGLD",
    "cyclical-sgld": "cyclical SGLD", "ensemble": "deep ensemble", "node-noise": "node-noise mixture",
    "map": "MAP network (one)",
}  # fmt: skip


def values(records: list[RunRecord], dataset: str, family: str, key: str) -> list[float]:
    """The per-seed values of ``key`` of one family on one data set (``map``: the first MAP member)."""
    tag = "map0" if family == "map" else family
    found = []
    for record in select(records, dataset=dataset, family=tag):
        value = record.metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            found.append(float(value))
    return found


def _families(records: list[RunRecord], dataset: str) -> list[str]:
    present = [f for f in (*FAMILIES, "map") if values(records, dataset, f, "accuracy")]
    return present


def dataset_table(records: list[RunRecord], dataset: str, out: Path) -> tuple[str, str]:
    """The Markdown table of one data set (families as rows, metrics as columns, mean ± sd over seeds) and the name
    of the CSV of its per-seed values, written into ``out``."""
    keys = [k for k in COLUMNS if dataset == "moons" or k not in MOONS_ONLY]
    rows, csv_rows = [], []
    for family in _families(records, dataset):
        seeds = len(values(records, dataset, family, "accuracy"))
        tag = "map0" if family == "map" else family
        runs = select(records, dataset=dataset, family=tag)
        cells = [
            metric_cells(runs, [(k, COLUMNS[k][1])])[0]
            if k in CONFORMAL_KEYS
            else format_mean_sd(values(records, dataset, family, k), COLUMNS[k][1])
            for k in keys
        ]
        rows.append([NAMES[family], str(seeds), *cells])
        for record in runs:
            csv_rows.append({"family": family, "seed": record.spec.tag("seed"),
                             **{k: record.metrics.get(k) for k in keys}})  # fmt: skip
    name = f"{dataset}-families.csv"
    write_csv(out / name, csv_rows)
    return markdown_table(["family", "seeds", *[COLUMNS[k][0] for k in keys]], rows), name


def _score(key: str, value: float) -> float:
    """Larger is better."""
    better = COLUMNS[key][2]
    if better is None:
        return -abs(math.log(value)) if value > 0 else -math.inf
    return value if better else -value


def best_families(records: list[RunRecord], dataset: str, key: str, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The family with the best mean of ``key`` on ``dataset`` and those whose seeds do not separate them from it
    (Welch's t-test); ``{}`` when no family has the value."""
    candidates = {}
    for family in FAMILIES:
        found = values(records, dataset, family, key)
        if family not in exclude and found:
            candidates[family] = found
    if not candidates:
        return {}
    best = max(candidates, key=lambda f: _score(key, mean_sd(candidates[f])[0]))
    ties = [f for f in candidates if f != best and not compare(
        [_score(key, v) for v in candidates[f]], [_score(key, v) for v in candidates[best]]).separated]  # fmt: skip
    return {"best": best, "mean": mean_sd(candidates[best])[0], "ties": ties}


QUESTIONS = (
    ("kl_to_nuts", "the predictive closest to the NUTS reference", ("nuts",)),
    ("sd_ratio_median", "weight marginals as wide as NUTS's (median sd ratio closest to 1)", ("nuts",)),
    ("nll", "the best test NLL", ()),
    ("ece", "the best calibration (lowest ECE)", ()),
    ("ood_auroc", "the best out-of-domain detection by predictive entropy", ()),
    ("fit_seconds", "the cheapest fit", ("nuts",)),
)


def best_value(records: list[RunRecord], dataset: str) -> dict[str, Any]:
    """Among the families with the best test NLL or one the seeds cannot separate from it, the one with the
    lowest mean fit time (NUTS left out); ``{}`` without values."""
    found = best_families(records, dataset, "nll", ("nuts",))
    if not found:
        return {}
    contenders = [found["best"], *found["ties"]]
    seconds = {f: mean_sd(values(records, dataset, f, "fit_seconds"))[0] for f in contenders}
    seconds = {f: v for f, v in seconds.items() if math.isfinite(v)}
    if not seconds:
        return {}
    cheapest = min(seconds, key=seconds.get)
    nll = mean_sd(values(records, dataset, cheapest, "nll"))[0]
    return {
        "family": cheapest,
        "seconds": seconds[cheapest],
        "nll": nll,
        "best": found["best"],
        "best_nll": found["mean"],
    }


def summary_lines(records: list[RunRecord]) -> list[str]:
    """The "which family for what" lines, one per (question, data set) that has values, then the best value for
    money per data set."""
    lines = []
    for key, question, exclude in QUESTIONS:
        for dataset in DATASETS:
            found = best_families(records, dataset, key, exclude)
            if not found:
                continue
            digits = COLUMNS[key][1]
            ties = ", ".join(NAMES[f] for f in found["ties"])
            tied = f"; the seeds do not separate it from {ties}" if ties else "; separated from every other family"
            lines.append(
                f"- **{question[0].upper() + question[1:]}** on {dataset}: {NAMES[found['best']]} "
                f"({COLUMNS[key][0]} {found['mean']:.{digits}f}){tied}."
            )
    for dataset in DATASETS:
        found = best_value(records, dataset)
        if found:
            lines.append(
                f"- **The cheapest family whose NLL the seeds cannot tell from the best** on {dataset}: "
                f"{NAMES[found['family']]} (NLL {found['nll']:.3f} in {found['seconds']:.1f} s; the best mean is "
                f"{NAMES[found['best']]}'s {found['best_nll']:.3f})."
            )
    return lines


def _judge(better: list[float], worse: list[float], higher_is_better: bool) -> Verdict:
    """HOLDS when ``better`` beats ``worse`` and the seeds separate them, DOES_NOT_HOLD when the reverse is
    separated, INCONCLUSIVE otherwise (or without values)."""
    if not better or not worse:
        return Verdict.INCONCLUSIVE
    result = compare(better, worse)
    gain = result.gap if higher_is_better else -result.gap
    if result.separated:
        return Verdict.HOLDS if gain > 0 else Verdict.DOES_NOT_HOLD
    return Verdict.INCONCLUSIVE


def _fmt(found: list[float], digits: int = 3) -> str:
    return format_mean_sd(found, digits)


def headlines(records: list[RunRecord]) -> list[Headline]:
    """The four verdicts of the module docstring."""
    result = []
    ratio = values(records, "moons", "mean-field", "sd_ratio_median")
    verdict = _judge([1.0] * max(len(ratio), 2), ratio, True) if len(ratio) >= 2 else Verdict.INCONCLUSIVE
    result.append(Headline(
        "Mean-field VI's weight marginals are narrower than NUTS's (moons)", verdict,
        f"median sd ratio to NUTS {_fmt(ratio, 2)} over {len(ratio)} seed(s), against 1."))  # fmt: skip
    mean_field = values(records, "moons", "mean-field", "kl_to_nuts")
    verdicts, parts = [], []
    for family in ("sgld", "cyclical-sgld"):
        kl = values(records, "moons", family, "kl_to_nuts")
        verdicts.append(_judge(kl, mean_field, False))
        parts.append(f"{NAMES[family]} {_fmt(kl, 4)}")
    verdict = (Verdict.DOES_NOT_HOLD if Verdict.DOES_NOT_HOLD in verdicts
               else Verdict.HOLDS if all(v is Verdict.HOLDS for v in verdicts) else Verdict.INCONCLUSIVE)  # fmt: skip
    result.append(Headline(
        "SG-MCMC's predictive is closer to NUTS's than mean-field VI's (moons)", verdict,
        f"KL from the NUTS predictive, mean over test points: {', '.join(parts)}, mean-field VI "
        f"{_fmt(mean_field, 4)}."))  # fmt: skip
    for family, other, key, higher, claim in (
        ("ensemble", "mean-field", "ood_auroc", True,
         "A deep ensemble detects out-of-domain inputs better than mean-field VI"),
        ("laplace-kfac", "map", "nll", False, "A KFAC Laplace approximation improves the NLL of its MAP network"),
    ):  # fmt: skip
        verdicts, parts = [], []
        for dataset in DATASETS:
            a, b = values(records, dataset, family, key), values(records, dataset, other, key)
            if a and b:
                verdicts.append(_judge(a, b, higher))
                parts.append(f"{dataset}: {_fmt(a)} against {_fmt(b)} ({verdicts[-1].value})")
        result.append(Headline(claim, overall_verdict(verdicts),
                               f"{COLUMNS[key][0]} {'; '.join(parts) if parts else 'not measured yet'}."))  # fmt: skip
    return result


CAVEATS = """- **Label switching.** A tanh network's function is unchanged by permuting hidden units and flipping their
  signs, so NUTS's chains sit in relabelled copies of the same modes. The sd ratios are taken after matching every
  chain's units to NUTS's chain 0 (`align_hidden_units`, one relabelling per chain): a chain that switches labels
  within itself, or a NUTS chain in a genuinely different mode, inflates NUTS's pooled sd and pulls every ratio below
  1. The KL between predictives needs no alignment.
- **The NUTS row** compares NUTS with itself: its KL is between the predictive of its first half of chains and that
  of its second half (a noise floor for the other rows), and its sd ratio is 1 by construction.
- **Laplace, last layer** keeps every other weight at its MAP value, so most of its sd ratios are 0 and its median
  over all weights says nothing; the output-layer column is the one to read. Its predictive (and KFAC's) is the
  linearised GLM predictive with the probit link.
- **Node noise** has deterministic weights and random noise on the layers' inputs: it has no weight marginals, so
  no sd ratio.
- **Out-of-domain inputs** on moons are points on a circle far around the data: a tanh network's predictions
  saturate there, so the predictive entropy is often *lower* out of domain than near the decision boundary and
  AUROCs below 0.5 are a finding about the score, not a bug. On Fashion-MNIST they are MNIST's test digits.
- **Wall times** are of a shared 2-core machine, one torch thread per run; a Laplace fit's and an ensemble's time
  includes the MAP networks they are built from; scoring is excluded. The machine also paused the grid's processes
  for minutes at a time while other work ran, and a pause counts in the wall time of the runs in flight: a large sd
  in the time column (NUTS, SGLD and node noise on Fashion-MNIST) is such a pause, not the method; the per-seed
  CSV shows which seed.
- **SG-MCMC** runs without a Metropolis correction at step sizes picked on one seed; its draws are biased by the
  step size, more so for the larger cyclical peak.
- **No flow VI on Fashion-MNIST**, and no full-covariance VI (`mvn`) anywhere: the flow guide refuses networks of
  more than 1 024 weights and `mvn` more than 4 096 (its covariance has P^2 entries), and the 3FC has 478 000. On
  moons, low-rank VI stands for the correlated Gaussian family.
- **KFAC Laplace on Fashion-MNIST** costs most of its time in the GLM predictive over all 478 000 weights (about
  150 ms per input on 2 CPU cores, whatever the batch), not in the fit.
- **Retrained MAP networks.** Run folders are committed without checkpoints; a run that reads a MAP network whose
  checkpoint is gone trains that network again from its seed first. The retrained network can differ from the first
  in the last digits (thread scheduling), and the runs trained after it (here the Fashion-MNIST KFAC Laplace runs)
  are built on the retrained one, the others (last-layer Laplace, the ensemble) on the first.
- **Scale.** The `cpu` profile's Fashion-MNIST network is a 3FC of 400 units per layer on 5 000 images, not the
  One Simple Trick paper's 1 000 units on 60 000 images; rankings may change with scale."""


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections (a table per data set, the moons maps, the summary, the caveats) and verdicts."""
    from pyro_bnn.reproduce.papers.posterior_families_figures import moons_maps

    sections = []
    for dataset, title in DATASETS.items():
        table, csv_name = dataset_table(records, dataset, out)
        text = ("Mean ± sd over seeds. KL: nats, mean over test points. sd ratio: each weight's marginal sd over "
                "NUTS's, after aligning hidden units; median over weights.") if dataset == "moons" else (
                "Mean ± sd over seeds. Out-of-domain inputs: MNIST test digits.")  # fmt: skip
        text += " " + CONFORMAL_NOTE.replace(
            "(`pyro-bnn reproduce NAME --rescore` adds them from its checkpoint)",
            "(these families' runs keep no checkpoint to re-score: a re-run of the grid records them)",
        )
        sections.append(Section(title, text, tables=[table], csv_files=[csv_name]))
    figure = moons_maps(records, out)
    if figure is not None:
        sections.append(Section("Moons predictive maps", "Posterior-mean probability of class 1 (seed "
                                f"{figure[1]}); the line is p = 0.5, the dots the training points.",
                                figures=[figure[0]]))  # fmt: skip
    lines = summary_lines(records)
    sections.append(Section(
        "Which family for what",
        "Written from the measured values (best mean; the families the seeds do not separate from it named):\n\n"
        + ("\n".join(lines) if lines else "No family has finished yet."),
    ))  # fmt: skip
    sections.append(Section("Caveats", CAVEATS))
    return Analysis(sections, headlines(records))
