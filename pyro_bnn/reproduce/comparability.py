"""Whether a cell of a reproduction can be judged at all: its runs trained to the end and reached the paper's accuracy.

A verdict compares our runs with a paper's claim, which is only fair when the runs are the networks the paper
describes. A cell is **comparable** when

* every run **converged**: early stopping ended it before its epoch cap, or it reached the cap with its validation
  metric flat (the best of its last :data:`WINDOW` epochs at most :data:`FLAT` above the best before them), or it
  trained the paper's own fixed schedule (``paper_epochs``: the paper ran that many epochs without early stopping);
  a run stopped at the cap while still improving has not, and
* every run has a finite accuracy (a NaN from a diverged run never averages into a mean that passes), and the
  cell's mean accuracy lies within ``tolerance`` of the published one.

A cell that fails either is *not comparable at this scale* (:attr:`~pyro_bnn.reproduce.planned.Verdict.NOT_COMPARABLE`),
with the reason, never *does not hold*; :func:`~pyro_bnn.reproduce.report.overall_verdict` counts comparable cells
only. Each report shows every cell's check (:attr:`CellCheck.summary`) beside its numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pyro_bnn.reproduce.code_state import cell_code_states, code_states
from pyro_bnn.reproduce.planned import RunRecord

WINDOW = 3
"""Epochs at the end of a run over which "flat" is judged (the papers' early-stopping patience is 3)."""

FLAT = 0.005
"""How much the best validation value of the last :data:`WINDOW` epochs may exceed the best before them for a run
at its cap to count as converged (half a point of accuracy)."""


class TrainingState(str, Enum):
    """How one run's training ended."""

    STOPPED = "stopped by patience"
    """Early stopping ended it before its epoch cap."""
    FLAT = "flat at the cap"
    """It reached its cap with the validation metric flat over the last epochs."""
    PAPER_SCHEDULE = "the paper's schedule"
    """It trained the fixed number of epochs the paper trained (which used no early stopping)."""
    IMPROVING = "at the cap, still improving"
    """It reached its cap while the validation metric still rose: not converged."""
    UNKNOWN = "no validation history"
    """Nothing tells whether it converged (no validation metric per epoch, and not the paper's schedule)."""

    @property
    def converged(self) -> bool:
        return self in (TrainingState.STOPPED, TrainingState.FLAT, TrainingState.PAPER_SCHEDULE)


def training_state(
    record: RunRecord, metric: str = "val_accuracy", paper_epochs: int | None = None, flat: float = FLAT
) -> TrainingState:
    """How ``record``'s training ended (see the module docstring); ``metric``: the per-epoch validation value that
    rises as the run improves; ``flat``: the margin of "flat" (default :data:`FLAT`). A patience of the whole run or
    more is no early stopping (the best epoch is only restored)."""
    config = record.config
    epochs_run = int(record.metrics.get("epochs_run", len(record.history)))
    early_stopping = 0 < config.patience < config.epochs
    if early_stopping and epochs_run < config.epochs:
        return TrainingState.STOPPED
    if paper_epochs is not None and not early_stopping and epochs_run >= paper_epochs:
        return TrainingState.PAPER_SCHEDULE
    values = [row[metric] for row in record.history if metric in row]
    if len(values) <= WINDOW:
        return TrainingState.UNKNOWN
    before, last = values[:-WINDOW], values[-WINDOW:]
    return TrainingState.FLAT if max(last) - max(before) <= flat + 1e-12 else TrainingState.IMPROVING


@dataclass(frozen=True)
class CellCheck:
    """The comparability of one cell.

    Attributes:
        comparable: Whether the cell may be judged.
        reason: Why not (empty when comparable).
        summary: The cell's training states, epochs and accuracy against the paper's, for its table row, and its
            training code when its runs ran more than one state (:func:`~.code_state.cell_code_states`).
    """

    comparable: bool
    reason: str
    summary: str


def check_cell(
    runs: Sequence[RunRecord],
    published_accuracy: float | None,
    tolerance: float,
    *,
    metric: str = "val_accuracy",
    paper_epochs: int | None = None,
    flat: float = FLAT,
    name_code: bool = True,
) -> CellCheck:
    """Whether the cell of ``runs`` (every group of runs a verdict compares, pooled) is comparable with the paper:
    every run converged and has a finite accuracy, and their mean accuracy within ``tolerance`` of
    ``published_accuracy`` (None: the paper gives none, and only convergence and finite accuracies are checked,
    the latter where any run records one). The summary's accuracy is the mean of the finite ones.
    ``name_code=False`` leaves mixed training code out of the summary, for a caller that names its runs' code
    itself."""
    if not runs:
        return CellCheck(False, "no runs yet", "no runs")
    states = [training_state(r, metric, paper_epochs, flat) for r in runs]
    epochs = sorted(int(r.metrics.get("epochs_run", len(r.history))) for r in runs)
    converged = sum(s.converged for s in states)
    span = f"{epochs[0]}" if epochs[0] == epochs[-1] else f"{epochs[0]}-{epochs[-1]}"
    recorded = [r.metrics.get("accuracy") for r in runs]
    accuracies = [float(a) for a in recorded if a is not None and math.isfinite(float(a))]
    # a run without a finite accuracy cannot be checked against the paper (NaN compares False with any tolerance),
    # so it fails the gate; a cell that records no accuracy at all (regression) is judged on convergence alone
    gated = published_accuracy is not None or any(a is not None for a in recorded)
    unchecked = len(runs) - len(accuracies) if gated else 0
    accuracy = statistics.fmean(accuracies) if accuracies else None
    shown = "—" if accuracy is None else f"{accuracy:.3f}"
    if published_accuracy is not None:
        shown += f" vs {published_accuracy:.3f}"
    summary = f"converged {converged}/{len(runs)}, epochs {span}, accuracy {shown}"
    if name_code and len(code_states(runs)) > 1:
        summary += f", training code {cell_code_states(runs)}"
    reasons = []
    if converged < len(runs):
        counts = {s: states.count(s) for s in TrainingState if not s.converged and s in states}
        reasons.append(", ".join(f"{n} of {len(runs)} runs {s.value}" for s, n in counts.items()))
    if unchecked:
        reasons.append(f"{unchecked} of {len(runs)} runs with no finite accuracy")
    if published_accuracy is not None and accuracy is not None and abs(accuracy - published_accuracy) > tolerance:
        reasons.append(
            f"accuracy {accuracy:.3f} is {abs(accuracy - published_accuracy):.3f} from the paper's "
            f"{published_accuracy:.3f} (tolerance {tolerance:g})"
        )
    return CellCheck(not reasons, "; ".join(reasons), summary)


@dataclass(frozen=True)
class ComparabilityRule:
    """When a paper's cells are comparable, declared as data in the paper's module beside its published numbers.

    Attributes:
        accuracy_tolerance: How far a cell's mean accuracy may lie from the published one.
        metric: The per-epoch validation value whose flatness shows convergence.
        paper_epochs: The paper's fixed number of epochs, where it trained without early stopping (a run of at least
            that many epochs without patience then counts as converged).
        why: One sentence on where the tolerance comes from, printed in the report.
        flat: The margin of "flat" at the cap (default :data:`FLAT`, half a point): a paper whose effects are
            smaller than that needs a finer one.
    """

    accuracy_tolerance: float
    metric: str = "val_accuracy"
    paper_epochs: int | None = None
    why: str = ""
    flat: float = FLAT

    def check(self, runs: Sequence[RunRecord], published_accuracy: float | None) -> CellCheck:
        """:func:`check_cell` of ``runs`` under this rule."""
        return check_cell(
            runs,
            published_accuracy,
            self.accuracy_tolerance,
            metric=self.metric,
            paper_epochs=self.paper_epochs,
            flat=self.flat,
        )

    def describe(self) -> str:
        """The rule in one sentence, for a report's text."""
        schedule = (
            f", or trained the paper's {self.paper_epochs} epochs without early stopping" if self.paper_epochs else ""
        )
        return (
            "A cell is judged only when every run converged (stopped by patience, or "
            f"{self.metric} within {self.flat:g} of its best over its last {WINDOW} epochs at the cap{schedule}) and, "
            f"where the paper gives an accuracy, the cell's mean accuracy lies within {self.accuracy_tolerance:g} of "
            f"it{'; ' + self.why if self.why else ''}; otherwise it is *not comparable at this scale*."
        )
