"""Tables, figures and verdicts of ``implicit-bnn`` from its run records.

The rules behind the verdicts (per-seed values compared with :func:`~pyro_bnn.reproduce.report.compare`, Welch's
t-test at level 0.05: a gap "is separated" when the seeds tell the two groups apart; its 95 % interval is the gap ±
the t quantile at the Welch-Satterthwaite degrees of freedom times its standard error):

- **Comparability first** (:mod:`pyro_bnn.reproduce.comparability`, the rules declared in
  :mod:`~pyro_bnn.reproduce.papers.implicit_bnn` beside the paper's numbers). A LeNet cell (node noise and one rival
  at one width, on clean or corrupted inputs) is judged only when every run of both converged under
  :data:`~pyro_bnn.reproduce.papers.implicit_bnn.COMPARABLE` (stopped by patience, or its validation accuracy flat
  over its last epochs at the cap; the paper prints no LeNet accuracy, so there is none to check); a CIFAR cell when
  every run converged (or trained the paper's 300 epochs) and each method's accuracy lies within 0.02 of its row of
  the paper's Table 3 (:data:`~pyro_bnn.reproduce.papers.implicit_bnn.CIFAR_COMPARABLE`); the cubic by
  :func:`~pyro_bnn.reproduce.papers.implicit_bnn.cubic.cubic_check`. A cell that fails is *not comparable at this
  scale*, with the reason and the numbers its runs reached (unjudged), never *does not hold*; a cell whose runs are
  missing is *inconclusive*, so an unfinished grid never reads *holds*. Every headline counts its comparable cells
  (:func:`~pyro_bnn.reproduce.report.overall_verdict`: *holds* when every comparable cell holds, *does not hold* when
  at least half do not, *no effect* when every one shows none, *not comparable* when none is comparable) and says
  how many there were. Every table shows each cell's training state
  (:attr:`~pyro_bnn.reproduce.comparability.CellCheck.summary`).
- **Node noise against a rival, in one metric** (:func:`contrast`; lower is better: test error in %, NLL, ECE with
  15 bins). The rivals are the paper's: the deterministic network (its SGD row, here the deep ensemble's first
  member), MC dropout and weight-space VI (Tables 3-5, Fig. 4). One headline per rival and metric, its cells the
  LeNet widths (and, against the deterministic network, the paper's CIFAR networks at the ``paper`` profile). Per
  comparable cell: *holds* when node noise is lower (separated); *does not hold* when it is higher (separated);
  *no effect within ±x* when the 95 % interval of the gap lies inside ± its metric's threshold in
  :data:`~pyro_bnn.reproduce.papers.implicit_bnn.NO_EFFECT_WITHIN` (the smallest effect the paper reports: such an
  interval rules out every effect it shows; x is the interval's farther end, the largest over the cells in a
  headline); *inconclusive* otherwise (fewer than 2 seeds, or an interval too wide to tell).
- **The same under corrupted inputs** (the grid's ``shift`` measurement): per width and corruption, each seed's test
  error and ECE averaged over the corrupted intensities (level 0, the clean images, left out), against the
  deterministic network and MC dropout, by the same rule and thresholds (the paper prints none for corrupted data).
- **Weight-space VI degrades past about 165k parameters; node noise does not** (Fig. 4,
  :data:`~pyro_bnn.reproduce.papers.implicit_bnn.FIG_4_KNEE_WIDTH`): per width past the paper's 4x point (x2 here),
  VI's and node noise's test error there against at x2. *Holds* when VI's rises (separated) and node noise's does not
  (no separated rise); *does not hold* when VI's falls (separated) or node noise's rises (separated); *no effect
  within ±x* when VI's change lies inside ± the error threshold; *inconclusive* otherwise. With no width past x2 the
  claim is untested, and the headline says so (*not comparable at this scale*).
- **Weight-space VI underfits more as depth grows; node noise does not**: :mod:`.cubic`.
- **Node noise's predictive entropy rises with corruption** (the paper's Fig. 8): per corruption, at the first
  width, *holds* when the mean predictive entropy at the strongest level is above the clean one (separated), *does
  not hold* when it is not above (separated gap <= 0), *inconclusive* otherwise (the paper prints no effect size,
  so never *no effect*); judged only when node noise's runs converged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from pyro_bnn.plots import save_figure
from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.implicit_bnn.cubic import cubic_section
from pyro_bnn.reproduce.papers.implicit_bnn.measures import CORRUPTIONS
from pyro_bnn.reproduce.papers.implicit_bnn.plan import (
    CIFAR_COMPARABLE,
    COMPARABLE,
    FIG_4_KNEE_WIDTH,
    METHODS,
    NO_EFFECT_WITHIN,
    OOD_DATA,
    PUBLISHED_LENET_ACCURACY,
    PUBLISHED_TABLES_3_TO_5,
)
from pyro_bnn.reproduce.planned import Analysis, Headline, Profile, RunRecord, Section, Verdict
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


def _training_runs(records: list[RunRecord], method: str, width: int) -> list[RunRecord]:
    """The runs whose training a method's row stands on: an ensemble's members, the tempered network's deterministic
    run, otherwise the method's own runs."""
    if method == "ensemble":
        return [
            r for r in select(records, part="lenet", width=width) if r.spec.tag("method") in ("deterministic", "member")
        ]
    return _method_records(records, "deterministic" if method == "temperature" else method, width=width)


