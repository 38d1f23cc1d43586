"""Tables, the "which family for what" summary and the verdicts of ``posterior-families``, from its run records
(the figure: :mod:`.figures`).

Every number is a mean ± sd over the seeds a family finished. Comparisons between two families use Welch's t-test
over seeds (:func:`~pyro_bnn.reproduce.report.compare`, level 0.05): a difference is called one only when the seeds
separate it. The summary's lines are written from the measured values: for each question (closest to NUTS,
best NLL, best calibration, best out-of-domain detection, cheapest), the family with the best mean and the families
the seeds cannot tell from it.

**Out-of-domain AUROC** is :func:`pyro_bnn.evaluation.ood_detection`'s: the out-of-domain inputs are the positive
class and the predictive entropy the score (higher: more likely out of domain), so 0.5 is chance, above 0.5 the
entropy detects them and below 0.5 it is *inverted* (the in-domain inputs rank as more uncertain): a failure to
detect, not a weaker detection.

**Cost** of a run (:func:`run_cost`): its fit plus its scoring. The fit is the run's recorded ``fit_seconds`` (the
MAP networks a Laplace fit or an ensemble is built from included, the NUTS reference not); the scoring is the rest of
the run's own recorded wall time (``RunRecord.seconds``, less the part of ``fit_seconds`` spent in the run itself):
loading, the test and out-of-domain predictives and on moons the comparison with NUTS and the predictive map. The
"cheapest" lines rank the total.

Verdict rules (each an expectation from the literature that the issue asks to check):

- **Mean-field VI is narrower than NUTS** (moons): *holds* when the median sd ratio of mean-field VI is below 1 and
  separated from 1 over seeds, *does not hold* when it is above 1 and separated, *inconclusive* otherwise.
- **SG-MCMC's predictive is closer to NUTS than mean-field VI's** (moons; SGLD and cyclical SGLD each against
  mean-field, by the KL from NUTS): *holds* when both are smaller and separated, *does not hold* when one is larger
  and separated, *inconclusive* otherwise.
- **A deep ensemble detects out-of-domain inputs better than mean-field VI** (AUROC, per data set): a data set
  *holds* only when the ensemble's AUROC is above 0.5 (separated from it over seeds) and above mean-field VI's
  (separated); it *does not hold* when the ensemble's AUROC is below 0.5 and separated (an inverted score detects
  nothing, whatever mean-field VI's), or when mean-field VI's is higher and separated; *inconclusive* otherwise.
  The claim *holds* when every data set holds, *does not hold* when half of them or more do not
  (:func:`~pyro_bnn.reproduce.report.overall_verdict`).
- **A Laplace approximation improves the NLL of its MAP network** (KFAC, per data set, against the MAP member it
  was fitted around): *holds* when its NLL is lower and separated on every data set, *does not hold* when higher
  and separated on half of them or more, *inconclusive* otherwise.

A data set of the last two is *not comparable at this scale* (:attr:`~pyro_bnn.reproduce.planned.Verdict.
NOT_COMPARABLE`) when a MAP network it rests on (the ensemble's members; the Laplace fit's MAP network) did not
converge by :func:`pyro_bnn.reproduce.comparability.training_state` (at its epoch cap, still improving). Only the
MAP networks record a per-epoch validation history; the families' own runs (VI, the samplers, Laplace, the ensemble)
record none, so their convergence is not judged.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pyro_bnn.reproduce.comparability import check_cell
from pyro_bnn.reproduce.papers.posterior_families.plan import FAMILIES
from pyro_bnn.reproduce.planned import Analysis, Headline, Profile, RunRecord, Section, Verdict
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
from pyro_bnn.runs.scoring import CONFORMAL_KEYS

DATASETS = {"moons": "Two moons (2-5-5-2 tanh net, NUTS reference)", "fashion-mnist": "Fashion-MNIST subset (3FC)"}

COLUMNS = {
    "accuracy": ("accuracy", 3, True),
    "nll": ("NLL", 3, False),
    "ece": ("ECE", 3, False),
    "conformal_coverage": ("coverage", 3, None),
    "conformal_set_size": ("set size", 2, False),
    "ood_auroc": ("OOD AUROC", 3, True),
    "fit_seconds": ("fit (s)", 1, False),
    "scoring_seconds": ("scoring (s)", 1, False),
    "total_seconds": ("total (s)", 1, False),
    "kl_to_nuts": ("KL(NUTS ‖ family)", 4, False),
    "sd_ratio_median": ("sd ratio (median)", 2, None),
    "sd_ratio_output_median": ("sd ratio, output layer", 2, None),
}
"""Metric key -> (column title, digits, higher is better; None: closest to 1 is best). The conformal columns are
shown, not ranked."""

MOONS_ONLY = ("kl_to_nuts", "sd_ratio_median", "sd_ratio_output_median")

COST_KEYS = ("fit_seconds", "scoring_seconds", "total_seconds")
"""The cost of a run (:func:`run_cost`): its fit, its scoring and their sum."""

CHANCE = 0.5
"""The AUROC of a score that does not tell out-of-domain inputs from in-domain ones."""

NAMES = {
    "nuts": "NUTS", "mean-field": "mean-field VI", "low-rank": "low-rank VI", "flow": "flow VI (IAF)",
    "laplace-last-layer": "Laplace, last layer", "laplace-kfac": "Laplace, KFAC", "sgld": "SGLD",
    "cyclical-sgld": "cyclical SGLD", "swag": "SWAG", "multiswag": "MultiSWAG", "ensemble": "deep ensemble",
    "node-noise": "node-noise mixture",
    "map": "MAP network (one)",
}  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _members(record: RunRecord, by_id: dict[str, RunRecord]) -> list[RunRecord]:
    """The records of the runs ``record``'s family is built from (MAP networks), the NUTS reference left out."""
    return [by_id[m.run_id] for m in record.spec.members if not m.runner.endswith(":nuts") and m.run_id in by_id]


