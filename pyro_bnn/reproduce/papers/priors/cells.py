"""The synthetic grid of ``priors`` as cells: the finished runs grouped by (data set, noise, prior) with their
validation scores and each family's tuned scale (:class:`Cells`), and the per-seed gains of the best hierarchical
cell over the tuned fixed scale (:func:`gains`) that the verdicts read.
"""

from __future__ import annotations

import math
from collections import Counter

from pyro_bnn.predict import Samples, predict
from pyro_bnn.reproduce.papers.priors.measures import draw_stored_posterior
from pyro_bnn.reproduce.papers.priors.plan import HYPERPRIORS
from pyro_bnn.reproduce.planned import Profile, RunRecord, Status
from pyro_bnn.reproduce.report import mean_sd, planned, select
from pyro_bnn.runs.runs import build_bnn, load_data
from pyro_bnn.runs.scoring import CONFORMAL_KEYS

SCALE_NAMES = {"halfnormal": "HalfNormal(1)", "halfcauchy": "HalfCauchy(1)", "inversegamma": "InverseGamma(1, 1)"}
FAMILY_NAMES = {"normal": "Normal", "laplace": "Laplace", "cauchy": "Cauchy", "flat": "flat"}


VAL_SAMPLES = 100
"""Posterior samples behind the validation metrics (as many as behind the test metrics)."""


def metric(record: RunRecord, key: str) -> float:
    """A test metric (``accuracy``, ``nll``, ``ece``; the conformal ones NaN where the record predates them) or a
    validation one (``val_accuracy``, ``val_nll``, filled in by :func:`add_validation_scores`)."""
    if key in CONFORMAL_KEYS:
        return float(record.metrics.get(key, math.nan))
    return float(record.metrics[key])


def add_validation_scores(record: RunRecord) -> None:
    """Adds ``val_accuracy`` and ``val_nll`` to ``record.metrics``: the final posterior's predictive on the run's
    validation points, with :data:`VAL_SAMPLES` draws from the posterior the record stores (the history's
    validation checks use a few samples each and move with the optimiser)."""
    config = record.config
    data = load_data(config)
    bnn, _ = build_bnn(config, data)
    draws = draw_stored_posterior(record.metrics, VAL_SAMPLES, seed=config.seed)
    scores = predict(bnn, Samples(draws), (data.val.x, data.val.y)).metrics()
    record.metrics.update(val_accuracy=scores["accuracy"], val_nll=scores["nll"])