def _lenet_parameters(width: int) -> int:
    """Parameters of ``lenet:width`` on 28x28 images with 10 classes."""
    from pyro_bnn.models.lenet import LeNet

    return sum(p.numel() for p in LeNet((1, 28, 28), 10, width=width).parameters())


def _untested_widths_note(profile: Profile) -> str:
    """Why the paper's "VI degrades past about 165k parameters" is untested at the profile's widths (empty when it
    is tested)."""
    knee = FIG_4_KNEE_WIDTH
    if knee in profile["widths"] and any(w > knee for w in profile["widths"]):
        return ""
    widths = " and ".join(f"x{w} ({_lenet_parameters(w):,} parameters)" for w in profile["widths"])
    return (
        f"The `{profile.name}` profile's LeNet widths stop at {widths}; the paper's "
        f"weight-space VI degrades only past about 165k parameters, its 4x point (x{knee} here), at its 16x and 64x "
        f"widths (x4 and x8 here, {_lenet_parameters(4):,} and {_lenet_parameters(8):,} parameters), which only "
        f"the `paper` profile runs. The `{profile.name}` profile's widths were chosen to fit its budget "
        f"({profile.summary})."
    )


def _widths(records: list[RunRecord], profile: Profile, out: Path) -> Section:
    rows, csv_rows = [], []
    for width in profile["widths"]:
        for method in METHODS:
            runs = _method_records(records, method, width=width)
            metrics = [_method_metrics(r, method) for r in runs]
            if method == "ensemble":
                seconds = [_ensemble_seconds(records, width, r.spec.tag("seed")) for r in runs]
            elif method == "temperature":
                seconds = [None] * len(runs)  # the deterministic run's; fitting T takes well under a second
            else:
                seconds = [_seconds_per_epoch(r) for r in runs]
            values = {
                "error": [100 * (1 - m["accuracy"]) for m in metrics],
                "nll": [m["nll"] for m in metrics],
                "ece": [m["ece"] for m in metrics],
            }
            name = METHOD_NAMES[method]
            if method == "temperature":
                name += f" (T = {format_mean_sd([r.metrics['shift']['temperature'] for r in runs], 2)})"
            check = COMPARABLE.check(_training_runs(records, method, width), PUBLISHED_LENET_ACCURACY)
            rows.append(
                [
                    f"x{width}",
                    name,
                    len(runs),
                    format_mean_sd(values["error"], 2),
                    format_mean_sd(values["nll"], 3),
                    format_mean_sd(values["ece"], 3),
                    *metric_cells(runs if method != "temperature" else []),
                    format_mean_sd([t for t in seconds if t is not None], 1),
                    ("members: " if method == "ensemble" else "") + check.summary,
                ]
            )
            for r, m, t in zip(runs, metrics, seconds, strict=True):
                csv_rows.append(
                    {"width": width, "method": method, "seed": r.spec.tag("seed"), **m, "seconds_per_epoch": t}
                )
    write_csv(out / "lenet.csv", csv_rows)
    table = markdown_table(
        ["width", "method", "seeds", "test error %", "NLL", "ECE (15 bins)", "coverage (α = 0.1)", "set size",
         "s / epoch", "training"],
        rows,
        "llrrrrrrrl",
    )  # fmt: skip
    untested = _untested_widths_note(profile)
    text = (
        "LeNet widened by M (``lenet:M``: M = 2 has 4x the parameters, the paper's Fig. 4 axis) on Fashion-MNIST, "
        "every method on the same training examples for the same epochs. Test metrics on the whole test set, mean ± "
        "sd over seeds (per seed in `lenet.csv`). *deterministic* is the ensemble's first member; *+ temperature* "
        "tempers its predictive with T fitted on the validation split (NLL, L-BFGS on log T). *s / epoch*: training "
        "only, one CPU thread; for the ensemble, all members together. The grid ran two runs at a time on a 2-core "
        "machine that also did other work, so the seconds compare only roughly. *Training*: how the row's runs "
        "ended (for the ensemble, its members'; for the tempered network, the deterministic run's): how many "
        "converged, their epochs and mean test accuracy. The verdicts on these rows are in *Node noise against its "
        "rivals*. "
        + (
            f"The paper's Fig. 4 claim that weight-space VI degrades is untested at these widths. {untested} "
            if untested
            else ""
        )
        + f"The tempered predictive has no conformal sets (—). {CONFORMAL_NOTE}"
    )
    section = Section("LeNet width: node noise against weight-space VI and the baselines (Fig. 4)", text, [table])
    section.csv_files.append("lenet.csv")
    return section