def run_cost(record: RunRecord, by_id: dict[str, RunRecord]) -> dict[str, float]:
    """The cost of a family's run (``by_id``: every record by run id, for its members): ``fit_seconds`` as recorded
    (its MAP networks included), ``scoring_seconds`` (the run's own wall time ``record.seconds`` less the part of
    the fit spent in it, ``fit_seconds`` less the members' recorded seconds) and ``total_seconds``, their sum;
    ``{}`` for a run without a recorded fit (a MAP network).

    Where that part does not lie between 0 and the run's own time, a member's record was rewritten after the run
    summed it (a MAP network retrained since): the run's own time is then counted as scoring, which over-counts the
    total by the run's own fit at most (seconds for a Laplace fit, nothing for an ensemble, which fits nothing
    itself)."""
    fit = record.metrics.get("fit_seconds")
    if not _number(fit):
        return {}
    own_fit = fit - sum(member.seconds for member in _members(record, by_id))
    if not 0.0 <= own_fit <= record.seconds:
        own_fit = 0.0
    scoring = max(record.seconds - own_fit, 0.0)
    return {"fit_seconds": float(fit), "scoring_seconds": scoring, "total_seconds": float(fit) + scoring}


def metric(record: RunRecord, key: str, by_id: dict[str, RunRecord]) -> Any:
    """``record``'s value of ``key``: a recorded metric, or a part of its cost (:data:`COST_KEYS`)."""
    if key in COST_KEYS:
        return run_cost(record, by_id).get(key)
    return record.metrics.get(key)


def values(records: list[RunRecord], dataset: str, family: str, key: str) -> list[float]:
    """The per-seed values of ``key`` of one family on one data set (``map``: the first MAP member)."""
    tag = "map0" if family == "map" else family
    by_id = {r.spec.run_id: r for r in records} if key in COST_KEYS else {}
    found = []
    for record in select(records, dataset=dataset, family=tag):
        value = metric(record, key, by_id)
        if _number(value):
            found.append(float(value))
    return found


