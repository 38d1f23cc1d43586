"""Posterior predictive: one :class:`Prediction` object that metrics, plots and diagnostics consume."""

from pyro_bnn.predict.ensemble import Ensemble
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
    "Samples",
    "as_source",
    "draw_parameters",
    "predict",
    "predict_posterior_mean",
]
