"""Plots of a posterior predictive (reliability diagrams for classifiers, a mean ± 2 sd band for 1-D regression),
of training, and of the posterior diagnostics (likelihood slices, weight statistics, pruning, marginals, VI against
NUTS) and of selective prediction (risk-coverage curves), built with matplotlib's object API (no pyplot state)."""

from pyro_bnn.plots.figures import save_figure
from pyro_bnn.plots.galleries import plot_gallery
from pyro_bnn.plots.maps import plot_predictive_map
from pyro_bnn.plots.ood import plot_ood_histograms
from pyro_bnn.plots.posterior_shape import plot_marginals, plot_vi_vs_nuts
from pyro_bnn.plots.regression import plot_regression, training_gaps
from pyro_bnn.plots.reliability import plot_reliability, plot_reliability_comparison, plot_reliability_grid
from pyro_bnn.plots.selective import plot_risk_coverage
from pyro_bnn.plots.slices import plot_likelihood_slice, plot_plateau_fractions
from pyro_bnn.plots.training import plot_training_curves
from pyro_bnn.plots.weight_stats import plot_pruning, plot_weight_statistics

__all__ = [
    "plot_likelihood_slice",
    "plot_marginals",
    "plot_gallery",
    "plot_ood_histograms",
    "plot_predictive_map",
    "plot_plateau_fractions",
    "plot_pruning",
    "plot_regression",
    "plot_reliability",
    "plot_reliability_comparison",
    "plot_reliability_grid",
    "plot_risk_coverage",
    "plot_training_curves",
    "plot_vi_vs_nuts",
    "plot_weight_statistics",
    "save_figure",
    "training_gaps",
]
