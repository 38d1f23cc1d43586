"""The ``leaky-calibration`` reproduction as one package: :mod:`.plan` (its runs, profiles and constants),
:mod:`.analysis` (its report) and the experiment class below."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.leaky_calibration.plan import (
    ACTIVATIONS,
    COMPARABLE,
    PROFILES,
    _bnn_spec,
    _plateau_spec,
    slope_activation,
)
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, RunSpec

__all__ = ["LeakyCalibration", "COMPARABLE"]
"""The experiment class, and the plan constants its report names."""


class LeakyCalibration:
    """Paper 000 as a grid and an analysis (see the module docstring)."""

    name = "leaky-calibration"
    title = "One Simple Trick: Leaky ReLU against ReLU in mean-field BNNs (Tempczyk et al. 2022)"
    summary = "paper 000: ECE of ReLU vs Leaky ReLU BNNs (Table 1), the slope sweep, decalibration, flat plateaus"
    profiles = PROFILES
    batch_runs = "auto"
    """Compatible runs train together (:mod:`pyro_bnn.batched`): those of one model, data set and objective (seeds,
    Leaky slopes), as many as fit in memory."""

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        def table_1(models: list[str]) -> list[RunSpec]:
            return [
                _bnn_spec(profile, model, dataset, activation, objective, seed, data_dirs)
                for model in models
                for seed in range(seeds)  # seed-major: every cell gets its first seed before any gets its second
                for objective in profile["objectives"]
                for dataset in profile["datasets"]
                for activation in ACTIVATIONS
            ]

        ablation = [
            _bnn_spec(profile, model, dataset, activation, "paper", seed, data_dirs, estimator="fused")
            for model in profile["ablation_models"]
            for seed in range(seeds)
            for dataset in profile["datasets"]
            for activation in ACTIVATIONS
        ]

        plateaus = [
            _plateau_spec(profile, model, activation, data_dirs)
            for model in profile["plateau_models"]
            for activation in ACTIVATIONS
        ]
        sweep = [
            _bnn_spec(profile, model, dataset, slope_activation(slope), "paper", seed, data_dirs)
            for seed in range(min(seeds, profile["sweep_seeds"]))
            for model in profile["sweep_models"]
            for dataset in profile["sweep_datasets"]
            for slope in profile["slopes"]
        ]
        # The first (cheapest) model's Table 1 cells, the plateaus and the sweep before the other models, so that an
        # interrupted grid holds whole parts of the report.
        models = profile["models"]
        return table_1(models[:1]) + plateaus + sweep + ablation + table_1(models[1:])

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.leaky_calibration.analysis import analyse

        return analyse(records, profile, out)
