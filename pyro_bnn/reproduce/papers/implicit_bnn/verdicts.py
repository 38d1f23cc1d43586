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


PAPER_CIFAR = "VGG-16 and WRN-28x10 on CIFAR-10/100"
"""Where the paper shows its Tables 3-5 and Fig. 7: not on LeNet, not on Fashion-MNIST."""


def count(n: int) -> str:
    """``n`` with a thin space between thousands, as the reports print counts (``10 000``)."""
    return f"{n:,}".replace(",", " ")


def lenet_scope(profile: Profile) -> str:
    """Where a profile tests the rival claims: its LeNet widths on Fashion-MNIST and the sizes of its subsets."""
    widths = ", ".join(f"x{w}" for w in profile["widths"])
    train = profile["train_images"]
    train_text = "the full training set" if train is None else f"{count(train)} training images"
    test = profile["test_subset"]
    test_text = "all 10 000 test images" if test is None else f"{count(test)} test images"
    return f"LeNet {widths} on Fashion-MNIST ({train_text}, {test_text})"


@dataclass(frozen=True)
class RivalClaim:
    """The claim that node noise is lower than ``rival`` in ``metric`` (on clean test images, or averaged over the
    corrupted intensities when ``corrupted``).

    Attributes:
        source: Where the paper shows it, with its network and data (``Table 3: VGG-16 and WRN-28x10 on ...``); for
            a corrupted claim, empty: the paper makes none (its Fig. 8 reports mean predictive entropy only), so
            the claim is our extension and says so.
    """

    rival: str
    metric: str
    corrupted: bool = False
    source: str = ""

    @property
    def short(self) -> str:
        where = " under corruption" if self.corrupted else ""
        return f"{METRIC_NAMES[self.metric]}{where} vs {METHOD_NAMES[self.rival]}"

    @property
    def every(self) -> bool:
        """Whether the claim is quantified over every cell ("at every LeNet width"): then one comparable cell where
        the seeds separate the gap against it makes the headline *does not hold* (:func:`every_cell_verdict`)."""
        return not self.corrupted

    def claim(self, cifar: bool, profile: Profile | None = None) -> str:
        """The headline's sentence; with ``profile``, where the paper shows the claim beside where it is tested."""
        metric, rival = METRIC_NAMES[self.metric], RIVAL_NAMES[self.rival]
        margin = f"±{NO_EFFECT_WITHIN[self.metric]:g}"
        if self.corrupted:
            text = (
                f"Under corrupted inputs, node noise has a lower {metric} than {rival} (mean over the corrupted "
                "intensities, per LeNet width and corruption; our extension: the paper's Fig. 8 reports mean "
                f"predictive entropy only, for WRN-28x10 on corrupted CIFAR-10/100"
            )
            if profile is None:
                return text + ")."
            return (
                f"{text}; here: {lenet_scope(profile).split(' (')[0]}, the first "
                f"{count(profile['shift_images'])} test images corrupted"
                + f"; the no-effect margin {margin} is from the paper's clean CIFAR tables)."
            )
        where = "at every LeNet width" + (" and on the paper's CIFAR networks" if cifar else "")
        if profile is None:
            return f"Node noise has a lower {metric} than {rival} {where} (paper: {self.source})."
        here = lenet_scope(profile) + (
            "; and " + ", ".join(f"{model} on {dataset}" for dataset, model in profile["cifar"]) if cifar else ""
        )
        return (
            f"Node noise has a lower {metric} than {rival} {where} (paper: {self.source}; here: {here}; the "
            f"no-effect margin {margin} is from the paper's CIFAR tables)."
        )


RIVAL_CLAIMS = (
    RivalClaim("vi", "error", source=f"Fig. 4, LeNet on Fashion-MNIST, a plot; Table 3, {PAPER_CIFAR}"),
    RivalClaim("vi", "ece", source=f"Table 5, {PAPER_CIFAR}"),
    RivalClaim("deterministic", "error", source=f"Table 3, {PAPER_CIFAR}"),
    RivalClaim("deterministic", "nll", source=f"Table 4, {PAPER_CIFAR}"),
    RivalClaim("deterministic", "ece", source=f"Table 5 and Fig. 7, {PAPER_CIFAR}"),
    RivalClaim("mc-dropout", "error", source=f"Table 3, {PAPER_CIFAR}"),
    RivalClaim("mc-dropout", "nll", source=f"Table 4, {PAPER_CIFAR}"),
    RivalClaim("mc-dropout", "ece", source=f"Table 5 and Fig. 7, {PAPER_CIFAR}"),
    RivalClaim("deterministic", "error", corrupted=True),
    RivalClaim("deterministic", "ece", corrupted=True),
    RivalClaim("mc-dropout", "error", corrupted=True),
    RivalClaim("mc-dropout", "ece", corrupted=True),
)
"""The verdicts on node noise against its rivals, in the report's order. On LeNet / Fashion-MNIST the paper shows
only node noise against weight-space VI in test error (Fig. 4); every other clean claim is its CIFAR result, tested
here at another architecture, data set and scale; the corrupted claims are ours."""


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
    fails = ""
    if against:
        cells_text = " and ".join(against)
        fails = (
            f"; does not hold at {cells_text}: the claim is for every {'width and CIFAR network' if cifar else 'width'}"
            f", and there, in a comparable cell, the seeds separate node noise's higher {METRIC_NAMES[claim.metric]}"
        )
    reason = (
        f"{comparable} of {len(cells)} cells comparable{fails}. Node noise vs {METHOD_NAMES[claim.rival]}: "
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
