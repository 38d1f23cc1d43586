"""Tables, figures and verdicts of ``priors`` from its run records (work in progress)."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.spec import Analysis, Profile, RunRecord


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    return Analysis([], [])
