"""The verdict rules of ``implicit-bnn`` as functions: node noise against each rival in one metric
(:func:`contrast`, :func:`rival_contrasts`, :func:`rival_headline`), Fig. 4's degradation of weight-space VI with
width, and the section that shows them (:func:`rival_verdicts`). The rules in words are the docstring of
:mod:`pyro_bnn.reproduce.papers.implicit_bnn.analysis`, which the report cites.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyro_bnn.reproduce.comparability import CellCheck
from pyro_bnn.reproduce.papers.implicit_bnn.measures import CORRUPTIONS
from pyro_bnn.reproduce.papers.implicit_bnn.plan import (
    CIFAR_COMPARABLE,
    COMPARABLE,
    FIG_4_KNEE_WIDTH,
    NO_EFFECT_WITHIN,
    PUBLISHED_LENET_ACCURACY,
    PUBLISHED_TABLES_3_TO_5,
)
from pyro_bnn.reproduce.papers.implicit_bnn.records import (
    CORRUPTION_NAMES,
    METHOD_NAMES,
    _corrupted,
    _has_corruptions,
    _method_metrics,
    _method_records,
    _metric,
    _untested_widths_note,
)
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Verdict
from pyro_bnn.reproduce.report import compare, format_mean_sd, markdown_table, mean_sd, overall_verdict, select

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
