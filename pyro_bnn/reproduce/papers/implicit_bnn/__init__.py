"""The ``implicit-bnn`` reproduction as one package: :mod:`.plan` (its runs, profiles and constants),
:mod:`.analysis` (its report), :mod:`.measures` (the measurements it registers) and the experiment class below."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.implicit_bnn import measures  # noqa: F401  (registers the paper's measurements)
from pyro_bnn.reproduce.papers.implicit_bnn.plan import (
    CUBIC_BLOCK,
    CUBIC_COMPARABLE,
    PROFILES,
    cifar_specs,
    cubic_specs,
    lenet_specs,
)
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, RunSpec

__all__ = ["ImplicitBnn", "CUBIC_BLOCK", "CUBIC_COMPARABLE"]
"""The experiment class, and the plan constants its report names."""


class ImplicitBnn:
    """Paper 003 as a grid and an analysis (see the module docstring)."""

    name = "implicit-bnn"
    title = "Implicit BNNs (node noise) against weight-space VI, MC dropout, deep ensembles and temperature scaling"
    summary = "paper 003: node-noise BNNs vs weight-space VI and baselines; cubic depth, LeNet width and K, shift, OOD"
    profiles = PROFILES

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        specs = []
        for seed in range(seeds):
            specs.extend(cubic_specs(profile, seed))
            specs.extend(lenet_specs(profile, seed, data_dirs))
            specs.extend(cifar_specs(profile, seed, data_dirs))
        return specs

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.implicit_bnn.analysis import analyse

        return analyse(records, profile, out)
