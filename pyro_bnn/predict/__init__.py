"""Posterior predictive: one :class:`Prediction` object that metrics, plots and diagnostics consume."""

from pyro_bnn.predict.prediction import Prediction
from pyro_bnn.predict.predictive import draw_parameters, predict, predict_posterior_mean

__all__ = ["Prediction", "draw_parameters", "predict", "predict_posterior_mean"]
