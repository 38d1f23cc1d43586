"""The ``posterior-families`` reproduction as one package: :mod:`.plan` (its runs, profiles and constants),
:mod:`.analysis` (its report) and the experiment class below."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.posterior_families import runs  # noqa: F401  (registers the paper's runners)
from pyro_bnn.reproduce.papers.posterior_families.plan import PROFILES, fashion_specs, moons_specs
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, RunSpec

__all__ = ["PosteriorFamilies"]
"""The experiment class."""


class PosteriorFamilies:
    """Issue 23's comparison of posterior families as a grid and an analysis (see the module docstring)."""

    name = "posterior-families"
    title = "Posterior families side by side: VI, Laplace, SG-MCMC, ensembles and node noise against NUTS"
    summary = "a study: every posterior family side by side on two moons (NUTS reference) and a 3FC on Fashion-MNIST"
    profiles = PROFILES

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        specs = []
        for seed in range(seeds):
            specs.extend(moons_specs(profile, seed))
            specs.extend(fashion_specs(profile, seed, data_dirs))
        return specs

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.posterior_families.analysis import analyse

        return analyse(records, profile, out)
