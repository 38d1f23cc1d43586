"""The report of a reproduction, built from its run folders alone (so ``--report-only`` rebuilds it).

``OUT/report.md`` holds the exact command, the code version of every run, the profile's settings in full, the
experiment's sections (tables of mean ± sd over seeds with the published number beside ours, CSV files of the
per-seed values beside the report, PNG figures), one plain verdict per headline, and the runs that failed or are
missing. The helpers here (``mean_sd``, ``format_mean_sd``, ``metric_cells``, ``write_csv``, ``compare``) are what the
paper modules build their tables and verdicts from; ``mean_sd`` is :func:`pyro_bnn.evaluation.mean_sd`, imported
here as well.
"""

from __future__ import annotations

import csv
import math
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from pyro_bnn.evaluation import mean_sd  # here too, where the paper modules have always imported it from
from pyro_bnn.reproduce.code_state import training_code_of
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, Status, Verdict

REPORT = "report.md"


def planned(records: Sequence[RunRecord], **tags: object) -> list[RunRecord]:
    """The records whose spec's tags equal ``tags`` (values compared as strings), in their order, whatever their
    status: a grid's records are its plan (one per planned run), so these are the runs planned for those tags."""
    return [r for r in records if all(r.spec.tag(key) == str(value) for key, value in tags.items())]


def select(records: Sequence[RunRecord], **tags: object) -> list[RunRecord]:
    """The finished records whose spec's tags equal ``tags`` (values compared as strings), in their order."""
    return [r for r in planned(records, **tags) if r.status is Status.DONE]


def runs_missing(*arms: tuple[int, int]) -> str:
    """``runs missing (2 of 6 planned)``: why a cell is not judged, from each of its arms' ``(done, planned)`` runs
    (the finished records of :func:`select` and the records of :func:`planned`); empty when every arm has runs and
    all its planned ones finished. Such a cell counts as *inconclusive*, so an unfinished grid never reads *holds*,
    with however many seeds it has."""
    if all(0 < done >= planned for done, planned in arms):
        return ""
    done, total = sum(a[0] for a in arms), sum(a[1] for a in arms)
    # no record of the cell at all (hand-made records, not a grid's): nothing to count
    return f"runs missing ({total - done} of {total} planned)" if total else "runs missing"


def format_mean_sd(values: Sequence[float], digits: int = 3) -> str:
    """``0.123 ± 0.004`` over the values (``n = k`` added when fewer than expected is the caller's business);
    ``—`` when there are none."""
    mean, sd, n = mean_sd(values)
    if n == 0:
        return "—"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if n > 1 else f"{mean:.{digits}f} (1 seed)"


def format_mean(values: Sequence[float], digits: int = 3) -> str:
    """The mean of the values to ``digits`` decimals; ``—`` when there are none."""
    return f"{mean_sd(values)[0]:.{digits}f}" if len(values) else "—"


def format_signed(value: float, digits: int = 3) -> str:
    """A change with its sign, ``+0.123``; ``—`` for NaN (a change one of whose arms had no run)."""
    return "—" if math.isnan(value) else f"{value:+.{digits}f}"


CONFORMAL_NOTE = (
    "*Coverage* and *set size*: split conformal prediction sets at alpha = 0.1 with the threshold score (THR, a class "
    "is in the set when 1 - p is at most the calibrated quantile), calibrated on a seeded half of the test "
    "predictions and scored on the other half (`pyro_bnn.runs.scoring.conformal_metrics`): coverage is the "
    "share of sets holding the label (at least 0.9 by the guarantee, in expectation), set size the mean number of "
    "classes per set (a set may be empty, so a classifier more accurate than 0.9 averages below 1). — where a run's "
    "record predates them (`pyro-bnn reproduce NAME --rescore` adds them from its checkpoint)."
)
"""The note that goes with the conformal columns of a report's classification tables."""

CONFORMAL_COLUMNS = (("conformal_coverage", 3), ("conformal_set_size", 2))
"""The conformal metrics a classification table shows, with the digits of each."""


