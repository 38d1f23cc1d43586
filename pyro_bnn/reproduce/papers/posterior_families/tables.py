"""The measured values of ``posterior-families`` per family and data set: each run's metrics and cost (an
ensemble's or a Laplace fit's with the MAP networks it rests on), the per-seed values of a column, a data set's
table (:func:`dataset_table`) and the families with the best mean in one column (:func:`best_families`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pyro_bnn.reproduce.code_state import cell_code_states
from pyro_bnn.reproduce.papers.posterior_families.plan import FAMILIES
from pyro_bnn.reproduce.planned import RunRecord
from pyro_bnn.reproduce.report import compare, format_mean_sd, markdown_table, mean_sd, metric_cells, select, write_csv
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
        rows.append([NAMES[family], str(seeds), *cells, cell_code_states(runs)])
        for record in runs:
            csv_rows.append({"family": family, "seed": record.spec.tag("seed"),
                             **{k: metric(record, k, by_id) for k in keys}})  # fmt: skip
    name = f"{dataset}-families.csv"
    write_csv(out / name, csv_rows)
    return markdown_table(["family", "seeds", *[COLUMNS[k][0] for k in keys], "training code"], rows), name


def _score(key: str, value: float) -> float:
    """Larger is better; ``-inf`` for a value of 0 or less in a closest-to-1 column (a ratio infinitely far from 1
    on a log scale: no spread at all), the worst possible score."""
    better = COLUMNS[key][2]
    if better is None:
        return -abs(math.log(value)) if value > 0 else -math.inf
    return value if better else -value


def _mean_score(scores: list[float]) -> float:
    """The mean of per-seed scores, ``-inf`` when any seed scores ``-inf`` (unlike :func:`mean_sd`, which would
    drop it and average the rest, or return NaN when every seed does)."""
    return math.fsum(scores) / len(scores) if all(math.isfinite(s) for s in scores) else -math.inf


def _tied(scores: list[float], best: list[float]) -> bool:
    """Whether the seeds do not separate a family's per-seed ``scores`` from the best family's ``best``.

    :func:`~pyro_bnn.reproduce.report.compare` averages the finite values alone and calls a group with fewer than 2
    of them unseparated, so a family scoring ``-inf`` on its seeds would read as a tie with any best; its mean score
    is ``-inf``, infinitely far below a best with a finite one, so it is separated (worse). Two families both at
    ``-inf`` cannot be told apart."""
    if not math.isfinite(_mean_score(scores)) or not math.isfinite(_mean_score(best)):
        return _mean_score(scores) == _mean_score(best)
    return not compare(scores, best).separated


def best_families(records: list[RunRecord], dataset: str, key: str, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The family with the best mean score of ``key`` on ``dataset`` (:func:`_score` per seed), those whose seeds
    do not separate them from it (Welch's t-test on the scores, :func:`_tied`) and those at the worst possible
    score on every seed (a sd ratio of 0: ``worst``, never ties); ``{}`` when no family has the value. ``mean`` is
    the best family's mean value of ``key`` (not of its score)."""
    candidates = {}
    for family in FAMILIES:
        found = values(records, dataset, family, key)
        if family not in exclude and found:
            candidates[family] = found
    if not candidates:
        return {}
    scores = {f: [_score(key, v) for v in found] for f, found in candidates.items()}
    best = max(candidates, key=lambda f: _mean_score(scores[f]))
    ties = [f for f in candidates if f != best and _tied(scores[f], scores[best])]
    worst = [f for f in candidates if f != best and f not in ties and all(s == -math.inf for s in scores[f])]
    return {"best": best, "mean": mean_sd(candidates[best])[0], "ties": ties, "worst": worst}
