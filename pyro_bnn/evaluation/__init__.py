"""Metrics of a classifier's posterior predictive, and of a Gaussian regression predictive (``regression``).

Every metric takes ``probs``, either posterior samples of class probabilities ``(num_samples, N, C)`` or their
mean ``(N, C)``, and, where it scores predictions, ``labels: (N,)`` integer class indices. Inputs may live on
any device; labels are moved to the device of ``probs``.

Inputs are validated in one place (``_validation``) and every failure is a ``ValueError`` naming what was
found: ``probs`` must be a floating tensor of rank 2 or 3 with no empty dimension, finite, non-negative, each
row summing to 1 within 1e-3 (see ``ROW_SUM_TOLERANCE``); ``labels`` an integer tensor of shape ``(N,)`` with
values in ``[0, C)``; counts such as ``n_bins`` ints >= 1.

Out-of-distribution detection (``ood``): :func:`ood_scores` turns ``probs`` into per-input scores (total entropy,
mutual information, ``1 - max`` mean probability; larger is more OOD), :func:`ood_detection` rates two score vectors
(AUROC, AUPR-in, AUPR-out, FPR at 95 % TPR; scikit-learn's metrics) and :func:`ood_metrics` does both for an
in-distribution and an OOD predictive.

Temperature scaling (``temperature``): :func:`fit_temperature` fits one temperature ``T`` on held-out ``probs`` by
minimising the NLL, :func:`apply_temperature` tempers a predictive with it (mode ``"mean"``: the sample-mean
probabilities, ``"samples"``: each sample; :class:`TemperatureMode`).

Referral curves (``referral``): :func:`referral_curve` scores the inputs kept after the most uncertain fraction is
set aside (by total entropy or mutual information). Galleries (``galleries``): :func:`most_confident_mistakes` and
:func:`least_confident` pick the inputs worth looking at.

Conformal prediction (``conformal``, ``conformal_regression``): :func:`calibrate_classifier` turns a labelled
calibration predictive into a :class:`ConformalClassifier` whose prediction sets (THR, APS or RAPS scores) hold the
label with probability >= ``1 - alpha``, scored by :func:`prediction_set_metrics`; :func:`calibrate_regressor` does
the same for a Gaussian regression predictive with intervals (:func:`interval_metrics`). Selective prediction
(``selective``): :func:`risk_coverage_curve` and its AURC for a :class:`ReferralScore`.

Over repeated runs (``seeds``): :func:`mean_sd`, a metric's mean and sample sd over the seeds' finite values.

Regression metrics (:func:`regression_metrics`: RMSE, mixture NLL, coverage of ``mean ± 2 sd``) take the sampled
means ``(num_samples, N, D)``, the noise scale (a scalar, or ``(num_samples, N, D)`` for a heteroscedastic
likelihood) and targets ``(N, D)``; see ``pyro_bnn.evaluation.regression``. :func:`regression_variance_split` splits
the predictive variance into aleatoric and epistemic parts (``regression_variance``); :func:`regression_calibration`
scores central-interval coverage, the quantile calibration error, CRPS and sharpness (``regression_scores``).
"""