# ------------------------------------------------------------------------------------------------ rival verdicts

METRIC_NAMES = {"error": "test error", "nll": "NLL", "ece": "ECE"}
METRIC_DIGITS = {"error": 2, "nll": 3, "ece": 3}
RIVAL_NAMES = {"vi": "weight-space VI", "deterministic": "the deterministic network", "mc-dropout": "MC dropout"}


@dataclass(frozen=True)
class RivalClaim:
    """The paper's claim that node noise is lower than ``rival`` in ``metric`` (on clean test images, or averaged
    over the corrupted intensities when ``corrupted``)."""

    rival: str
    metric: str
    corrupted: bool = False
    source: str = ""

    @property
    def short(self) -> str:
        where = " under corruption" if self.corrupted else ""
        return f"{METRIC_NAMES[self.metric]}{where} vs {METHOD_NAMES[self.rival]}"

    def claim(self, cifar: bool) -> str:
        metric, rival = METRIC_NAMES[self.metric], RIVAL_NAMES[self.rival]
        if self.corrupted:
            return (
                f"Under corrupted inputs, node noise has a lower {metric} than {rival} (mean over the corrupted "
                "intensities, per LeNet width and corruption)."
            )
        where = "at every LeNet width" + (" and on the paper's CIFAR networks" if cifar else "")
        return f"Node noise has a lower {metric} than {rival} {where} ({self.source})."


RIVAL_CLAIMS = (
    RivalClaim("vi", "error", source="Fig. 4, Table 3"),
    RivalClaim("vi", "ece", source="Table 5"),
    RivalClaim("deterministic", "error", source="Table 3"),
    RivalClaim("deterministic", "nll", source="Table 4"),
    RivalClaim("deterministic", "ece", source="Table 5, Fig. 7"),
    RivalClaim("mc-dropout", "error", source="Table 3"),
    RivalClaim("mc-dropout", "nll", source="Table 4"),
    RivalClaim("mc-dropout", "ece", source="Table 5, Fig. 7"),
    RivalClaim("deterministic", "error", corrupted=True),
    RivalClaim("deterministic", "ece", corrupted=True),
    RivalClaim("mc-dropout", "error", corrupted=True),
    RivalClaim("mc-dropout", "ece", corrupted=True),
)
"""The verdicts on the paper's comparisons of node noise with its rivals, in the report's order."""


