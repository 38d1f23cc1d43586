"""Experiments: runs described by a :class:`RunConfig`, the demo, and (later) the paper reproductions."""

from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.experiments.runs import RunResult, evaluate_run, train_run

__all__ = ["RunConfig", "RunResult", "evaluate_run", "train_run"]
