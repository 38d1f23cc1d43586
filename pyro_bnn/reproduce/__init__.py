"""Reproductions of the papers' experiments, one command each: ``pyro-bnn reproduce NAME`` or :func:`reproduce`.

Example:
    >>> from pyro_bnn.reproduce import reproduce
    >>> report = reproduce("leaky-calibration", profile="quick", out="runs/leaky-quick")  # doctest: +SKIP

Layers: :mod:`.planned` (runs, profiles, verdicts as data), :mod:`.records` (one run executed and recorded),
:mod:`.executors` (in-process, process pool, Ray), :mod:`.grid` (skip what finished, run the rest),
:mod:`.report` (``report.md`` from the run folders) and :mod:`.papers` (one package per paper).
"""

from pyro_bnn.reproduce.api import experiment_names, get_experiment, listing, reproduce, rescore
from pyro_bnn.reproduce.ensembles import ensemble_specs, train_ensemble
from pyro_bnn.reproduce.executors import ExecutorKind, LocalExecutor, RayExecutor, make_executor
from pyro_bnn.reproduce.grid import run_grid
from pyro_bnn.reproduce.planned import Headline, Profile, RunRecord, RunSpec, Status, Verdict

__all__ = [
    "ExecutorKind",
    "Headline",
    "LocalExecutor",
    "Profile",
    "RayExecutor",
    "RunRecord",
    "RunSpec",
    "Status",
    "Verdict",
    "ensemble_specs",
    "experiment_names",
    "get_experiment",
    "listing",
    "make_executor",
    "reproduce",
    "rescore",
    "run_grid",
    "train_ensemble",
]