def half_width(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> float:
    """Half the width of the ``1 - alpha`` interval of ``mean(a) - mean(b)`` (Welch): the t quantile at the
    Welch-Satterthwaite degrees of freedom times the standard error; NaN with fewer than 2 values in a group. The
    gap is separated by :func:`~pyro_bnn.reproduce.report.compare` exactly when it exceeds this."""
    from scipy.stats import t

    (_, sd_a, n_a), (_, sd_b, n_b) = mean_sd(a), mean_sd(b)
    if n_a < 2 or n_b < 2:
        return math.nan
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    if va + vb == 0:
        return 0.0
    dof = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    return float(t.ppf(1 - alpha / 2, dof)) * math.sqrt(va + vb)


@dataclass(frozen=True)
class Contrast:
    """Node noise against a rival in one metric in one cell.

    Attributes:
        setting: The cell (``x1``, ``x2, Gaussian blend``, ``cifar10 vgg16``).
        node: Node noise's per-seed values.
        rival: The rival's.
        checks: The comparability of node noise's runs and of the rival's.
        verdict: The cell's verdict (*not comparable* when a check fails).
        shows: What the values show, judged or not (``node noise lower, separated``).
        gap: ``mean(node) - mean(rival)``.
        half: Half the width of the gap's 95 % interval (NaN with fewer than 2 seeds).
        interval: For *no effect*, the interval's farther end from 0.
        paper: The paper's (node noise, rival) values for the cell, where it prints them.
        why: Why the cell is not comparable, in one phrase (empty when it is).
    """

    setting: str
    node: list[float]
    rival: list[float]
    checks: tuple[CellCheck, CellCheck]
    verdict: Verdict
    shows: str
    gap: float
    half: float
    interval: float | None = None
    paper: tuple[float, float] | None = None
    why: str = ""

    @property
    def label(self) -> str:
        if self.verdict is Verdict.NO_EFFECT and self.interval is not None:
            return f"no effect within ±{self.interval:.3g}"
        return self.verdict.value


def contrast(
    setting: str,
    node: Sequence[float],
    rival: Sequence[float],
    checks: tuple[CellCheck, CellCheck],
    within: float,
    paper: tuple[float, float] | None = None,
    why: str | None = None,
) -> Contrast:
    """The verdict of one cell (see the module docstring): node noise's ``node`` values against the rival's, lower
    being better; ``within``: the interval inside which a comparable cell reads *no effect*; ``why``: the reason to
    print when a check fails (by default both checks' reasons, named)."""
    node, rival = list(node), list(rival)
    if not node or not rival:
        return Contrast(setting, node, rival, checks, Verdict.INCONCLUSIVE, "runs missing", math.nan, math.nan)
    gap, half = compare(node, rival).gap, half_width(node, rival)
    separated = compare(node, rival).separated
    interval = None
    if separated:
        verdict = Verdict.HOLDS if gap < 0 else Verdict.DOES_NOT_HOLD
        shows = f"node noise {'lower' if gap < 0 else 'higher'}, separated"
    elif math.isnan(half):
        verdict, shows = Verdict.INCONCLUSIVE, "fewer than 2 seeds"
    elif abs(gap) + half <= within:
        verdict, interval = Verdict.NO_EFFECT, abs(gap) + half
        shows = f"the interval lies within ±{interval:.3g}, inside the paper's smallest effect ±{within:g}"
    else:
        verdict, shows = Verdict.INCONCLUSIVE, "the seeds' spread covers the gap"
    if all(check.comparable for check in checks):
        why = ""
    else:
        verdict, interval = Verdict.NOT_COMPARABLE, None
        if why is None:
            named = zip(("node noise", "rival"), checks, strict=True)
            why = "; ".join(f"{name}: {check.reason}" for name, check in named if check.reason)
    return Contrast(setting, node, rival, checks, verdict, shows, gap, half, interval, paper, why)


def _metric(values: dict[str, Any], metric: str) -> float:
    """``metric`` of a record's scores: test error in %, or the named value."""
    return 100 * (1 - values["accuracy"]) if metric == "error" else float(values[metric])


def _has_corruptions(record: RunRecord) -> bool:
    """Whether the record holds the ``shift`` measurement's corruption curves."""
    return "corruptions" in record.metrics.get("shift", {})


def _corrupted(record: RunRecord, method: str, corruption: str, metric: str) -> float:
    """``metric`` of one run averaged over the corrupted intensities of ``corruption`` (level 0, clean, left out)."""
    levels = _shift_values(record, method)["corruptions"][corruption]
    return statistics.fmean(_metric(level, metric) for level in levels if level["level"] > 0)


def rival_contrasts(records: list[RunRecord], profile: Profile, claim: RivalClaim) -> list[Contrast]:
    """Every cell of ``claim``: the profile's LeNet widths (times the corruptions when ``claim.corrupted``), and
    the CIFAR cells against the deterministic network on clean images."""
    cells = []
    within = NO_EFFECT_WITHIN[claim.metric]
    for width in profile["widths"]:
        node_runs = _method_records(records, "node-noise", width=width)
        rival_runs = _method_records(records, claim.rival, width=width)
        checks = (
            COMPARABLE.check(node_runs, PUBLISHED_LENET_ACCURACY),
            COMPARABLE.check(rival_runs, PUBLISHED_LENET_ACCURACY),
        )
        why = COMPARABLE.check(node_runs + rival_runs, PUBLISHED_LENET_ACCURACY).reason  # both sides pooled
        if not claim.corrupted:
            node = [_metric(_method_metrics(r, "node-noise"), claim.metric) for r in node_runs]
            rival = [_metric(_method_metrics(r, claim.rival), claim.metric) for r in rival_runs]
            cells.append(contrast(f"x{width}", node, rival, checks, within, why=why))
            continue
        shifted = [r for r in node_runs if _has_corruptions(r)], [r for r in rival_runs if _has_corruptions(r)]
        for corruption in CORRUPTIONS:
            node = [_corrupted(r, "node-noise", corruption, claim.metric) for r in shifted[0]]
            rival = [_corrupted(r, claim.rival, corruption, claim.metric) for r in shifted[1]]
            name = CORRUPTION_NAMES[corruption].split(" (")[0]
            cells.append(contrast(f"x{width}, {name}", node, rival, checks, within, why=why))
    if claim.rival == "deterministic" and not claim.corrupted:
        column = ("error", "nll", "ece").index(claim.metric)
        for dataset, model in profile["cifar"]:
            published = PUBLISHED_TABLES_3_TO_5[(dataset, model)]
            groups = [select(records, part="cifar", dataset=dataset, model=model, method=m) for m in
                      ("node-noise", "deterministic")]  # fmt: skip
            checks = tuple(
                CIFAR_COMPARABLE.check(runs, 1 - published[m][0] / 100)
                for runs, m in zip(groups, ("node-noise", "deterministic"), strict=True)
            )
            node, rival = ([_metric(r.metrics, claim.metric) for r in runs] for runs in groups)
            paper = (published["node-noise"][column], published["deterministic"][column])
            named = zip(("node noise", "deterministic"), checks, strict=True)
            why = "; ".join(f"{name}: {check.reason}" for name, check in named if check.reason)
            cells.append(contrast(f"{dataset} {model}", node, rival, checks, within, paper, why))  # type: ignore[arg-type]
    return cells


def _numbers(cell: Contrast, metric: str) -> str:
    digits = METRIC_DIGITS[metric]
    unit = " %" if metric == "error" else ""
    spread = "" if math.isnan(cell.half) else f" ± {cell.half:.{digits}f}"
    return (
        f"{mean_sd(cell.node)[0]:.{digits}f}{unit} vs {mean_sd(cell.rival)[0]:.{digits}f}{unit}, gap "
        f"{cell.gap:+.{digits}f}{spread}"
    )


def rival_headline(claim: RivalClaim, cells: list[Contrast], cifar: bool = False) -> Headline:
    """One headline over ``claim``'s cells: the verdict of the comparable ones, how many there were, and every
    cell's numbers (unjudged where it is not comparable)."""
    verdicts = [c.verdict for c in cells]
    overall = overall_verdict(verdicts)
    comparable = sum(v is not Verdict.NOT_COMPARABLE for v in verdicts)
    parts = []
    for cell in cells:
        if cell.verdict is Verdict.NOT_COMPARABLE:
            parts.append(
                f"{cell.setting}: not comparable ({cell.why}); unjudged, {_numbers(cell, claim.metric)}: {cell.shows}"
            )
        elif not (cell.node and cell.rival):
            parts.append(f"{cell.setting}: {cell.label} (runs missing)")
        else:
            parts.append(f"{cell.setting}: {cell.label} ({_numbers(cell, claim.metric)}: {cell.shows})")
    interval = None
    if overall is Verdict.NO_EFFECT:
        interval = max(c.interval for c in cells if c.interval is not None)
    reason = (
        f"{comparable} of {len(cells)} cells comparable. Node noise vs {METHOD_NAMES[claim.rival]}: "
        + "; ".join(parts)
        + "."
    )
    return Headline(claim.claim(cifar), overall, reason, interval)


def _degradation(records: list[RunRecord], profile: Profile) -> tuple[Headline, list[list[Any]]]:
    """The Fig. 4 headline (see the module docstring) and its rows of the cell table."""
    knee = FIG_4_KNEE_WIDTH
    claim = (
        f"Weight-space VI's test error rises past about 165k parameters (LeNet wider than x{knee}) while node "
        "noise's does not (Fig. 4)."
    )
    untested = _untested_widths_note(profile)
    if untested:
        return Headline(claim, Verdict.NOT_COMPARABLE, f"Untested at these widths. {untested}"), []

    def errors(method: str, width: int) -> tuple[list[float], CellCheck]:
        runs = _method_records(records, method, width=width)
        return [_metric(r.metrics, "error") for r in runs], COMPARABLE.check(runs, PUBLISHED_LENET_ACCURACY)

    within = NO_EFFECT_WITHIN["error"]
    verdicts, parts, rows, intervals = [], [], [], []
    for width in (w for w in profile["widths"] if w > knee):
        (vi_k, vi_k_check), (vi_w, vi_w_check) = errors("vi", knee), errors("vi", width)
        (nn_k, nn_k_check), (nn_w, nn_w_check) = errors("node-noise", knee), errors("node-noise", width)
        vi_rise, nn_rise = compare(vi_w, vi_k), compare(nn_w, nn_k)
        vi_half = half_width(vi_w, vi_k)
        checks = {f"VI x{knee}": vi_k_check, f"VI x{width}": vi_w_check, f"node noise x{knee}": nn_k_check,
                  f"node noise x{width}": nn_w_check}  # fmt: skip
        failing = "; ".join(f"{name}: {c.reason}" for name, c in checks.items() if not c.comparable)
        if (vi_rise.separated and vi_rise.gap < 0) or (nn_rise.separated and nn_rise.gap > 0):
            shows = "VI's error falls, separated" if vi_rise.separated and vi_rise.gap < 0 else (
                "node noise's error rises, separated")  # fmt: skip
            verdict = Verdict.DOES_NOT_HOLD
        elif vi_rise.separated:
            verdict, shows = Verdict.HOLDS, "VI's error rises, separated; node noise's does not"
        elif not math.isnan(vi_half) and abs(vi_rise.gap) + vi_half <= within:
            verdict, shows = Verdict.NO_EFFECT, f"VI's change lies within ±{abs(vi_rise.gap) + vi_half:.3g}"
        else:
            verdict, shows = Verdict.INCONCLUSIVE, "the seeds' spread covers VI's change"
        if not all((vi_k, vi_w, nn_k, nn_w)):
            verdict, shows = Verdict.INCONCLUSIVE, "runs missing"
        elif failing:
            verdict = Verdict.NOT_COMPARABLE
        if verdict is Verdict.NO_EFFECT:
            intervals.append(abs(vi_rise.gap) + vi_half)
        numbers = (
            f"x{knee} -> x{width}: VI {mean_sd(vi_k)[0]:.2f} -> {mean_sd(vi_w)[0]:.2f} % ({vi_rise.gap:+.2f}), node "
            f"noise {mean_sd(nn_k)[0]:.2f} -> {mean_sd(nn_w)[0]:.2f} % ({nn_rise.gap:+.2f})"
        )
        verdicts.append(verdict)
        judged = f"not comparable ({failing}); unjudged, {shows}" if verdict is Verdict.NOT_COMPARABLE else (
            f"{verdict.value} ({shows})")  # fmt: skip
        parts.append(f"{numbers}: {judged}")
        spread = "" if math.isnan(vi_half) else f" ± {vi_half:.2f}"
        rows.append(
            [f"test error past x{knee} (VI rises, node noise does not)", f"x{width} vs x{knee}",
             f"{format_mean_sd(nn_w, 2)} (x{knee}: {format_mean_sd(nn_k, 2)})",
             f"VI {format_mean_sd(vi_w, 2)} (x{knee}: {format_mean_sd(vi_k, 2)})", "—",
             f"VI {vi_rise.gap:+.2f}{spread}; node noise {nn_rise.gap:+.2f}", shows,
             f"x{width}: {nn_w_check.summary}", f"x{width}: {vi_w_check.summary}",
             verdict.value if verdict is not Verdict.NO_EFFECT else f"no effect within ±{intervals[-1]:.3g}"]
        )  # fmt: skip
    overall = overall_verdict(verdicts)
    comparable = sum(v is not Verdict.NOT_COMPARABLE for v in verdicts)
    interval = max(intervals) if overall is Verdict.NO_EFFECT else None
    reason = f"{comparable} of {len(verdicts)} cells comparable; " + "; ".join(parts) + "."
    return Headline(claim, overall, reason, interval), rows


def rival_verdicts(records: list[RunRecord], profile: Profile) -> tuple[Section, list[Headline]]:
    """The verdicts on node noise against its rivals (and Fig. 4's degradation), and the table of their cells."""
    cifar = bool(profile["cifar"])
    headlines, rows = [], []
    degradation, degradation_rows = _degradation(records, profile)
    for claim in RIVAL_CLAIMS:
        cells = rival_contrasts(records, profile, claim)
        headlines.append(rival_headline(claim, cells, cifar and claim.rival == "deterministic"))
        digits = METRIC_DIGITS[claim.metric]
        for cell in cells:
            rows.append(
                [
                    claim.short,
                    cell.setting,
                    format_mean_sd(cell.node, digits),
                    format_mean_sd(cell.rival, digits),
                    "—" if cell.paper is None else f"{cell.paper[0]:.{digits + 1}f} vs {cell.paper[1]:.{digits + 1}f}",
                    "—" if math.isnan(cell.gap) else
                    f"{cell.gap:+.{digits}f}" + ("" if math.isnan(cell.half) else f" ± {cell.half:.{digits}f}"),
                    cell.shows,
                    cell.checks[0].summary,
                    cell.checks[1].summary,
                    cell.label,
                ]
            )  # fmt: skip
    table = markdown_table(
        ["claim", "cell", "node noise", "rival", "paper (node noise vs rival)", "gap, 95 % interval",
         "the runs show", "training: node noise", "training: rival", "verdict"],
        rows + degradation_rows,
        "llrrrrllll",
    )  # fmt: skip
    thresholds = ", ".join(f"{METRIC_NAMES[m]} ±{v:g}" for m, v in NO_EFFECT_WITHIN.items())
    text = (
        "Node noise (K = 4) against each rival the paper compares it with, one row per cell of a verdict: mean ± "
        "sd over seeds (test error in %), the gap node noise - rival with its 95 % interval (Welch), what the "
        "seeds show, and how each side's runs ended. A cell is judged only when both sides' runs converged; "
        "otherwise its verdict is *not comparable at this scale* and *the runs show* is what they reached, "
        "unjudged. Lower is better in every metric. *Under corruption*: each seed's value averaged over the five "
        "corrupted intensities of the first "
        f"{profile['shift_images']} test images (the figures of *Corrupted inputs*). A comparable cell reads *no "
        f"effect within ±x* when its interval lies inside the smallest effect the paper reports ({thresholds}; "
        "the corrupted cells use the same, the paper prints none for them). LeNet: "
        + COMPARABLE.describe()
        + (" CIFAR: " + CIFAR_COMPARABLE.describe() if cifar else "")
    )
    section = Section("Node noise against its rivals", text, [table])
    return section, [degradation, *headlines]


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
        f"The first {profile['shift_images']} test images corrupted at rising intensity (level 0: clean), every method "
        "of a seed on the same corrupted images: accuracy, ECE and the mean predictive entropy split into its "
        "aleatoric part (expected entropy of one sample) and its epistemic part (mutual information); mean over "
        "seeds, one figure per width (per seed in `corruptions.csv`). A deterministic network has no epistemic part; "
        "temperature scaling tempers the mean predictive, so it has none either. The verdicts on accuracy and ECE "
        "under corruption are in *Node noise against its rivals*; the entropy verdict is judged only when node "
        "noise's runs converged (training as in the width table)."
    )
    section = Section("Corrupted inputs (Fig. 8)", text, figures=figures, csv_files=["corruptions.csv"])
    headline = Headline(
        "Node noise's mean predictive entropy rises as the inputs are corrupted (Gaussian blend, salt and pepper).",
        overall_verdict(verdicts),
        f"{sum(v is not Verdict.NOT_COMPARABLE for v in verdicts)} of {len(verdicts)} cells comparable"
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
            published = PUBLISHED_TABLES_3_TO_5[(dataset, model)][method]
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
                    "{:.2f} / {:.4f} / {:.4f}".format(*published),
                    CIFAR_COMPARABLE.check(runs, 1 - published[0] / 100).summary,
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
        ["data", "network", "method", "seeds", "test error %", "NLL", "ECE", "coverage (α = 0.1)", "set size",
         "paper: error % / NLL / ECE", "training"],
        rows,
        "lllrrrrrrrl",
    )  # fmt: skip
    text = (
        f"The paper's large networks ({profile['cifar_epochs']} epochs, no augmentation): node noise with the "
        "authors' setting against the same network trained deterministically. Mean ± sd over seeds; coverage and set "
        "size as in the LeNet width table. *Paper*: Tables 3-5 (iBNN-4 and SGD, mean of 5 seeds). *Training*: how "
        "the runs ended, their mean accuracy against the paper's. The verdicts are in *Node noise against its "
        "rivals*. " + CIFAR_COMPARABLE.describe()
    )
    return Section("VGG16 and WRN-28x10 on CIFAR (Table 2)", text, [table], csv_files=["cifar.csv"])


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections and headlines (see the module docstring for the verdict rules)."""
    cubic, cubic_headline = cubic_section(records, profile, out)
    widths = _widths(records, profile, out)
    rivals, rival_headlines = rival_verdicts(records, profile)
    components = _components(records, profile, out)
    corruptions, corruption_headline = _corruptions(records, profile, out)
    ood = _ood(records, profile, out)
    sections = [cubic, widths, rivals, components, corruptions, ood]
    if profile["cifar"]:
        sections.append(_cifar(records, profile, out))
    return Analysis(sections, [cubic_headline, *rival_headlines, corruption_headline])