def metric_cells(runs: Sequence[RunRecord], keys: Sequence[tuple[str, int]] = CONFORMAL_COLUMNS) -> list[str]:
    """One table cell per ``(metric, digits)``: mean ± sd over the ``runs`` whose metrics hold it, ``(k of n seeds)``
    added when only some do, ``—`` when none does (a record from before the metric existed)."""
    cells = []
    for key, digits in keys:
        values = [r.metrics.get(key) for r in runs]
        mean, sd, found = mean_sd(values)
        if found in (0, len(runs)):
            cells.append(format_mean_sd(values, digits))
        else:
            spread = f" ± {sd:.{digits}f}" if found > 1 else ""
            cells.append(f"{mean:.{digits}f}{spread} ({found} of {len(runs)} seeds)")
    return cells


@dataclass(frozen=True)
class Comparison:
    """Two groups of per-seed values compared by Welch's t-test.

    Attributes:
        gap: ``mean(a) - mean(b)``.
        standard_error: Of the gap, ``sqrt(sd_a^2 / n_a + sd_b^2 / n_b)``; NaN with fewer than 2 values in a group.
        separated: ``|gap| > t * standard_error`` with ``t`` the two-sided ``1 - alpha`` quantile of Student's t at
            the Welch-Satterthwaite degrees of freedom: the seeds tell the groups apart at level ``alpha``. Never
            with fewer than 2 values in a group; with equal values inside both groups, any non-zero gap.
        half_width: ``t * standard_error``, so ``gap ± half_width`` is the ``1 - alpha`` interval of the gap (0 with
            equal values inside both groups; NaN with fewer than 2 values in a group).
    """

    gap: float
    standard_error: float
    separated: bool
    half_width: float = math.nan

    @property
    def farther_end(self) -> float:
        """``|gap| + half_width``: the interval's end farthest from zero, so the gap lies within ± this."""
        return abs(self.gap) + self.half_width


def compare(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> Comparison:
    """Compares per-seed values ``a`` and ``b`` (see :class:`Comparison`) at level ``alpha``."""
    from scipy.stats import t

    mean_a, sd_a, n_a = mean_sd(a)
    mean_b, sd_b, n_b = mean_sd(b)
    gap = mean_a - mean_b
    if n_a < 2 or n_b < 2:
        return Comparison(gap, math.nan, False)
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    se = math.sqrt(va + vb)
    if se == 0:
        return Comparison(gap, se, gap != 0, 0.0)
    dof = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    half_width = float(t.ppf(1 - alpha / 2, dof)) * se
    return Comparison(gap, se, abs(gap) > half_width, half_width)


def finite_seeds(groups: Mapping[str, Sequence[float | None]], what: str) -> tuple[list[list[float]], str]:
    """Each group's finite per-seed values, in order, and a note naming the seeds left out (empty when none):
    ``1 of 3 Leaky seeds have no finite ECE, left out``.

    :func:`mean_sd` and :func:`compare` average over the finite values alone, so a verdict that counts seeds ("fewer
    than 2 seeds") must count these, not its runs, and say when some were left out.

    Args:
        groups: Per-seed values (None, NaN and infinities left out) by the name the note gives them (``Leaky``).
        what: The value, for the note (``ECE``).
    """
    kept, notes = [], []
    for name, values in groups.items():
        finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        kept.append(finite)
        if len(finite) < len(values):
            seeds = f"{name} seeds" if name else "seeds"
            notes.append(f"{len(values) - len(finite)} of {len(values)} {seeds} have no finite {what}, left out")
    return kept, "; ".join(notes)


def overall_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict for a claim judged in several cells, from its comparable cells only (those not
    :attr:`~Verdict.NOT_COMPARABLE`): *holds* when every one holds, *does not hold* when at least half of them do
    not, *no effect* when every one shows none, *inconclusive* otherwise (and for no cells); *not comparable at this
    scale* when cells exist but none is comparable."""
    comparable = [v for v in verdicts if v is not Verdict.NOT_COMPARABLE]
    if verdicts and not comparable:
        return Verdict.NOT_COMPARABLE
    if comparable and all(v is Verdict.HOLDS for v in comparable):
        return Verdict.HOLDS
    if comparable and sum(v is Verdict.DOES_NOT_HOLD for v in comparable) * 2 >= len(comparable):
        return Verdict.DOES_NOT_HOLD
    if comparable and all(v is Verdict.NO_EFFECT for v in comparable):
        return Verdict.NO_EFFECT
    return Verdict.INCONCLUSIVE


def overall_width(verdict: Verdict, widths: Sequence[float | None]) -> float | None:
    """The x of an overall *no effect within ±x*: the widest of its cells' (None for any other verdict, or when no
    cell has one)."""
    found = [w for w in widths if w is not None]
    return max(found) if verdict is Verdict.NO_EFFECT and found else None


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Writes ``rows`` (one dict per row; the header is every key in the order first seen) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one character per column (``l`` or ``r``), default text left, rest right."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _settings_table(profile: Profile) -> str:
    rows = [(f"`{key}`", f"`{value}`".replace("|", "\\|")) for key, value in profile.settings.items()]
    return markdown_table(["setting", "value"], rows, align="ll")


def _label_group(record: RunRecord) -> str:
    """A run's label without its seed (``3fc-mnist-relu-paper-s0`` -> ``3fc-mnist-relu-paper``): the cell it
    belongs to, as far as the report can tell without the paper's analysis."""
    label = record.spec.label
    stem, _, seed = label.rpartition("-s")
    return stem if stem and seed.isdigit() else label


