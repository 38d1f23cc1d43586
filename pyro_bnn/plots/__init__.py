"""Plots of a posterior predictive (reliability diagrams for classifiers, a mean ± 2 sd band for 1-D regression)
and of training, built with matplotlib's object API (no pyplot state)."""

from pyro_bnn.plots.figures import save_figure
from pyro_bnn.plots.regression import plot_regression, training_gaps
from pyro_bnn.plots.reliability import plot_reliability, plot_reliability_grid
from pyro_bnn.plots.training import plot_training_curves

__all__ = [
    "plot_regression",
    "plot_reliability",
    "plot_reliability_grid",
    "plot_training_curves",
    "save_figure",
    "training_gaps",
]
