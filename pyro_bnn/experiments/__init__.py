"""Experiments: runs described by a :class:`RunConfig`, the demo, and (later) the paper reproductions."""

from pyro_bnn.experiments.config import RunConfig
from pyro_bnn.experiments.evaluate import evaluate_run
from pyro_bnn.experiments.runs import RunResult, train_run

__all__ = ["RunConfig", "RunResult", "evaluate_run", "train_run"]
