"""Experiments: runs described by a :class:`RunConfig`, re-scoring a saved run, OOD detection and temperature
scaling with it, and the demo (the paper reproductions are :mod:`pyro_bnn.reproduce`)."""

from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.experiments.ensemble import load_ensemble
from pyro_bnn.experiments.evaluate import evaluate_run
from pyro_bnn.experiments.ood import evaluate_ood
from pyro_bnn.experiments.runs import RunResult, train_run
from pyro_bnn.experiments.temperature import fit_run_temperature

__all__ = [
    "RunConfig",
    "RunResult",
    "evaluate_ood",
    "evaluate_run",
    "fit_run_temperature",
    "load_ensemble",
    "train_run",
]