def _devices_line(done: Sequence[RunRecord]) -> str:
    """Where the done runs trained: each device (the GPU's name where recorded) with its run count."""
    counts: dict[str, int] = {}
    for record in done:
        device = str(record.metrics.get("device", "not recorded"))
        name = record.metrics.get("device_name")
        key = f"{device} ({name})" if name else device
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{key}: {count}" for key, count in sorted(counts.items())) or "—"


def _training_code_lines(done: Sequence[RunRecord], experiment: str) -> list[str]:
    """The report's lines on the training code of the done runs: one state, or every state with its runs and the
    groups of runs (labels without the seed) whose seeds or neighbours ran different code."""
    states: dict[str | None, list[RunRecord]] = {}
    for record in done:
        states.setdefault(training_code_of(record), []).append(record)
    if not states:
        return []
    older = _older_fingerprints(done)
    if len(states) == 1:
        (state,) = states
        return [f"- Training code: one state ({state or 'unknown'}) for all {len(done)} runs done", *older]
    lines = [
        f"- Training code: **{len(states)} states** (`pyro_bnn.reproduce.code_state`) — comparisons below may "
        f"cross training code; `pyro-bnn reproduce {experiment} --retrain-stale` trains every run not at the "
        "current code again:"
    ]
    for state, runs in sorted(states.items(), key=lambda item: -len(item[1])):
        groups = sorted({_label_group(r) for r in runs})
        shown = ", ".join(f"`{g}`" for g in groups[:6]) + (f" and {len(groups) - 6} more" if len(groups) > 6 else "")
        commits = sorted({r.code.rsplit(" at ", 1)[-1] for r in runs})
        lines.append(
            f"  - {state or 'unknown (a commit this checkout lacks)'}: {len(runs)} runs "
            f"(commits {', '.join(commits)}): {shown}"
        )
    return lines + older


def _older_fingerprints(done: Sequence[RunRecord]) -> list[str]:
    """A line naming the fingerprints records store that differ from the state computed for them now (from their
    commit, under this version's definition of training code, :func:`~.code_state.training_code_of`), so that a
    reader who opens a ``result.json`` is not left with two names for one state; none when they agree."""
    stored = sorted({r.training_code for r in done if r.training_code and r.training_code != training_code_of(r)})
    if not stored:
        return []
    return [
        f"  - (the records store {', '.join(stored)}: fingerprints taken when they ran, under an older definition "
        "of which files are training code; the states named here are recomputed from each run's commit)"
    ]


def _threads_line(threads: Sequence[int]) -> str:
    """The thread counts of the done runs, in words (0 is a record that predates the setting)."""
    if not threads:
        return "—"
    named = [str(t) for t in threads if t] + (["not recorded (runs older than the setting)"] if 0 in threads else [])
    mixed = (
        " (mixed: numbers of runs on different thread counts can differ in the last digits)" if len(named) > 1 else ""
    )
    return ", ".join(named) + mixed


