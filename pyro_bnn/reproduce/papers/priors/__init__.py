"""The ``priors`` reproduction as one package: :mod:`.plan` (its runs, profiles and constants),
:mod:`.report` (its report, from :mod:`.analysis`, :mod:`.figures` and :mod:`.cnn`), :mod:`.measures` (the
measurements it registers) and the experiment class below."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.priors import measures  # noqa: F401  (registers the paper's measurements)
from pyro_bnn.reproduce.papers.priors.plan import COMPARABLE, PROFILES, cnn_spec, synthetic_specs
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, RunSpec

__all__ = ["Priors", "COMPARABLE"]
"""The experiment class, and the plan constants its report names."""


class Priors:
    """Paper 002 as a grid and an analysis (see the module docstring)."""

    name = "priors"
    title = "Priors and hyperpriors under ADVI, and the uncertainty of an MNIST CNN (Zharikov et al.)"
    summary = "paper 002: Normal/Laplace/Cauchy/flat priors x fixed scale or hyperprior on moons and circles; CNN"
    profiles = PROFILES
    batch_runs = "auto"
    """Compatible runs train together (:mod:`pyro_bnn.batched`): the fixed-scale and flat cells of one data set and
    noise (seeds, families, scales) up to 32 to a batch, the CNN's seeds together; the hyperprior cells alone."""

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        # Seed-major, so that an interrupted grid has every cell at its first seeds; each CNN seed after the
        # synthetic runs of the same seed.
        specs = []
        for seed in range(seeds):
            specs += synthetic_specs(profile, seed)
            if seed < profile["cnn_seeds"]:
                specs.append(cnn_spec(profile, seed, data_dirs))
        return specs

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.priors.report import analyse

        return analyse(records, profile, out)
