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
from pyro_bnn.reproduce.papers.implicit_bnn.claims import (
    METRIC_DIGITS,
    METRIC_NAMES,
    PAPER_CIFAR,
    RIVAL_CLAIMS,
    RivalClaim,
    lenet_scope,
)
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
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, Section, Verdict, bound_text, no_effect_text
from pyro_bnn.reproduce.report import (
    compare,
    finite_seeds,
    format_mean,
    format_mean_sd,
    format_signed,
    markdown_table,
    mean_sd,
    overall_verdict,
    overall_width,
    planned,
    runs_missing,
    select,
)


def half_width(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> float:
    """Half the width of the ``1 - alpha`` interval of ``mean(a) - mean(b)`` (Welch): the t quantile at the
    Welch-Satterthwaite degrees of freedom times the standard error; NaN with fewer than 2 values in a group. The
    gap is separated by :func:`~pyro_bnn.reproduce.report.compare` exactly when it exceeds this."""
    return compare(a, b, alpha).half_width


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
        missing: ``runs missing (k of n planned)`` when the cell is not judged for want of runs (empty otherwise).
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
    missing: str = ""

    @property
    def label(self) -> str:
        if self.verdict is Verdict.NO_EFFECT and self.interval is not None:
            return no_effect_text(self.interval)
        return self.verdict.value


def contrast(
    setting: str,
    node: Sequence[float],
    rival: Sequence[float],
    checks: tuple[CellCheck, CellCheck],
    within: float,
    paper: tuple[float, float] | None = None,
    why: str | None = None,
    planned: tuple[int, int] | None = None,
) -> Contrast:
    """The verdict of one cell (see the module docstring): node noise's ``node`` values against the rival's, lower
    being better; ``within``: the interval inside which a comparable cell reads *no effect*; ``why``: the reason to
    print when a check fails (by default both checks' reasons, named); ``planned``: the runs planned of node noise
    and of the rival (default: as many as values), a cell short of any being *inconclusive*, ``runs missing (k of n
    planned)``, whatever its values show."""
    node, rival = list(node), list(rival)
    if planned is None:
        absent = "" if node and rival else "runs missing"
    else:
        absent = runs_missing(*zip((len(node), len(rival)), planned, strict=True))
    if not node or not rival:
        return Contrast(setting, node, rival, checks, Verdict.INCONCLUSIVE, absent, math.nan, math.nan, missing=absent)
    (node_kept, rival_kept), left_out = finite_seeds({"node noise": node, "rival": rival}, "value")
    result = compare(node_kept, rival_kept)
    gap, half, separated = result.gap, result.half_width, result.separated
    interval = None
    if separated:
        verdict = Verdict.HOLDS if gap < 0 else Verdict.DOES_NOT_HOLD
        shows = f"node noise {'lower' if gap < 0 else 'higher'}, separated"
    elif min(len(node_kept), len(rival_kept)) < 2:
        verdict, shows = Verdict.INCONCLUSIVE, "fewer than 2 seeds"
    elif abs(gap) + half <= within:
        verdict, interval = Verdict.NO_EFFECT, abs(gap) + half
        shows = f"the interval lies within ±{bound_text(interval)}, inside the paper's smallest effect ±{within:g}"
    else:
        verdict, shows = Verdict.INCONCLUSIVE, "the seeds' spread covers the gap"
    shows += f"; {left_out}" if left_out else ""
    if absent:  # some seeds, not all: the numbers show what they reached, unjudged
        return Contrast(setting, node, rival, checks, Verdict.INCONCLUSIVE, absent, gap, half, missing=absent)
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
        plan = tuple(len(_method_records(records, m, done=False, width=width)) for m in ("node-noise", claim.rival))
        checks = (
            COMPARABLE.check(node_runs, PUBLISHED_LENET_ACCURACY),
            COMPARABLE.check(rival_runs, PUBLISHED_LENET_ACCURACY),
        )
        why = COMPARABLE.check(node_runs + rival_runs, PUBLISHED_LENET_ACCURACY).reason  # both sides pooled
        if not claim.corrupted:
            node = [_metric(_method_metrics(r, "node-noise"), claim.metric) for r in node_runs]
            rival = [_metric(_method_metrics(r, claim.rival), claim.metric) for r in rival_runs]
            cells.append(contrast(f"x{width}", node, rival, checks, within, why=why, planned=plan))
            continue
        shifted = [r for r in node_runs if _has_corruptions(r)], [r for r in rival_runs if _has_corruptions(r)]
        for corruption in CORRUPTIONS:
            node = [_corrupted(r, "node-noise", corruption, claim.metric) for r in shifted[0]]
            rival = [_corrupted(r, claim.rival, corruption, claim.metric) for r in shifted[1]]
            name = CORRUPTION_NAMES[corruption].split(" (")[0]
            cells.append(contrast(f"x{width}, {name}", node, rival, checks, within, why=why, planned=plan))
    if claim.rival == "deterministic" and not claim.corrupted:
        column = ("error", "nll", "ece").index(claim.metric)
        for dataset, model in profile["cifar"]:
            published = PUBLISHED_TABLES_3_TO_5[(dataset, model)]
            groups = [select(records, part="cifar", dataset=dataset, model=model, method=m) for m in
                      ("node-noise", "deterministic")]  # fmt: skip
            plan = tuple(len(planned(records, part="cifar", dataset=dataset, model=model, method=m)) for m in
                         ("node-noise", "deterministic"))  # fmt: skip
            checks = tuple(
                CIFAR_COMPARABLE.check(runs, 1 - published[m][0] / 100)
                for runs, m in zip(groups, ("node-noise", "deterministic"), strict=True)
            )
            node, rival = ([_metric(r.metrics, claim.metric) for r in runs] for runs in groups)
            paper = (published["node-noise"][column], published["deterministic"][column])
            named = zip(("node noise", "deterministic"), checks, strict=True)
            why = "; ".join(f"{name}: {check.reason}" for name, check in named if check.reason)
            cells.append(contrast(f"{dataset} {model}", node, rival, checks, within, paper, why, plan))  # type: ignore[arg-type]
    return cells


def _missing_text(missing: int) -> str:
    """``, 2 with runs missing`` after a headline's count of comparable cells (empty for none): such a cell is
    *inconclusive*, so an unfinished grid never reads *holds*, but it is neither judged nor comparable."""
    return f", {missing} with runs missing" if missing else ""


def _numbers(cell: Contrast, metric: str) -> str:
    digits = METRIC_DIGITS[metric]
    unit = " %" if metric == "error" else ""
    spread = "" if math.isnan(cell.half) else f" ± {cell.half:.{digits}f}"
    return (
        f"{mean_sd(cell.node)[0]:.{digits}f}{unit} vs {mean_sd(cell.rival)[0]:.{digits}f}{unit}, gap "
        f"{cell.gap:+.{digits}f}{spread}"
    )


def every_cell_verdict(cells: Sequence[Contrast]) -> tuple[Verdict, list[str]]:
    """The verdict of a claim quantified over every cell ("at every LeNet width"), and the cells against it: *does
    not hold* when at least one comparable cell is a separated counterexample (its verdict *does not hold*: node
    noise higher, the seeds separating the gap, both sides' runs comparable), naming those cells; otherwise
    :func:`~pyro_bnn.reproduce.report.overall_verdict`. A cell that is not comparable never counts against the
    claim."""
    against = [
        c.setting for c in cells if c.verdict is Verdict.DOES_NOT_HOLD and all(check.comparable for check in c.checks)
    ]
    if against:
        return Verdict.DOES_NOT_HOLD, against
    return overall_verdict([c.verdict for c in cells]), []


def rival_headline(
    claim: RivalClaim, cells: list[Contrast], cifar: bool = False, profile: Profile | None = None
) -> Headline:
    """One headline over ``claim``'s cells: the verdict of the comparable ones (for a claim over every cell,
    :func:`every_cell_verdict`, naming the cells against it), how many there were, and every cell's numbers
    (unjudged where it is not comparable)."""
    verdicts = [c.verdict for c in cells]
    if claim.every:
        overall, against = every_cell_verdict(cells)
    else:
        overall, against = overall_verdict(verdicts), []
    missing = sum(bool(c.missing) for c in cells)  # inconclusive, so never holds, but not judged either
    comparable = sum(v is not Verdict.NOT_COMPARABLE for v in verdicts) - missing
    parts = []
    for cell in cells:
        if cell.verdict is Verdict.NOT_COMPARABLE:
            parts.append(
                f"{cell.setting}: not comparable ({cell.why}); unjudged, {_numbers(cell, claim.metric)}: {cell.shows}"
            )
        elif cell.missing:
            parts.append(f"{cell.setting}: {cell.label}, {cell.missing}")
        else:
            parts.append(f"{cell.setting}: {cell.label} ({_numbers(cell, claim.metric)}: {cell.shows})")
    interval = overall_width(overall, [c.interval for c in cells])
    fails = ""
    if against:
        cells_text = " and ".join(against)
        fails = (
            f"; does not hold at {cells_text}: the claim is for every {'width and CIFAR network' if cifar else 'width'}"
            f", and there, in a comparable cell, the seeds separate node noise's higher {METRIC_NAMES[claim.metric]}"
        )
    reason = (
        f"{comparable} of {len(cells)} cells comparable{_missing_text(missing)}{fails}. "
        + f"Node noise vs {METHOD_NAMES[claim.rival]}: "
        + "; ".join(parts)
        + "."
    )
    return Headline(claim.claim(cifar, profile), overall, reason, interval)


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

    def plan(method: str, width: int) -> int:  # the runs planned, of any status
        return len(_method_records(records, method, done=False, width=width))

    within = NO_EFFECT_WITHIN["error"]
    verdicts, parts, rows, intervals, missing = [], [], [], [], 0
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
            verdict, shows = Verdict.NO_EFFECT, f"VI's change lies within ±{bound_text(abs(vi_rise.gap) + vi_half)}"
        else:
            verdict, shows = Verdict.INCONCLUSIVE, "the seeds' spread covers VI's change"
        arms = ((vi_k, "vi", knee), (vi_w, "vi", width), (nn_k, "node-noise", knee), (nn_w, "node-noise", width))
        if absent := runs_missing(*((len(done), plan(m, w)) for done, m, w in arms)):
            verdict, shows, missing = Verdict.INCONCLUSIVE, absent, missing + 1
        elif failing:
            verdict = Verdict.NOT_COMPARABLE
        if verdict is Verdict.NO_EFFECT:
            intervals.append(abs(vi_rise.gap) + vi_half)
        numbers = (
            f"x{knee} -> x{width}: VI {format_mean(vi_k, 2)} -> {format_mean(vi_w, 2)} % "
            f"({format_signed(vi_rise.gap, 2)}), node noise {format_mean(nn_k, 2)} -> {format_mean(nn_w, 2)} % "
            f"({format_signed(nn_rise.gap, 2)})"
        )
        verdicts.append(verdict)
        judged = f"not comparable ({failing}); unjudged, {shows}" if verdict is Verdict.NOT_COMPARABLE else (
            f"{verdict.value}, {shows}" if absent else f"{verdict.value} ({shows})")  # fmt: skip
        parts.append(f"{numbers}: {judged}")
        spread = "" if math.isnan(vi_half) else f" ± {vi_half:.2f}"
        rows.append(
            [f"test error past x{knee} (VI rises, node noise does not)", f"x{width} vs x{knee}",
             f"{format_mean_sd(nn_w, 2)} (x{knee}: {format_mean_sd(nn_k, 2)})",
             f"VI {format_mean_sd(vi_w, 2)} (x{knee}: {format_mean_sd(vi_k, 2)})", "—",
             f"VI {format_signed(vi_rise.gap, 2)}{spread}; node noise {format_signed(nn_rise.gap, 2)}", shows,
             f"x{width}: {nn_w_check.summary}", f"x{width}: {vi_w_check.summary}",
             verdict.value if verdict is not Verdict.NO_EFFECT else no_effect_text(intervals[-1])]
        )  # fmt: skip
    overall = overall_verdict(verdicts)
    comparable = sum(v is not Verdict.NOT_COMPARABLE for v in verdicts) - missing
    interval = overall_width(overall, intervals)
    reason = f"{comparable} of {len(verdicts)} cells comparable{_missing_text(missing)}; " + "; ".join(parts) + "."
    return Headline(claim, overall, reason, interval), rows


def rival_verdicts(records: list[RunRecord], profile: Profile) -> tuple[Section, list[Headline]]:
    """The verdicts on node noise against its rivals (and Fig. 4's degradation), and the table of their cells."""
    cifar = bool(profile["cifar"])
    headlines, rows = [], []
    degradation, degradation_rows = _degradation(records, profile)
    for claim in RIVAL_CLAIMS:
        cells = rival_contrasts(records, profile, claim)
        headlines.append(rival_headline(claim, cells, cifar and claim.rival == "deterministic", profile))
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
        "Where the claims come from: the paper compares node noise with the deterministic network, MC dropout and "
        f"weight-space VI in test error, NLL and ECE on {PAPER_CIFAR} (Tables 3-5, Figs. 5 and 7); on LeNet / "
        "Fashion-MNIST it shows only node noise against weight-space VI in test error (Fig. 4, a plot). Every "
        "other clean LeNet row here tests a CIFAR claim at another architecture, data set and scale "
        f"({lenet_scope(profile)}), and its *no effect* margin comes from those CIFAR tables. The rows under "
        "corruption are our extension: the paper's Fig. 8 (WRN-28x10 on corrupted CIFAR-10/100) reports mean "
        "predictive entropy only. Node noise (K = 4) against each rival, one row per cell of a verdict: mean ± "
        "sd over seeds (test error in %), the gap node noise - rival with its 95 % interval (Welch), what the "
        "seeds show, and how each side's runs ended. A cell is judged only when both sides' runs converged; "
        "otherwise its verdict is *not comparable at this scale* and *the runs show* is what they reached, "
        "unjudged. Lower is better in every metric. *Under corruption*: each seed's value averaged over the five "
        "corrupted intensities of the first "
        f"{profile['shift_images']} test images (the figures of *Corrupted inputs*). A comparable cell reads *no "
        f"effect within ±x* when its interval lies inside the smallest effect the paper reports on CIFAR "
        f"({thresholds}; the corrupted cells use the same, the paper prints none for them). A claim *at every "
        "LeNet width* reads *does not hold* when one comparable cell separates the gap against it, naming the "
        "cell; otherwise, and for the claims under corruption, the comparable cells are counted "
        "(`pyro_bnn.reproduce.report.overall_verdict`). LeNet: "
        + COMPARABLE.describe()
        + (" CIFAR: " + CIFAR_COMPARABLE.describe() if cifar else "")
    )
    section = Section("Node noise against its rivals", text, [table])
    return section, [degradation, *headlines]