def _families(records: list[RunRecord], dataset: str) -> list[str]:
    present = [f for f in (*FAMILIES, "map") if values(records, dataset, f, "accuracy")]
    return present


def dataset_table(records: list[RunRecord], dataset: str, out: Path) -> tuple[str, str]:
    """The Markdown table of one data set (families as rows, metrics as columns, mean ± sd over seeds) and the name
    of the CSV of its per-seed values, written into ``out``."""
    keys = [k for k in COLUMNS if dataset == "moons" or k not in MOONS_ONLY]
    by_id = {r.spec.run_id: r for r in records}
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
                             **{k: metric(record, k, by_id) for k in keys}})  # fmt: skip
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
    ("total_seconds", "the cheapest run (fit and scoring)", ("nuts",)),
)


def _cost_parts(records: list[RunRecord], dataset: str, family: str) -> str:
    """``fit 12.5 + scoring 1806.0`` (mean seconds over seeds) of one family on one data set."""
    fit, scoring = (mean_sd(values(records, dataset, family, k))[0] for k in ("fit_seconds", "scoring_seconds"))
    return f"fit {fit:.1f} + scoring {scoring:.1f}"


def best_value(records: list[RunRecord], dataset: str) -> dict[str, Any]:
    """Among the families with the best test NLL or one the seeds cannot separate from it, the one with the
    lowest mean total cost, fit and scoring (NUTS left out); ``{}`` without values. ``seconds`` is that total,
    ``fit_seconds`` and ``scoring_seconds`` its parts."""
    found = best_families(records, dataset, "nll", ("nuts",))
    if not found:
        return {}
    contenders = [found["best"], *found["ties"]]
    seconds = {f: mean_sd(values(records, dataset, f, "total_seconds"))[0] for f in contenders}
    seconds = {f: v for f, v in seconds.items() if math.isfinite(v)}
    if not seconds:
        return {}
    cheapest = min(seconds, key=seconds.get)
    nll = mean_sd(values(records, dataset, cheapest, "nll"))[0]
    return {
        "family": cheapest,
        "seconds": seconds[cheapest],
        "fit_seconds": mean_sd(values(records, dataset, cheapest, "fit_seconds"))[0],
        "scoring_seconds": mean_sd(values(records, dataset, cheapest, "scoring_seconds"))[0],
        "nll": nll,
        "best": found["best"],
        "best_nll": found["mean"],
    }