def write_report(
    out: Path,
    *,
    title: str,
    experiment: str,
    profile: Profile,
    seeds: int,
    command: str,
    records: list[RunRecord],
    analysis: Analysis,
) -> Path:
    """Writes ``out/report.md`` and returns its path (the sections' CSV files and figures are already in ``out``)."""
    done = [r for r in records if r.status is Status.DONE]
    failed = [r for r in records if r.status is Status.FAILED]
    missing = [r for r in records if r.status is Status.MISSING]
    damaged = [r for r in records if r.status is Status.DAMAGED]
    uncounted = [r for r in records if r.status is Status.UNCOUNTED]
    retried = [r for r in records if r.retried and r.status in (Status.DONE, Status.FAILED)]
    threads = sorted({r.threads for r in done})
    codes = sorted({r.code for r in done} - {""})
    hours = sum(r.seconds for r in done) / 3600
    batched = [int(r.metrics["batched_runs"]) for r in done if r.metrics.get("batched_runs", 1) > 1]
    batching = (
        f"- Batched: {len(batched)} of the {len(done)} runs done trained in batches of "
        + (f"{max(batched)}" if min(batched) == max(batched) else f"{min(batched)} to {max(batched)}")
        + " runs "
        "(`pyro_bnn.batched`: one vectorised model per batch, each run with its own seed, noise and prior); "
        "a run's time is its share of its batch's"
        if batched
        else f"- Batched: none of the {len(done)} runs done (each trained alone)"
    )
    lines = [
        f"# {title}",
        "",
        f"Experiment `{experiment}`, profile `{profile.name}` ({profile.summary}), {seeds} seed(s) per cell.",
        "",
        f"- Command: `{command}`",
        f"- Code of the runs: {', '.join(codes) if codes else '—'}",
        *_training_code_lines(done, experiment),
        f"- Report written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
        f"({platform.python_version()}, torch {torch.__version__})",
        f"- Runs: {len(done)} done ({hours:.2f} h of run time), {len(failed)} failed, {len(missing)} missing "
        + (f"and {len(damaged)} damaged " if damaged else "")
        + (f"(and {len(uncounted)} done but not counted: trained from an uncommitted tree) " if uncounted else "")
        + f"of {len(records)}"
        + (f"; {len(retried)} ran twice, their first worker lost" if retried else ""),
        batching,
        f"- Torch threads per run: {_threads_line(threads)}",
        f"- Devices of the runs done: {_devices_line(done)}",
        "",
        "## Verdicts",
        "",
    ]
    for headline in analysis.headlines:
        lines.append(f"- **{headline.claim}** — *{headline.label}*. {headline.reason}")
    lines += ["", "## Profile settings", "", _settings_table(profile), ""]
    for section in analysis.sections:
        lines += [f"## {section.title}", ""]
        if section.text:
            lines += [section.text, ""]
        for table in section.tables:
            lines += [table, ""]
        if section.csv_files:
            lines += ["Per-seed values: " + ", ".join(f"[`{name}`]({name})" for name in section.csv_files), ""]
        lines += [f"![{name}]({name})" for name in section.figures]
        if section.figures:
            lines.append("")
    if failed:
        lines += ["## Failed runs", ""]
        lines += [f"- `{r.spec.run_id}`: {r.reason}" for r in failed]
        lines.append("")
    if retried:
        lines += ["## Runs that ran twice", "", "Their first worker was lost (killed, out of memory, a node gone):", ""]
        lines += [f"- `{r.spec.run_id}` ({r.status.value}): {r.retried}" for r in retried]
        lines.append("")
    if uncounted:
        lines += [
            "## Runs not counted",
            "",
            "Trained from a tree with uncommitted changes, so their code cannot be named; no table or verdict counts "
            f"them (`pyro-bnn reproduce {experiment} --retrain-stale` trains them again):",
            "",
        ]
        lines += [f"- `{r.spec.run_id}` ({r.code.removesuffix('+dirty')}, with uncommitted changes)" for r in uncounted]
        lines.append("")
    if damaged:
        lines += [
            "## Damaged records",
            "",
            "Their result.json cannot be read; rerun the command to run them again:",
            "",
        ]
        lines += [f"- `{r.spec.run_id}`: {r.reason}" for r in damaged]
        lines.append("")
    if missing:
        lines += ["## Missing runs", "", "Not run yet (rerun the command to resume the grid):", ""]
        lines += [f"- `{r.spec.run_id}`" for r in missing]
        lines.append("")
    path = out / REPORT
    path.write_text("\n".join(lines))
    return path
