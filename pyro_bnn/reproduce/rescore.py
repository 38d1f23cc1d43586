"""Re-scoring a finished grid: the metrics that test scoring gained after its runs finished, added without a rerun.

``pyro-bnn reproduce NAME --out OUT --rescore`` (:func:`rescore_grid`) takes every done classifier run of the grid
that lacks one of :data:`RESCORED_KEYS`, restores it from its checkpoint (the config stored in it, as ``pyro-bnn
evaluate`` does; an ensemble from its members' checkpoints), predicts its test split once more with its own seed and
sample count and scores it (:func:`pyro_bnn.runs.runs.score`), and merges those keys alone into its
``result.json`` and ``metrics.json``: every other value stays as it was. The posterior samples are drawn afresh, so
the new numbers come from a prediction like the saved one, not the same draws (a point network's, an ensemble's or
a posterior-mean prediction is the same); the re-scored accuracy is kept beside them, under ``"rescored"``, and the
summary names the largest gap to the saved accuracy, a check that each restored model is the one that was scored.

A run whose checkpoint is gone (grids are committed without them) is counted and left alone, never guessed: rerun it
to add the keys. Runners (samplers, Laplace fits, comparisons), regression runs and runs not done are not touched.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pyro_bnn._io import write_json_atomically
from pyro_bnn.data import DatasetName, Task
from pyro_bnn.reproduce.grid import unique
from pyro_bnn.reproduce.planned import RunSpec, Status
from pyro_bnn.reproduce.records import RESULT, RUNS, code_version, one_line, read_record, score_members
from pyro_bnn.runs.evaluate import load_evaluation
from pyro_bnn.runs.run_folder import CHECKPOINT
from pyro_bnn.runs.runs import score
from pyro_bnn.runs.scoring import CONFORMAL_KEYS

RESCORED_KEYS = CONFORMAL_KEYS
"""The metrics a re-score adds: the conformal coverage and mean set size at alpha 0.1
(:func:`pyro_bnn.runs.scoring.conformal_metrics`)."""

RESCORED = "rescored"
"""The ``result.json`` entry a re-score writes: ``{"keys", "code", "accuracy"}``, what it added, the code that
computed it and the accuracy of its own prediction."""


@dataclass
class RescoreSummary:
    """What :func:`rescore_grid` did, run ids by outcome.

    Attributes:
        rescored: Runs whose records gained the keys.
        current: Runs that held every key already.
        no_checkpoint: Classifier runs without the keys whose checkpoint (an ensemble: a member's) is gone.
        not_scored: Done runs that get no keys: runners, regression runs, and runs whose test set is too small.
        failed: ``(run id, one-line reason)`` of runs whose re-score raised; their files are left as they were.
        accuracy_gaps: ``{run id: re-scored accuracy - saved accuracy}`` of the re-scored runs.
    """

    rescored: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    no_checkpoint: list[str] = field(default_factory=list)
    not_scored: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    accuracy_gaps: dict[str, float] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The summary in a few plain lines (what the CLI prints)."""
        lines = [
            f"re-scored {len(self.rescored)} runs; {len(self.current)} held {', '.join(RESCORED_KEYS)} already; "
            f"{len(self.not_scored)} get none (runners, regression, test sets under 18 inputs)"
        ]
        if self.accuracy_gaps:
            run, gap = max(self.accuracy_gaps.items(), key=lambda item: abs(item[1]))
            lines.append(f"largest gap of a re-scored accuracy to the saved one: {gap:+.4f} ({run})")
        if self.no_checkpoint:
            lines.append(
                f"{len(self.no_checkpoint)} runs have no checkpoint: re-run them to add coverage "
                f"(first: {self.no_checkpoint[0]})"
            )
        lines += [f"run {run} failed to re-score: {reason}" for run, reason in self.failed]
        return lines


def _is_classifier(spec: RunSpec) -> bool:
    return not spec.runner and DatasetName(spec.config.dataset).task is Task.CLASSIFICATION


def _has_checkpoints(spec: RunSpec, runs_dir: Path) -> bool:
    folders = [m.run_id for m in spec.members] if spec.is_ensemble else [spec.run_id]
    return all((runs_dir / folder / CHECKPOINT).is_file() for folder in folders)


def rescore_metrics(spec: RunSpec, runs_dir: str | Path) -> dict[str, Any]:
    """The test metrics of a done run restored from its checkpoint (an ensemble: from its members'), as
    :func:`~pyro_bnn.runs.runs.score` computes them now; writes nothing.

    Args:
        spec: A training run or an ensemble of the grid; its config's ``device`` and ``data_dir`` say where to run
            and where the data lies.
        runs_dir: The grid's ``runs`` folder.

    Raises:
        FileNotFoundError: the checkpoint, or the data, is missing.
        ValueError: the run folder's ``config.json`` differs from its checkpoint's config, or the checkpoint does not
            fit the model.
    """
    runs_dir = Path(runs_dir)
    if spec.is_ensemble:
        return score_members(spec, runs_dir)[0]
    config = spec.config
    data_dirs = (
        {config.dataset: config.data_dir} if config.data_dir and DatasetName(config.dataset).reads_data_dir else {}
    )
    evaluation = load_evaluation(runs_dir / spec.run_id, device=config.device, data_dirs=data_dirs)
    return score(evaluation.bnn, evaluation.guide, evaluation.x, evaluation.y, evaluation.config)[0]


def merge_metrics(folder: Path, added: dict[str, Any], accuracy: float | None) -> None:
    """Merges ``added`` into the metrics of ``folder/result.json`` (and of ``metrics.json`` where there is one) and
    notes the re-score there (:data:`RESCORED`); every other value is written back as it was read."""
    result = json.loads((folder / RESULT).read_text())
    result["metrics"].update(added)
    result[RESCORED] = {"keys": sorted(added), "code": code_version(), "accuracy": accuracy}
    metrics_path = folder / "metrics.json"
    if metrics_path.is_file():
        metrics = json.loads(metrics_path.read_text())
        metrics.update(added)
        write_json_atomically(metrics_path, metrics)
    write_json_atomically(folder / RESULT, result)


def rescore_grid(specs: list[RunSpec], out: str | Path, *, progress: bool = True, name: str = "grid") -> RescoreSummary:
    """Adds :data:`RESCORED_KEYS` to every done classifier run of ``specs`` in ``out`` that lacks them and still has
    its checkpoint (see the module docstring); one progress bar over those runs.

    Args:
        specs: The grid's runs (repeats are taken once).
        out: The grid's folder (``out/runs/<run id>``).
        progress: The bar, shown when stderr is a terminal.
        name: The bar's label.

    Returns:
        What was done to which run. A run that fails to re-score is reported there and left as it was.
    """
    runs_dir = Path(out) / RUNS
    summary = RescoreSummary()
    todo = []
    for spec in unique(specs):
        record = read_record(runs_dir, spec)
        if record.status is not Status.DONE:
            continue
        if not _is_classifier(spec):
            summary.not_scored.append(spec.run_id)
        elif all(key in record.metrics for key in RESCORED_KEYS):
            summary.current.append(spec.run_id)
        elif not _has_checkpoints(spec, runs_dir):
            summary.no_checkpoint.append(spec.run_id)
        else:
            todo.append(record)
    disable = not (progress and sys.stderr.isatty())
    for record in tqdm(todo, desc=f"{name} re-score", unit="run", disable=disable):
        spec = record.spec
        try:
            metrics = rescore_metrics(spec, runs_dir)
            added = {key: metrics[key] for key in RESCORED_KEYS if key in metrics}
            if added:
                merge_metrics(runs_dir / spec.run_id, added, metrics.get("accuracy"))
        except Exception as err:  # one run's problem (a corrupt checkpoint, moved data): reported, the rest go on
            summary.failed.append((spec.run_id, one_line(err)))
            continue
        if not added:
            summary.not_scored.append(spec.run_id)
            continue
        summary.rescored.append(spec.run_id)
        if "accuracy" in metrics and "accuracy" in record.metrics:
            summary.accuracy_gaps[spec.run_id] = metrics["accuracy"] - record.metrics["accuracy"]
    return summary


__all__ = ["RESCORED", "RESCORED_KEYS", "RescoreSummary", "merge_metrics", "rescore_grid", "rescore_metrics"]