def inverted_families(records: list[RunRecord], dataset: str) -> list[str]:
    """The families whose mean out-of-domain AUROC on ``dataset`` is below 0.5 (an inverted score)."""
    found = {f: mean_sd(values(records, dataset, f, "ood_auroc"))[0] for f in FAMILIES}
    return [f for f, mean in found.items() if math.isfinite(mean) and mean < CHANCE]


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
            value = f"{COLUMNS[key][0]} {found['mean']:.{digits}f}"
            if key == "total_seconds":
                value += f": {_cost_parts(records, dataset, found['best'])}"
            extra = ""
            if key == "ood_auroc":
                inverted = inverted_families(records, dataset)
                if found["best"] in inverted:
                    extra = (" No family detects them: every mean AUROC is below 0.5, the predictive entropy ranking "
                             "the in-domain inputs as more uncertain (an inverted score).")  # fmt: skip
                elif inverted:
                    names = ", ".join(NAMES[f] for f in inverted)
                    extra = (" Mean AUROC below 0.5, an inverted score that detects nothing (the predictive entropy "
                             f"ranks the in-domain inputs as more uncertain): {names}.")  # fmt: skip
            lines.append(
                f"- **{question[0].upper() + question[1:]}** on {dataset}: {NAMES[found['best']]} ({value}){tied}."
                + extra
            )
    for dataset in DATASETS:
        found = best_value(records, dataset)
        if found:
            lines.append(
                f"- **The cheapest family whose NLL the seeds cannot tell from the best** on {dataset}: "
                f"{NAMES[found['family']]} (NLL {found['nll']:.3f} in {found['seconds']:.1f} s: fit "
                f"{found['fit_seconds']:.1f} + scoring {found['scoring_seconds']:.1f}; the best mean is "
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


def detection(aurocs: list[float]) -> Verdict:
    """Whether out-of-domain AUROCs (one per seed) show a detection: HOLDS when above 0.5 and separated from it over
    seeds, DOES_NOT_HOLD when below 0.5 and separated (an inverted score: the in-domain inputs rank as more
    uncertain), INCONCLUSIVE otherwise (chance, or fewer than 2 seeds)."""
    if len(aurocs) < 2:
        return Verdict.INCONCLUSIVE
    return _judge(aurocs, [CHANCE] * len(aurocs), True)


def ood_cell(ensemble: list[float], mean_field: list[float]) -> tuple[Verdict, str]:
    """The verdict of one data set on "a deep ensemble detects out-of-domain inputs better than mean-field VI"
    (rule: module docstring) from the per-seed AUROCs, and what the AUROCs say in words (empty when both detect)."""
    comparison = _judge(ensemble, mean_field, True)
    ours, theirs = detection(ensemble), detection(mean_field)
    if ours is Verdict.HOLDS:
        verdict = comparison
    elif ours is Verdict.DOES_NOT_HOLD:
        verdict = Verdict.DOES_NOT_HOLD
    else:
        verdict = Verdict.DOES_NOT_HOLD if comparison is Verdict.DOES_NOT_HOLD else Verdict.INCONCLUSIVE
    inverted = "the predictive entropy ranks the in-domain inputs as more uncertain than the out-of-domain ones"
    if ours is Verdict.DOES_NOT_HOLD and theirs is Verdict.DOES_NOT_HOLD:
        words = f"both below 0.5: {inverted} (an inverted score), so neither family detects them"
    elif ours is Verdict.DOES_NOT_HOLD:
        words = f"the ensemble's below 0.5: {inverted} (an inverted score), so it does not detect them"
    elif ours is Verdict.INCONCLUSIVE:
        words = "the ensemble's not separated from 0.5 (chance)"
    elif theirs is Verdict.DOES_NOT_HOLD:
        words = "mean-field VI's below 0.5 (an inverted score)"
    else:
        words = ""
    return verdict, words


def convergence(records: list[RunRecord], dataset: str, family: str) -> str:
    """Why the MAP networks that ``family``'s runs on ``dataset`` are built from make the data set not comparable
    (:func:`pyro_bnn.reproduce.comparability.check_cell`, no published accuracy: some did not converge), or ``""``.
    Runs without a per-epoch validation history cannot be judged and are left out."""
    by_id = {r.spec.run_id: r for r in records}
    networks: dict[str, RunRecord] = {}
    for record in select(records, dataset=dataset, family=family):
        networks.update((m.spec.run_id, m) for m in _members(record, by_id) if m.history)
    if not networks:
        return ""
    check = check_cell(list(networks.values()), None, 0.0)
    return "" if check.comparable else f"of the MAP networks it is built on, {check.reason}"


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
    for family, other, key, claim in (
        ("ensemble", "mean-field", "ood_auroc",
         "A deep ensemble detects out-of-domain inputs better than mean-field VI"),
        ("laplace-kfac", "map", "nll", "A KFAC Laplace approximation improves the NLL of its MAP network"),
    ):  # fmt: skip
        verdicts, parts = [], []
        for dataset in DATASETS:
            a, b = values(records, dataset, family, key), values(records, dataset, other, key)
            if not (a and b):
                continue
            if key == "ood_auroc":
                verdict, words = ood_cell(a, b)
            else:
                verdict, words = _judge(a, b, False), ""
            words = f", {words}" if words else ""
            why = convergence(records, dataset, family)
            if why:
                verdicts.append(Verdict.NOT_COMPARABLE)
                status = f"{Verdict.NOT_COMPARABLE.value}: {why}; the numbers alone say {verdict.value}"
            else:
                verdicts.append(verdict)
                status = verdict.value
            parts.append(f"{dataset}: {_fmt(a)} against {_fmt(b)}{words} ({status})")
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
- **Out-of-domain AUROC** (`pyro_bnn.evaluation.ood_detection`) takes the out-of-domain inputs as the positive
  class and the predictive entropy as the score: 0.5 is chance, above 0.5 the entropy detects the out-of-domain
  inputs, and below 0.5 the score is *inverted*: the in-domain inputs rank as more uncertain than the out-of-domain
  ones, which is a failure to detect (the OOD verdict counts it as one), not a weaker detection. On moons the
  out-of-domain inputs are points on a circle far around the data: a tanh network's predictions saturate there, so
  the predictive entropy is often *lower* out of domain than near the decision boundary; an AUROC below 0.5 there is
  a finding about the score, not a bug. On Fashion-MNIST they are MNIST's test digits.
- **Cost** is the fit plus the scoring of a run, on a shared 2-core machine, one torch thread per run. *fit*: the
  run's recorded `fit_seconds`, the MAP networks a Laplace fit or an ensemble is built from included (not the NUTS
  reference the moons families are compared with); *scoring*: the rest of the run's own recorded wall time (loading,
  the test and out-of-domain predictives, and on moons the comparison with NUTS and the predictive map); *total*:
  their sum, which the "cheapest" lines rank. Where a MAP network's record was rewritten after a family summed its
  time (the retrained Fashion-MNIST MAP networks, below), the family's own time all counts as scoring: its total is
  then over by its own fit at most (a few seconds for last-layer Laplace, nothing for the ensemble). The machine
  also paused the grid's processes for minutes at a time while other work ran, and a pause counts in the wall time
  of the runs in flight: a large sd in a time column (NUTS, SGLD and node noise on Fashion-MNIST) is such a pause,
  not the method; the per-seed CSV shows which seed.
