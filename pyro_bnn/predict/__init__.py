"""Posterior predictive: one :class:`Prediction` object that metrics, plots and diagnostics consume."""

from pyro_bnn.predict.ensemble import Ensemble
from pyro_bnn.predict.maps import PredictiveMap, map_bounds, predictive_map
from pyro_bnn.predict.prediction import AccuracyBreakdown, Prediction
from pyro_bnn.predict.predictive import predict, predict_posterior_mean
from pyro_bnn.predict.sources import (
    GuideSource,
    ParameterSource,
    PointEstimate,
    Samples,
    as_source,
    draw_parameters,
)

__all__ = [
    "Ensemble",
    "AccuracyBreakdown",
    "GuideSource",
    "ParameterSource",
    "PointEstimate",
    "Prediction",
    "PredictiveMap",
    "Samples",
    "as_source",
    "draw_parameters",
    "map_bounds",
    "predict",
    "predict_posterior_mean",
    "predictive_map",
]
