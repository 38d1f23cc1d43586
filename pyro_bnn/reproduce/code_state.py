"""The training code behind a run: a fingerprint of the source files that can change what a run computes.

A commit names the whole tree, so two runs of different commits may have run the very same training code (the
commits between them changed a report, a verdict or the docs). A comparison needs the same *training* code on both
sides, so a run is fingerprinted by the package's Python files bar :data:`NOT_TRAINING` (the command line, plots and
the reproduction machinery, which orchestrates runs), keeping :data:`MEASURING` (what computes a run's numbers
there). The fingerprint hashes each file's git blob id,
so it is the same whether it is computed from a working tree (:func:`current_training_code`) or from a commit
(:func:`training_code_at`, for records older than the fingerprint, which name only their commit).

A run trained from a tree with uncommitted changes (``+dirty``) has no commit to check its code against, and counts
in no report (:func:`counted`).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import pyro_bnn
from pyro_bnn.reproduce.planned import RunRecord, Status

NOT_TRAINING = ("pyro_bnn/cli.py", "pyro_bnn/errors.py", "pyro_bnn/plots/*", "pyro_bnn/reproduce/*")
"""Package files that are not training code: the command line and its errors, plotting, and the reproduction
machinery (grids, records, executors, reports, verdicts, paper plans), which only orchestrates runs. A plan's change
to a config changes run ids; the thread count an executor gives a run is recorded per run (``threads``) and shown by
the report."""

MEASURING = (
    "pyro_bnn/reproduce/measures.py",
    "pyro_bnn/reproduce/ensembles.py",
    "pyro_bnn/reproduce/papers/*/measures.py",
    "pyro_bnn/reproduce/papers/*/runs.py",
    "pyro_bnn/reproduce/papers/*/scoring.py",
    # where they lay before each paper became one package (older commits' trees)
    "pyro_bnn/reproduce/*_measures.py",
    "pyro_bnn/reproduce/papers/*_runs.py",
    "pyro_bnn/reproduce/papers/*_scoring.py",
)
"""Files of :data:`NOT_TRAINING`'s folders that compute a run's numbers all the same (measurements, ensembles, the
runners of runs that are not Trainer runs): training code. A paper's package keeps them as ``measures.py``,
``runs.py`` and ``scoring.py``; its plan, analysis and figures are not training code. The older locations stay
listed so that an older commit's training code is named as it was."""

_COMMIT = re.compile(r" at ([0-9a-f]{7,40})(\+dirty)?$")


def named_commit(record: RunRecord) -> tuple[str | None, bool]:
    """The commit a record's code names (None: none) and whether it says ``+dirty``."""
    match = _COMMIT.search(record.code)
    return (match.group(1), bool(match.group(2))) if match else (None, False)


def is_training_file(path: str) -> bool:
    """Whether ``path`` (``pyro_bnn/...``, with forward slashes) is part of the training code."""
    if not path.endswith(".py"):
        return False
    return any(fnmatch.fnmatch(path, p) for p in MEASURING) or not any(fnmatch.fnmatch(path, p) for p in NOT_TRAINING)


def _blob_id(data: bytes) -> str:
    """Git's id of a file with contents ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fingerprint(entries: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of ``(path, blob id)`` pairs: the first 12 hex digits of a SHA-256 over the training files'
    sorted pairs."""
    lines = sorted(f"{path} {blob}" for path, blob in entries if is_training_file(path))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def tree_fingerprint(package: Path) -> str:
    """The fingerprint of the package folder ``package`` (``.../pyro_bnn``) as its files are now."""
    return fingerprint(
        (f"pyro_bnn/{path.relative_to(package).as_posix()}", _blob_id(path.read_bytes()))
        for path in package.rglob("*.py")
    )


def commit_fingerprint(root: Path, commit: str) -> str | None:
    """The fingerprint of ``pyro_bnn/`` at ``commit`` of the git checkout ``root`` (None when ``root`` is no
    checkout or lacks that commit)."""
    try:
        listing = subprocess.run(
            ["git", "-C", str(root), "ls-tree", "-r", commit, "--", "pyro_bnn"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    entries = []
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        entries.append((path, meta.split()[2]))
    return fingerprint(entries) if entries else None


@functools.cache
def current_training_code() -> str:
    """The fingerprint of the training code this process imported (read once: a grid runs the code it loaded)."""
    return tree_fingerprint(Path(pyro_bnn.__file__).resolve().parent)


@functools.cache
def training_code_at(commit: str) -> str | None:
    """The fingerprint of the training code at ``commit`` of the checkout this package lies in (None when it is no
    checkout or does not hold that commit)."""
    return commit_fingerprint(Path(pyro_bnn.__file__).resolve().parent.parent, commit)


def training_code_of(record: RunRecord) -> str | None:
    """The committed training code a record's run ran, or None when it cannot be named.

    A run from a clean tree: its commit's fingerprint, computed now (so that every run is named under this version's
    definition of training code), else the fingerprint it holds (a commit this checkout lacks). A run from a tree
    with uncommitted changes: its fingerprint only when that equals its commit's (the changes lay outside the
    training code, say in a report), else None."""
    commit, dirty = named_commit(record)
    committed = training_code_at(commit) if commit else None
    if dirty:
        return record.training_code if record.training_code and record.training_code == committed else None
    return committed or record.training_code or None


def code_states(runs: Sequence[RunRecord]) -> list[str]:
    """The distinct training code fingerprints of ``runs``, sorted, ``unknown`` standing for a run whose code
    cannot be named."""
    return sorted({training_code_of(r) or "unknown" for r in runs})


def cell_code_states(runs: Sequence[RunRecord]) -> str:
    """The training code of one cell's runs, for its table row: ``one state (<fingerprint>)``, or
    ``**N states** (<fingerprint>, ...)`` when its runs ran different training code (a comparison inside the cell
    crosses code), ``unknown`` standing for a run whose code cannot be named."""
    states = code_states(runs)
    if len(states) == 1:
        return f"one state ({states[0]})"
    return f"**{len(states)} states** ({', '.join(states)})"


def uncommitted(record: RunRecord) -> bool:
    """Whether the run was trained from uncommitted training code (a tree with uncommitted changes whose training
    code is not its commit's)."""
    return record.code.endswith("+dirty") and training_code_of(record) is None


UNCOUNTED_REASON = "trained from {code} with uncommitted changes to its training code: it counts in no report"


def counted(records: list[RunRecord]) -> list[RunRecord]:
    """``records`` with every done run of uncommitted training code turned :attr:`~Status.UNCOUNTED` (its numbers
    kept, its reason saying why), so that no analysis counts it."""
    return [
        replace(r, status=Status.UNCOUNTED, reason=UNCOUNTED_REASON.format(code=r.code.removesuffix("+dirty")))
        if r.status is Status.DONE and uncommitted(r)
        else r
        for r in records
    ]


def check_committed_training_code() -> None:
    """Raises a one-line ValueError when this tree's training code differs from its HEAD's (uncommitted changes to
    training files): what it trained would count in no report. A tree that is no git checkout passes."""
    head = training_code_at("HEAD")
    if head is not None and head != current_training_code():
        raise ValueError(
            "--retrain-stale would train with uncommitted changes to the training code, whose runs count in no "
            "report: commit them first (git status pyro_bnn)"
        )


def stale(record: RunRecord, current: str) -> bool:
    """Whether a done or failed run ran other training code than ``current`` (or unknown code)."""
    return record.status in (Status.DONE, Status.FAILED) and training_code_of(record) != current
