"""Plots of a classifier's posterior predictive, built with matplotlib's object API (no pyplot state)."""

from pyro_bnn.plots.figures import save_figure
from pyro_bnn.plots.reliability import plot_reliability, plot_reliability_grid
from pyro_bnn.plots.training import plot_training_curves

__all__ = ["plot_reliability", "plot_reliability_grid", "plot_training_curves", "save_figure"]
