"""The registered reproductions, one module per paper (a sixth paper is one new module and one line here)."""

from __future__ import annotations

from pyro_bnn.reproduce.papers.bayes_by_backprop import BayesByBackprop
from pyro_bnn.reproduce.papers.bbb_fashion import BbbFashion
from pyro_bnn.reproduce.papers.implicit_bnn import ImplicitBnn
from pyro_bnn.reproduce.papers.leaky_calibration import LeakyCalibration
from pyro_bnn.reproduce.papers.posterior_families import PosteriorFamilies
from pyro_bnn.reproduce.papers.priors import Priors
from pyro_bnn.reproduce.spec import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    experiment.name: experiment
    for experiment in (
        LeakyCalibration(),
        BayesByBackprop(),
        BbbFashion(),
        ImplicitBnn(),
        Priors(),
        PosteriorFamilies(),
    )
}
"""Experiment name -> experiment."""