- **SG-MCMC** runs without a Metropolis correction at step sizes picked on one seed; its draws are biased by the
  step size, more so for the larger cyclical peak.
- **No flow VI on Fashion-MNIST**, and no full-covariance VI (`mvn`) anywhere: the flow guide refuses networks of
  more than 1 024 weights and `mvn` more than 4 096 (its covariance has P^2 entries), and the 3FC has 478 000. On
  moons, low-rank VI stands for the correlated Gaussian family.
- **KFAC Laplace on Fashion-MNIST** costs most of its time in the GLM predictive over all 478 000 weights (about
  150 ms per input on 2 CPU cores, whatever the batch): its scoring, not its fit, which is why its total is the
  largest of any Fashion-MNIST family though its fit is the smallest.
- **Convergence.** The two verdicts that rest on MAP networks (the ensemble's members, the KFAC fit's MAP network)
  judge a data set only when every such network converged by the shared rule (`pyro_bnn.reproduce.comparability`:
  stopped by patience, or at its epoch cap with its validation accuracy flat over its last 3 epochs); otherwise the
  data set is *not comparable at this scale*, with what its numbers alone would say. The families' own runs (VI,
  the samplers, Laplace, the ensemble, NUTS) record no per-epoch validation history, so their convergence is not
  judged; NUTS's and SG-MCMC's mixing is not measured here either.
- **Retrained MAP networks.** Run folders are committed without checkpoints; a run that reads a MAP network whose
  checkpoint is gone trains that network again from its seed first. The retrained network can differ from the first
  in the last digits (thread scheduling), and the runs trained after it (here the Fashion-MNIST KFAC Laplace runs)
  are built on the retrained one, the others (last-layer Laplace, the ensemble) on the first.
- **Scale.** The `cpu` profile's Fashion-MNIST network is a 3FC of 400 units per layer on 5 000 images, not the
  One Simple Trick paper's 1 000 units on 60 000 images; rankings may change with scale."""


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections (a table per data set, the moons maps, the summary, the caveats) and verdicts."""
    from pyro_bnn.reproduce.papers.posterior_families.figures import moons_maps

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
