"""Experiments: runs described by a :class:`RunConfig`, re-scoring a saved run, OOD detection and temperature
scaling with it, and the demo (the paper reproductions are :mod:`pyro_bnn.reproduce`)."""

from pyro_bnn.experiments.ood import evaluate_ood
from pyro_bnn.experiments.temperature import fit_run_temperature
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.ensemble import load_ensemble
from pyro_bnn.runs.evaluate import evaluate_run
from pyro_bnn.runs.runs import RunResult, train_run

__all__ = [
    "RunConfig",
    "RunResult",
    "evaluate_ood",
    "evaluate_run",
    "fit_run_temperature",
    "load_ensemble",
    "train_run",
]
