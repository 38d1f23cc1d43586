"""The ``bayes-by-backprop`` reproduction as one package: :mod:`.plan` (its runs, profiles and constants),
:mod:`.analysis` (its report), :mod:`.measures` (the measurements it registers) and the experiment class below."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.bayes_by_backprop import measures  # noqa: F401  (registers the paper's measurements)
from pyro_bnn.reproduce.papers.bayes_by_backprop.plan import (
    BASE_NORMALIZATION,
    BASE_PRIOR,
    BASE_WEIGHTING,
    PROFILES,
    _spec,
)
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, RunSpec

__all__ = ["BayesByBackprop"]
"""The experiment class."""


class BayesByBackprop:
    """Paper 001 as a grid and an analysis (see the module docstring)."""

    name = "bayes-by-backprop"
    title = "Bayes by Backprop on MNIST: priors, KL weighting, input scaling and pruning (Singh; Blundell et al. 2015)"
    summary = "paper 001: BBB test error by prior, KL weighting and input scaling; signal-to-noise pruning"
    profiles = PROFILES

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        cells = [
            (prior, weighting, BASE_NORMALIZATION) for prior in profile["priors"] for weighting in profile["weightings"]
        ]
        cells += [
            (BASE_PRIOR, BASE_WEIGHTING, normalization)
            for normalization in profile["normalizations"]
            if normalization != BASE_NORMALIZATION
        ]
        # seed-major: every cell gets its first seed before any gets its second
        return [_spec(profile, *cell, seed, data_dirs) for seed in range(seeds) for cell in cells]

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.bayes_by_backprop.analysis import analyse

        return analyse(records, profile, out)
