"""The ``bbb-fashion`` reproduction as one package: :mod:`.plan` (its runs, profiles and constants),
:mod:`.analysis` (its report) and the experiment class below."""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.bayes_by_backprop import measures  # noqa: F401  (accuracies and ood, shared with bbb)
from pyro_bnn.reproduce.papers.bbb_fashion.plan import COMPARABLE, OOD_DATA, PRIOR, PROFILES
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, RunSpec
from pyro_bnn.runs.config import RunConfig

__all__ = ["BbbFashion", "COMPARABLE"]
"""The experiment class, and the plan constants its report names."""


class BbbFashion:
    """Paper 004 as a grid and an analysis (see the module docstring)."""

    name = "bbb-fashion"
    title = "Bayes by Backprop on Fashion-MNIST: samples, posterior mean and ensemble; MNIST as out-of-domain data"
    summary = "paper 004: BBB tutorial on Fashion-MNIST, ensemble vs posterior mean vs samples, MNIST out-of-domain"
    profiles = PROFILES

    def plan(self, profile: Profile, seeds: int, data_dirs: dict[str, str]) -> list[RunSpec]:
        specs = []
        for seed in range(seeds):
            config = RunConfig(
                dataset="fashion-mnist",
                model="bbb-mlp",
                activation="relu",
                prior=PRIOR,
                guide="bbb",
                epochs=profile["epochs"],
                batch_size=profile["batch_size"],
                num_particles=profile["num_particles"],
                lr=profile["lr"],
                seed=seed,
                train_subset=profile["train_images"],
                val_size=0,
                test_subset=profile["test_subset"],
                normalization="unit",
                data_dir=data_dirs.get("fashion-mnist"),
                num_samples=profile["num_samples"],
            )
            specs.append(
                RunSpec(
                    config,
                    label=f"bbb-fashion-s{seed}",
                    measures=("accuracies", f"ood:{OOD_DATA},{profile['ood_samples']}"),
                    other_data=((OOD_DATA, data_dirs.get(OOD_DATA)),),
                )
            )
        return specs

    def analyse(self, records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
        from pyro_bnn.reproduce.papers.bbb_fashion.analysis import analyse

        return analyse(records, profile, out)
