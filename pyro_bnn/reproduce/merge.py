"""Merging run folders trained elsewhere (a GPU machine's copy of the grid) into a grid's folder.

A grid resumes across machines: the runs another machine finished are copied into ``OUT/runs/`` and count as if
they had run here. A run is taken only when it belongs to this grid (its folder name is a planned run id), is done
there, is not already done here, and ran the training code it names: a copy of a tree without its git folder
declares its commit (``$PYRO_BNN_COMMIT``, :func:`pyro_bnn.reproduce.records.code_version`), and the run's
training-code fingerprint must equal that commit's in this checkout (:mod:`.code_state`). A run done in both is
never overwritten; where the two copies' metrics differ, the summary says so and names the first that differs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyro_bnn.reproduce.code_state import named_commit, training_code_at
from pyro_bnn.reproduce.planned import RunRecord, RunSpec, Status
from pyro_bnn.reproduce.record_files import RESULT
from pyro_bnn.reproduce.records import read_record


@dataclass
class MergeSummary:
    """What :func:`merge_runs` did: the run ids copied in, and per run left out, why."""

    merged: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    seeds: tuple[int, int] | None = None
    """``(before, after)`` where the grid now plans more seeds, to take the runs of later seeds ``source`` holds."""
    other_profile: str | None = None
    """The profile of ``source``'s grid where it is not this grid's (every done run of it planned here)."""
    differing: list[str] = field(default_factory=list)
    """The runs done both here and there whose metrics differ (this grid's copy is kept; they are in ``left_out``
    too)."""

    def describe(self) -> str:
        """One line, then one line per run left out."""
        lines = [f"merged {len(self.merged)} run(s); left out {len(self.left_out)}"]
        if self.differing:
            lines[0] += f", {len(self.differing)} of them done here with different results (this grid's kept)"
        if self.seeds is not None:
            lines[0] += f"; the grid now plans {self.seeds[1]} seeds per cell (it planned {self.seeds[0]})"
        if self.other_profile is not None:
            lines[0] += (
                f"; the source is a grid of the {self.other_profile!r} profile, every done run of it planned here"
            )
        lines += [f"  {run_id}: {why}" for run_id, why in sorted(self.left_out.items())]
        return "\n".join(lines)


def declared_code_problem(record: RunRecord) -> str | None:
    """Why a run's declared code cannot be trusted, or None: a clean commit whose training code in this checkout
    differs from the fingerprint the run computed of the files it ran."""
    commit, dirty = named_commit(record)
    if commit is None or dirty or not record.training_code:
        return None
    committed = training_code_at(commit)
    if committed is not None and committed != record.training_code:
        return f"it names commit {commit}, whose training code is {committed}, but it ran {record.training_code}"
    return None


CIRCUMSTANCES = frozenset({"device", "device_name", "train_time_s", "batched_runs"})
"""Entries of a run's metrics that say where and how fast it ran, not what it scored: two copies of one run trained
on two machines differ in them (as in any key ending in ``_seconds``), and are compared without them."""


def _scored(key: str) -> bool:
    return key not in CIRCUMSTANCES and not key.endswith("_seconds")


def metric_difference(here: dict, there: dict) -> str | None:
    """The first metric two records of one run disagree on (``accuracy 0.5 here, 0.9 there``, then how many others
    differ), or None when their metrics are the same (NaN equal to NaN), :data:`CIRCUMSTANCES` aside."""
    keys = [key for key in sorted(set(here) | set(there)) if _scored(key) and not _same(here.get(key), there.get(key))]
    if not keys:
        return None
    key = keys[0]
    first = f"{key} {_shown(here, key)} here, {_shown(there, key)} there"
    return first + (f", and {len(keys) - 1} other metric(s)" if len(keys) > 1 else "")


def _shown(metrics: dict, key: str) -> str:
    return repr(metrics[key]) if key in metrics else "missing"


def _same(a: object, b: object) -> bool:
    return a == b or json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN reads as NaN, nested too


def source_runs(source: Path) -> Path:
    """The folder of run folders in ``source``: ``source/runs`` when there is one (a grid's folder), else
    ``source`` itself."""
    return source / "runs" if (source / "runs").is_dir() else source


MAX_SEEDS = 32
"""The most seeds :func:`seeds_covering` tries."""


def seeds_covering(source: Path, seeds: int, plan_for: Callable[[int], list[RunSpec]]) -> int:
    """The fewest seeds, at least ``seeds`` and at most :data:`MAX_SEEDS`, whose plan (``plan_for(n)``) holds as many
    of ``source``'s done runs as any such plan: a grid copied back with more seeds than the grid it merges into
    brings runs of seeds that grid does not plan yet. Folders of runs not done there (failed, part-way) count for
    nothing: they merge nothing, so they must not make the grid plan more seeds."""
    folders = done_runs(source)
    best, covered = seeds, len(folders & {spec.run_id for spec in plan_for(seeds)})
    count = seeds
    while covered < len(folders) and count < MAX_SEEDS:
        count += 1
        now = len(folders & {spec.run_id for spec in plan_for(count)})
        if now > covered:
            best, covered = count, now
    return best


def done_runs(source: Path) -> set[str]:
    """The run ids (folder names) of the runs done in ``source`` (a grid's folder or a folder of run folders)."""
    return {path.name for path in source_runs(source).iterdir() if path.is_dir() and _done_there(path)}


def check_fits(source: Path, planned: set[str], profile: str, theirs: str | None) -> bool:
    """Refuses, in one line, a ``source`` whose done runs this grid (at ``profile``, planning the run ids
    ``planned``) cannot take: none of them is planned, or ``source`` is a grid of another profile (``theirs``, from
    its ``reproduce.json``) with a done run that is not. A grid of another profile merges only when this grid plans
    every done run of it: two profiles may share run ids (``gpu-authors`` plans ``full-3fc-authors``' 3FC runs),
    and such a copy merges whole. Returns whether ``source`` is a grid of another profile that merges so."""
    done = done_runs(source)
    outside = done - planned
    if not done:
        return False  # nothing to merge: the summary lists why each folder is left out
    other = theirs is not None and theirs != profile
    if other and outside:
        raise ValueError(
            f"--merge {source} holds a grid of the {theirs!r} profile, not {profile!r}: {len(outside)} of its "
            f"{len(done)} done runs are not runs of this grid's plan (a grid of another profile merges only when "
            "this grid plans every done run of it)"
        )
    if len(outside) == len(done):
        raise ValueError(
            f"--merge {source}: none of its {len(done)} done runs is a run of this grid's plan ({profile!r} profile)"
        )
    return other


def _done_there(folder: Path) -> bool:
    """Whether ``folder`` holds a record of a done run (read as JSON only: its spec is not known yet)."""
    try:
        return json.loads((folder / RESULT).read_bytes()).get("status") == Status.DONE.value
    except (OSError, ValueError, AttributeError):
        return False


def merge_runs(source: str | Path, out: str | Path, specs: list[RunSpec]) -> MergeSummary:
    """Copies every done run of ``source`` that ``specs`` plan and ``out`` lacks into ``out/runs/``.

    Args:
        source: A grid's folder or a folder of run folders (``<run id>/result.json``), e.g. copied back from a GPU.
        out: The grid's folder (the caller holds its lock).
        specs: The grid's plan.

    Returns:
        The runs merged and, per run left out, why (not planned, not done there, done here already, with the same
        or with different metrics, or code that is not the commit it names). A run folder of ``out`` that held no
        done run (failed, damaged, part-way) is replaced.

    Raises:
        ValueError: ``source`` is not a folder (one line).
    """
    source = Path(source)
    if not source.is_dir():
        raise ValueError(f"--merge {source}: not a folder of run folders")
    runs_src, runs_out = source_runs(source), Path(out) / "runs"
    planned = {spec.run_id: spec for spec in specs}
    summary = MergeSummary()
    for folder in sorted(p for p in runs_src.iterdir() if p.is_dir()):
        spec = planned.get(folder.name)
        if spec is None:
            summary.left_out[folder.name] = "not a run of this grid's plan"
            continue
        record = read_record(runs_src, spec)
        if record.status is not Status.DONE:
            summary.left_out[folder.name] = f"{record.status.value} there" + (
                f": {record.reason}" if record.reason else ""
            )
            continue
        here = read_record(runs_out, spec)
        if here.status is Status.DONE:
            difference = metric_difference(here.metrics, record.metrics)
            if difference is None:
                summary.left_out[folder.name] = "already done here"
            else:
                summary.left_out[folder.name] = (
                    f"already done here, with different results (kept this one's: {difference})"
                )
                summary.differing.append(folder.name)
            continue
        problem = declared_code_problem(record)
        if problem is not None:
            summary.left_out[folder.name] = problem
            continue
        target = runs_out / folder.name
        partial = target.with_name(f".{folder.name}.merging")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(folder, partial)
        if target.exists():
            shutil.rmtree(target)  # a failed, damaged or part-way run, superseded by the done one
        partial.rename(target)
        summary.merged.append(folder.name)
    return summary
