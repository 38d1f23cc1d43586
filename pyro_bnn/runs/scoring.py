"""Scoring a trained run on its test set, and the figure of that prediction (``pyro-bnn train`` and
``pyro-bnn evaluate`` both use them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyro
import torch

from pyro_bnn.bnn import BNN
from pyro_bnn.data import TensorSplit
from pyro_bnn.evaluation import calibration, min_calibration_size, predictive_moments, regression_metrics
from pyro_bnn.predict import Prediction, predict
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.conformal import ConformalOptions, conformal_record

CONFORMAL_ALPHA = 0.1
"""The miscoverage level of the conformal sets every classifier's test scoring records (:func:`conformal_metrics`)."""

CONFORMAL_KEYS = ("conformal_coverage", "conformal_set_size")
"""The metrics :func:`conformal_metrics` adds: the coverage and the mean size of the THR sets on the scored half."""


def conformal_metrics(prediction: Prediction) -> dict[str, float]:
    """Split conformal prediction at :data:`CONFORMAL_ALPHA` with the threshold score (THR, ``1 - p_y``) on a test
    prediction: calibrated on a seeded half of the test inputs and scored on the other half, the split of
    ``pyro-bnn evaluate RUN --conformal 0.1`` (:func:`~pyro_bnn.runs.conformal.conformal_record`, seed
    :data:`~pyro_bnn.runs.conformal.SPLIT_SEED`), so both give the same numbers on the same prediction.

    Args:
        prediction: The test prediction with targets; classification probabilities ``(S, N, C)``.

    Returns:
        ``{"conformal_coverage", "conformal_set_size"}`` (:data:`CONFORMAL_KEYS`): the share of the scored half whose
        set holds the label (at least ``0.9`` in expectation over splits) and the mean number of classes per set;
        empty for a regression prediction, one without targets, or a test set whose half is too few for alpha
        (fewer than 18 inputs at 0.1).
    """
    if not prediction.is_classification or prediction.targets is None:
        return {}
    if prediction.targets.shape[0] // 2 < min_calibration_size(CONFORMAL_ALPHA):
        return {}
    record = conformal_record(prediction, ConformalOptions(CONFORMAL_ALPHA).check())
    return {"conformal_coverage": record["coverage"], "conformal_set_size": record["mean_set_size"]}


def score(bnn: BNN, guide, x: torch.Tensor, y: torch.Tensor, config: RunConfig) -> tuple[dict[str, Any], Prediction]:
    """Test metrics of the posterior predictive and of the posterior-mean network (where the source has one; a
    deep ensemble has none, and gets the predictive's metrics alone).

    Classification: ``accuracy, nll, brier, ece, mce, posterior_mean_accuracy, posterior_mean_ece`` and, where the
    test set has at least 18 inputs, ``conformal_coverage, conformal_set_size`` (:func:`conformal_metrics`).
    Regression: ``rmse, nll, coverage`` (of mean ± 2 sd; :func:`pyro_bnn.evaluation.regression_metrics`) and
    ``posterior_mean_rmse``.

    The predictive's draws are made under the run's seed (``pyro.set_rng_seed(config.seed)`` first), so a run's
    recorded metrics and a later ``evaluate`` of its checkpoint are the same numbers, whatever drew before.
    """
    pyro.set_rng_seed(config.seed)
    prediction = predict(bnn, guide, (x, y), num_samples=config.num_samples, point=True)
    mean_net = prediction.point
    if not prediction.is_classification:
        metrics = regression_metrics(prediction.means, prediction.noise_scale, prediction.targets)
        if mean_net is not None:
            mean_rmse = regression_metrics(mean_net.means, mean_net.noise_scale, mean_net.targets)["rmse"]
            metrics["posterior_mean_rmse"] = mean_rmse
        return metrics, prediction
    metrics = prediction.metrics(n_bins=config.n_bins)
    metrics.update(conformal_metrics(prediction))
    if mean_net is not None:
        mean_metrics = mean_net.metrics(n_bins=config.n_bins)
        metrics["posterior_mean_accuracy"] = mean_metrics["accuracy"]
        metrics["posterior_mean_ece"] = mean_metrics["ece"]
    return metrics, prediction


def save_prediction_figure(
    prediction: Prediction,
    config: RunConfig,
    out: Path,
    *,
    suffix: str = "",
    title: str,
    train: TensorSplit | None = None,
    test: TensorSplit | None = None,
) -> Path:
    """Writes the figure of a test prediction into ``out`` and returns its path.

    Classification: the reliability diagram ``reliability{suffix}.png``. Regression: ``predictive{suffix}.png``,
    the predictive mean ± 2 sd over the test inputs of ``test`` (its targets drawn as the true function) with the
    ``train`` points as dots.
    """
    from pyro_bnn.plots import plot_regression, plot_reliability, save_figure  # matplotlib: imported when drawn

    if prediction.is_classification:
        result = calibration(prediction.probs, prediction.targets, n_bins=config.n_bins)
        return save_figure(plot_reliability(result, title=title), out / f"reliability{suffix}.png")
    if test is None:
        raise ValueError("a regression figure needs the test split (its inputs are the x axis)")
    mean, sd = predictive_moments(prediction.means, prediction.noise_scale)
    figure = plot_regression(
        test.x,
        mean,
        sd,
        x_train=None if train is None else train.x,
        y_train=None if train is None else train.y,
        y_true=test.y,
        title=title,
    )
    return save_figure(figure, out / f"predictive{suffix}.png")
