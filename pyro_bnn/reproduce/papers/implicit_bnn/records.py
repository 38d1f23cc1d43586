"""The per-run values of ``implicit-bnn``'s report: each method's metrics, runs and timings read from the run
records, the names the tables give methods and corruptions, and the LeNet's parameter count per width.
"""

from __future__ import annotations

import statistics
from typing import Any

from pyro_bnn.reproduce.papers.implicit_bnn.plan import FIG_4_KNEE_WIDTH
from pyro_bnn.reproduce.planned import Profile, RunRecord
from pyro_bnn.reproduce.report import CONFORMAL_COLUMNS, planned, select

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


def _method_records(records: list[RunRecord], method: str, *, done: bool = True, **tags: object) -> list[RunRecord]:
    """One method's LeNet records with ``tags``: the finished ones, or (``done=False``) every one, the runs planned."""
    stored = "deterministic" if method == "temperature" else method
    found = (select if done else planned)(records, part="lenet", method=stored, **tags)
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
        f"widths (x4 and x8 here, {_lenet_parameters(4):,} and {_lenet_parameters(8):,} parameters), which the "
        f"`cpu-widths` (10 000 images, to convergence) and `paper` profiles run. The `{profile.name}` profile's "
        f"widths were chosen to fit its budget ({profile.summary})."
    )


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


def _shift_values(record: RunRecord, method: str) -> dict[str, Any]:
    shift = record.metrics["shift"]
    return shift["tempered"] if method == "temperature" else shift