from pyro_bnn.evaluation._validation import ROW_SUM_TOLERANCE
from pyro_bnn.evaluation.calibration import (
    DEFAULT_NUM_BINS,
    CalibrationResult,
    calibration,
    expected_calibration_error,
    maximum_calibration_error,
)
from pyro_bnn.evaluation.classification import accuracy, brier_score, nll
from pyro_bnn.evaluation.conformal import (
    ClassifierPredictive,
    ConformalClassifier,
    ConformalMethod,
    PredictionSetMetrics,
    ScoreSource,
    calibrate_classifier,
    class_scores,
    conformal_quantile,
    min_calibration_size,
    prediction_set_metrics,
)
from pyro_bnn.evaluation.conformal_regression import (
    ConformalRegressor,
    IntervalMetrics,
    RegressionPredictive,
    RegressionScore,
    calibrate_regressor,
    has_finite_sd,
    interval_metrics,
)
from pyro_bnn.evaluation.galleries import GalleryEntry, least_confident, most_confident_mistakes
from pyro_bnn.evaluation.label_frequencies import label_frequencies, label_frequencies_from_samples
from pyro_bnn.evaluation.ood import DETECTION_KEYS, TPR_LEVEL, OodScore, ood_detection, ood_metrics, ood_scores
from pyro_bnn.evaluation.referral import ReferralCurve, ReferralScore, referral_curve
from pyro_bnn.evaluation.regression import (
    DEFAULT_NUM_SD,
    REGRESSION_KEYS,
    predictive_moments,
    regression_metrics,
)
from pyro_bnn.evaluation.regression_scores import (
    DEFAULT_COVERAGE_LEVELS,
    DEFAULT_QCE_LEVELS,
    central_interval,
    crps_gaussian,
    crps_gaussian_mixture,
    crps_samples,
    mixture_cdf,
    mixture_quantile,
    pit_values,
    quantile_calibration_error,
    regression_calibration,
    sharpness,
)
from pyro_bnn.evaluation.regression_variance import RegressionVarianceSplit, regression_variance_split
from pyro_bnn.evaluation.seeds import mean_sd
from pyro_bnn.evaluation.selective import RiskCoverageCurve, aurc_by_score, risk_coverage_curve
from pyro_bnn.evaluation.summary import SUMMARY_KEYS, summarize, summarize_runs
from pyro_bnn.evaluation.temperature import TEMPERATURE_RANGE, TemperatureMode, apply_temperature, fit_temperature
from pyro_bnn.evaluation.uncertainty import UncertaintySplit, entropy_decomposition

__all__ = [
    "DEFAULT_COVERAGE_LEVELS",
    "DEFAULT_NUM_BINS",
    "DEFAULT_NUM_SD",
    "DEFAULT_QCE_LEVELS",
    "DETECTION_KEYS",
    "REGRESSION_KEYS",
    "ROW_SUM_TOLERANCE",
    "SUMMARY_KEYS",
    "TEMPERATURE_RANGE",
    "TPR_LEVEL",
    "CalibrationResult",
    "ClassifierPredictive",
    "ConformalClassifier",
    "ConformalMethod",
    "ConformalRegressor",
    "GalleryEntry",
    "IntervalMetrics",
    "OodScore",
    "PredictionSetMetrics",
    "ReferralCurve",
    "ReferralScore",
    "RegressionPredictive",
    "RegressionScore",
    "RegressionVarianceSplit",
    "RiskCoverageCurve",
    "ScoreSource",
    "TemperatureMode",
    "UncertaintySplit",
    "accuracy",
    "apply_temperature",
    "aurc_by_score",
    "brier_score",
    "calibrate_classifier",
    "calibrate_regressor",
    "calibration",
    "central_interval",
    "class_scores",
    "conformal_quantile",
    "crps_gaussian",
    "crps_gaussian_mixture",
    "crps_samples",
    "entropy_decomposition",
    "expected_calibration_error",
    "fit_temperature",
    "has_finite_sd",
    "interval_metrics",
    "label_frequencies",
    "label_frequencies_from_samples",
    "least_confident",
    "maximum_calibration_error",
    "mean_sd",
    "min_calibration_size",
    "mixture_cdf",
    "mixture_quantile",
    "most_confident_mistakes",
    "nll",
    "ood_detection",
    "ood_metrics",
    "ood_scores",
    "pit_values",
    "prediction_set_metrics",
    "predictive_moments",
    "quantile_calibration_error",
    "referral_curve",
    "regression_calibration",
    "regression_metrics",
    "regression_variance_split",
    "risk_coverage_curve",
    "sharpness",
    "summarize",
    "summarize_runs",
]
