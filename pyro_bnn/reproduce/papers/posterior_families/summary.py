"""The summary of ``posterior-families``' report, written from the measured values: for each question (closest
to NUTS, best NLL, best calibration, best out-of-domain detection, cheapest) the family with the best mean and
the families the seeds do not separate from it, and those at the worst possible value (a sd ratio of 0) on every
seed (:func:`best_value`, :func:`summary_lines`).
"""

from __future__ import annotations

import math
from typing import Any

from pyro_bnn.reproduce.papers.posterior_families.plan import FAMILIES
from pyro_bnn.reproduce.papers.posterior_families.tables import CHANCE, COLUMNS, DATASETS, NAMES, best_families, values
from pyro_bnn.reproduce.planned import RunRecord
from pyro_bnn.reproduce.report import mean_sd

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
            for family in found["worst"]:  # a ratio of 0 on every seed: no t-test needed, and none to be read as tied
                mean = mean_sd(values(records, dataset, family, key))[0]
                name, title = NAMES[family], COLUMNS[key][0]
                tied += f"; {name} has {title} {mean:.{digits}f} on every seed, the farthest possible from 1"
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