class Cells:
    """The finished synthetic records grouped by cell, with the tuned scale of every family."""

    def __init__(self, records: list[RunRecord], profile: Profile) -> None:
        self.profile = profile
        self.records = records
        """Every record of the grid, of any status: its plan (:meth:`arm`)."""
        self.runs: dict[tuple[str, str, str, str], list[RunRecord]] = {}
        for record in select(records, part="synthetic"):
            key = tuple(record.spec.tag(k) for k in ("dataset", "noise", "family", "scale"))
            self.runs.setdefault(key, []).append(record)
        for runs in self.runs.values():
            runs.sort(key=lambda r: int(r.spec.tag("seed")))
        self.not_done: dict[tuple[str, str, str, str], list[RunRecord]] = {}
        """The synthetic records a table cannot count (not counted, failed, missing, damaged), by cell."""
        for record in records:
            if record.status is not Status.DONE and record.spec.tag("part") == "synthetic":
                key = tuple(record.spec.tag(k) for k in ("dataset", "noise", "family", "scale"))
                self.not_done.setdefault(key, []).append(record)

    def seeds_short(self) -> list[str]:
        """``moons high Laplace + HalfNormal(1): 4 of 5``: every cell with counted runs of fewer seeds than the grid
        planned for it (its other seeds not counted, failed or not run yet)."""
        return [
            f"{d} {n} {cell_name(f, s)}: {len(runs)} of {len(runs) + len(self.not_done[(d, n, f, s)])}"
            for (d, n, f, s), runs in self.runs.items()
            if self.not_done.get((d, n, f, s))
        ]

    def arm(self, dataset: str, noise: str, family: str, scale: str) -> tuple[int, int]:
        """One cell's ``(done, planned)`` runs: its counted runs and the grid's records of it, of any status
        (:func:`~pyro_bnn.reproduce.report.planned`), for :func:`~pyro_bnn.reproduce.report.runs_missing`."""
        tags = {"part": "synthetic", "dataset": dataset, "noise": noise, "family": family, "scale": scale}
        return len(self.runs.get((dataset, noise, family, scale), [])), len(planned(self.records, **tags))

    def absent(
        self, dataset: str, noise: str, kind: str, pairs: list[tuple[str, str]] | None = None
    ) -> dict[Status, int]:
        """The records of a panel's ``kind`` cells (``hyper``, ``fixed``, ``flat``; or of ``pairs``, ``(family,
        scale)``) that count in no table, by status (:func:`absent_text` puts them in words)."""
        return dict(
            Counter(
                record.status
                for (d, n, f, s), records in self.not_done.items()
                if (d, n) == (dataset, noise) and (cell_kind(f, s) == kind if pairs is None else (f, s) in pairs)
                for record in records
            )
        )

    def counted(self, dataset: str, noise: str, kind: str) -> bool:
        """Whether any of a panel's ``kind`` cells (``hyper``, ``fixed``, ``flat``) has counted runs."""
        return any(
            runs and (d, n) == (dataset, noise) and cell_kind(f, s) == kind for (d, n, f, s), runs in self.runs.items()
        )

    def panels(self) -> list[tuple[str, str]]:
        """``(dataset, noise)`` pairs with any finished run, in the profile's order."""
        return [
            (d, n)
            for d in self.profile["datasets"]
            for n in self.profile["noises"]
            if any(key[:2] == (d, n) for key in self.runs)
        ]

    def values(self, dataset: str, noise: str, family: str, scale: str, key: str) -> dict[int, float]:
        """``{seed: value}`` of one cell."""
        return {int(r.spec.tag("seed")): metric(r, key) for r in self.runs.get((dataset, noise, family, scale), [])}

    def common_seeds(self, dataset: str, noise: str, cells: list[tuple[str, str]] | None = None) -> set[int]:
        """The seeds every one of ``cells`` (``(family, scale)``; None: every cell of the panel) has finished: what
        a choice between those cells is made on."""
        keys = [key for key in self.runs if key[:2] == (dataset, noise) and (cells is None or key[2:] in cells)]
        seeds = [{int(r.spec.tag("seed")) for r in self.runs[key]} for key in keys]
        return set.intersection(*seeds) if seeds else set()

    def _choose(self, dataset: str, noise: str, candidates: list[tuple[str, str]]) -> tuple[str, str] | None:
        """The candidate ``(family, scale)`` with the best mean validation accuracy (ties: lower validation NLL)
        over the seeds every candidate has finished; None without candidates or without such a seed (a choice made
        on no common seed would be arbitrary)."""
        seeds = self.common_seeds(dataset, noise, candidates)
        if not candidates or not seeds:
            return None

        def key(candidate: tuple[str, str]) -> tuple[float, float]:
            def mean(name: str) -> float:
                values = self.values(dataset, noise, *candidate, name)
                return mean_sd([v for seed, v in values.items() if seed in seeds])[0]

            accuracy, nll = mean("val_accuracy"), mean("val_nll")
            return (accuracy if math.isfinite(accuracy) else -math.inf, -nll if math.isfinite(nll) else -math.inf)

        return max(candidates, key=key)

    def tuned(self, dataset: str, noise: str, family: str) -> str | None:
        """The fixed scale of ``family`` with the best mean validation accuracy (ties: lower validation NLL), on the
        seeds every fixed scale of the family has finished."""
        scales = [f"{v:g}" for v in self.profile["fixed_scales"] if self.runs.get((dataset, noise, family, f"{v:g}"))]
        chosen = self._choose(dataset, noise, [(family, scale) for scale in scales])
        return None if chosen is None else chosen[1]

    def rows(self, dataset: str, noise: str) -> list[tuple[str, str, str]]:
        """``(family, scale, kind)`` of the cells a table shows: each family's tuned fixed scale and hyperpriors,
        and flat."""
        rows = []
        for family in self.profile["families"]:
            tuned = self.tuned(dataset, noise, family)
            if tuned is not None:
                rows.append((family, tuned, "fixed"))
            hypers = [h for h in self.profile["hyperpriors"] if self.runs.get((dataset, noise, family, h))]
            rows += [(family, h, "hyper") for h in hypers]
        if self.runs.get((dataset, noise, "flat", "none")):
            rows.append(("flat", "none", "flat"))
        return rows

    def best(self, dataset: str, noise: str, kind: str | None = None) -> tuple[str, str] | None:
        """The ``(family, scale)`` among :meth:`rows` of ``kind`` (any: None) with the best mean validation
        accuracy (ties: lower validation NLL), on the seeds every candidate has finished."""
        candidates = [(f, s) for f, s, k in self.rows(dataset, noise) if kind is None or k == kind]
        return self._choose(dataset, noise, candidates)


def absent_text(counts: dict[Status, int]) -> str:
    """Runs that count in no table, by status, in words (``300 await `--retrain-stale`, trained from an uncommitted
    tree; 5 not run yet``)."""
    words = {
        Status.UNCOUNTED: "await `--retrain-stale`, trained from an uncommitted tree",
        Status.MISSING: "not run yet",
        Status.FAILED: "failed",
        Status.DAMAGED: "with a damaged record",
    }
    return "; ".join(f"{counts[status]} {text}" for status, text in words.items() if counts.get(status))


def cell_kind(family: str, scale: str) -> str:
    """``hyper``, ``flat`` or ``fixed``: what kind of prior a cell has."""
    return "hyper" if scale in HYPERPRIORS else "flat" if family == "flat" else "fixed"


def cell_name(family: str, scale: str) -> str:
    """``Normal, s = 0.3`` / ``Laplace + HalfCauchy(1)`` / ``flat``."""
    if family == "flat":
        return "flat"
    if scale in HYPERPRIORS:
        return f"{FAMILY_NAMES[family]} + {SCALE_NAMES[scale]}"
    return f"{FAMILY_NAMES[family]}, s = {scale}"


def gains(cells: Cells, dataset: str, noise: str) -> tuple[dict[int, float], tuple[str, str], tuple[str, str]] | None:
    """Per-seed test-accuracy gain of the best hierarchical cell over the best tuned fixed cell, and the two; None
    where a side has no best cell or the two share no seed."""
    hyper, fixed = cells.best(dataset, noise, "hyper"), cells.best(dataset, noise, "fixed")
    if hyper is None or fixed is None:
        return None
    a, b = cells.values(dataset, noise, *hyper, "accuracy"), cells.values(dataset, noise, *fixed, "accuracy")
    shared = sorted(a.keys() & b.keys())
    return ({s: a[s] - b[s] for s in shared}, hyper, fixed) if shared else None


def gain_arms(cells: Cells) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Per panel with a gain (:func:`gains`), the ``(done, planned)`` runs of its best hierarchical and best tuned
    fixed cell (:meth:`Cells.arm`): a gain short of any planned run is not judged on the seeds it has."""
    found = {}
    for dataset, noise in cells.panels():
        if (gain := gains(cells, dataset, noise)) is not None:
            found[(dataset, noise)] = [cells.arm(dataset, noise, *cell) for cell in gain[1:]]
    return found
