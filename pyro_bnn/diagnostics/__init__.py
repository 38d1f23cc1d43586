"""Posterior diagnostics: likelihood slices and flat plateaus, weight statistics and pruning, posterior shape in
ArviZ, and a NUTS reference for small networks. ``pyro-bnn diagnose`` runs them on a saved run."""

from pyro_bnn.diagnostics.arviz_export import (
    convergence_summary,
    draw_samples,
    draws_to_inference_data,
    normality_scores,
    to_inference_data,
)
from pyro_bnn.diagnostics.gaussian_fit import fit_gaussian, gaussian_tv_distance
from pyro_bnn.diagnostics.nuts import align_hidden_units, predictive_distance, run_nuts, wasserstein_1d
from pyro_bnn.diagnostics.plateaus import Plateau, PlateauSummary, find_plateau, plateau_fractions
from pyro_bnn.diagnostics.pruning import PrunedSource, Ranking, format_pruning_table, prune, pruning_table
from pyro_bnn.diagnostics.slices import LikelihoodSlice, SliceOptions, likelihood_slice, likelihood_slices, point_values
from pyro_bnn.diagnostics.weight_stats import WeightStatsRecorder, weight_statistics

__all__ = [
    "LikelihoodSlice",
    "Plateau",
    "PlateauSummary",
    "PrunedSource",
    "Ranking",
    "SliceOptions",
    "WeightStatsRecorder",
    "align_hidden_units",
    "convergence_summary",
    "draw_samples",
    "draws_to_inference_data",
    "find_plateau",
    "fit_gaussian",
    "format_pruning_table",
    "gaussian_tv_distance",
    "likelihood_slice",
    "likelihood_slices",
    "normality_scores",
    "plateau_fractions",
    "point_values",
    "predictive_distance",
    "prune",
    "pruning_table",
    "run_nuts",
    "to_inference_data",
    "wasserstein_1d",
    "weight_statistics",
]
