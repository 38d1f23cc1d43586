"""Split conformal regression for a Gaussian-likelihood predictive: intervals with a finite-sample coverage guarantee.

The predictive's mean ``m(x)`` and standard deviation ``sd(x)`` are those of
:func:`~pyro_bnn.evaluation.predictive_moments` (the spread of the sampled means plus the noise). Two scores
(:class:`RegressionScore`):

* ``absolute``: ``|y - m(x)|``; the interval ``m(x) ± q`` has the same width everywhere.
* ``normalized``: ``|y - m(x)| / sd(x)``; the interval ``m(x) ± q sd(x)`` is wider where the posterior (or the
  noise) is, so it uses the posterior spread and stays valid when that spread is miscalibrated.

``q`` is the ``ceil((n + 1)(1 - alpha))``-th smallest of the ``n`` calibration scores
(:func:`~pyro_bnn.evaluation.conformal_quantile`). For ``D > 1`` outputs a point's score is the largest over its
outputs, so the box of per-output intervals holds the whole target with probability >= ``1 - alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import torch

from pyro_bnn.evaluation.conformal import check_alpha, conformal_quantile
from pyro_bnn.evaluation.regression import (
    _check_df,
    _check_means,
    _check_noise_scale,
    _check_targets,
    _mixture_moments,
)


class RegressionScore(str, Enum):
    """The nonconformity score of a conformal regressor."""

    ABSOLUTE = "absolute"
    """``|y - mean|``: intervals of one width."""
    NORMALIZED = "normalized"
    """``|y - mean| / sd`` with the predictive standard deviation: intervals as wide as the predictive spread."""


class RegressionPredictive(Protocol):
    """What a conformal regressor reads of a prediction; :class:`pyro_bnn.predict.Prediction` has it."""

    means: torch.Tensor | None
    noise_scale: torch.Tensor | None
    targets: torch.Tensor | None


def _moments(
    prediction: RegressionPredictive, score: RegressionScore
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if getattr(prediction, "means", None) is None:
        raise ValueError("a conformal regressor needs a regression prediction (means); this one has none")
    means = _check_means(prediction.means)
    scale = _check_noise_scale(prediction.noise_scale, means.device, means.shape)
    df = _check_df(getattr(prediction, "noise_df", None))
    if score is RegressionScore.NORMALIZED and not has_finite_sd(prediction):
        raise ValueError(
            f"the normalized score divides by the predictive sd, which is infinite for Student-t noise with df = "
            f"{df:g} <= 2; use score='absolute'"
        )
    mean, sd = _mixture_moments(means, scale, df)
    return means, mean, sd


def has_finite_sd(prediction: RegressionPredictive) -> bool:
    """Whether the predictive has a finite standard deviation, as the ``normalized`` score needs: Gaussian noise,
    or Student-t noise with ``df > 2``."""
    df = _check_df(getattr(prediction, "noise_df", None))
    return df is None or df > 2


def _check_score(score: RegressionScore | str) -> RegressionScore:
    try:
        return RegressionScore(score)
    except ValueError:
        known = ", ".join(s.value for s in RegressionScore)
        raise ValueError(f"unknown regression score {score!r}; expected one of {known}") from None


@dataclass(frozen=True)
class ConformalRegressor:
    """A calibrated split-conformal regressor (:func:`calibrate_regressor` makes one).

    Attributes:
        score: The nonconformity score.
        alpha: The miscoverage level it was calibrated for.
        quantile: The threshold ``q`` on the score (in target units for ``absolute``, in sds for ``normalized``).
        num_calibration: ``n``, the calibration points.
    """

    score: RegressionScore
    alpha: float
    quantile: float
    num_calibration: int

    def intervals(self, prediction: RegressionPredictive) -> tuple[torch.Tensor, torch.Tensor]:
        """The conformal interval of every test point and output.

        Args:
            prediction: A regression :class:`~pyro_bnn.predict.Prediction` (``means (S, N, D)``, ``noise_scale``).

        Returns:
            ``(lower, upper)``, each ``(N, D)`` float64 on the means' device.

        Raises:
            ValueError: not a regression prediction, or its means or noise scale fail validation, or a ``normalized``
                regressor on a predictive of infinite sd.
        """
        _, mean, sd = _moments(prediction, self.score)
        half = self.quantile * (sd if self.score is RegressionScore.NORMALIZED else torch.ones_like(sd))
        return mean - half, mean + half


def calibrate_regressor(
    calibration: RegressionPredictive, alpha: float, *, score: RegressionScore | str = RegressionScore.NORMALIZED
) -> ConformalRegressor:
    """Calibrates a split-conformal regressor on held-out points.

    Args:
        calibration: A regression :class:`~pyro_bnn.predict.Prediction` with targets ``(N, D)``.
        alpha: Miscoverage level in ``(0, 1)``.
        score: ``"absolute"`` or ``"normalized"`` (:class:`RegressionScore`).

    Returns:
        The calibrated regressor.

    Raises:
        ValueError: not a regression prediction or one without targets, invalid means, noise scale or targets,
            ``alpha`` not in ``(0, 1)``, an unknown score, too few points for ``alpha``, or the ``normalized``
            score where the predictive sd is infinite (Student-t noise with ``df <= 2``); one line.
    """
    alpha = check_alpha(alpha)
    score = _check_score(score)
    means, mean, sd = _moments(calibration, score)
    if calibration.targets is None:
        raise ValueError("calibration needs targets: pass a prediction made on (x, y)")
    targets = _check_targets(calibration.targets, means)
    residual = (targets - mean).abs()
    if score is RegressionScore.NORMALIZED:
        residual = residual / sd
    scores = residual.amax(dim=-1)  # (N,): the worst output of each point
    return ConformalRegressor(score, alpha, conformal_quantile(scores, alpha), scores.numel())


@dataclass(frozen=True)
class IntervalMetrics:
    """How intervals did against the targets.

    Attributes:
        coverage: Share of points whose every output lies in its interval.
        mean_width: Mean of ``upper - lower`` over points and outputs.
    """

    coverage: float
    mean_width: float

    def to_dict(self) -> dict[str, float]:
        """Plain JSON values."""
        return {"coverage": self.coverage, "mean_width": self.mean_width}


def interval_metrics(lower: torch.Tensor, upper: torch.Tensor, targets: torch.Tensor) -> IntervalMetrics:
    """Coverage and mean width of intervals.

    Args:
        lower: ``(N, D)`` lower ends.
        upper: ``(N, D)`` upper ends, >= ``lower``.
        targets: ``(N, D)`` targets (moved to ``lower``'s device).

    Returns:
        The metrics.

    Raises:
        ValueError: not tensors, the shapes differ or hold no interval, a value is NaN, or an upper end lies
            below its lower end.
    """
    for name, value in (("lower", lower), ("upper", upper), ("targets", targets)):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor (N, D); got {type(value).__name__}")
    if lower.shape != upper.shape or lower.shape != targets.shape or lower.dim() != 2:
        raise ValueError(
            f"lower, upper and targets must share one shape (N, D); got {tuple(lower.shape)}, "
            f"{tuple(upper.shape)} and {tuple(targets.shape)}"
        )
    if lower.shape[0] == 0:
        raise ValueError("interval_metrics needs at least one interval; got N = 0")
    for name, value in (("lower", lower), ("upper", upper), ("targets", targets)):
        if value.dtype.is_floating_point and bool(torch.isnan(value).any()):
            raise ValueError(f"{name} holds NaN; intervals and targets must be numbers")
    if bool((upper < lower).any()):
        raise ValueError("every upper end must be >= its lower end; found one below")
    targets = targets.to(device=lower.device, dtype=lower.dtype)
    inside = ((targets >= lower) & (targets <= upper)).all(dim=-1)
    return IntervalMetrics(coverage=float(inside.double().mean()), mean_width=float((upper - lower).double().mean()))


__all__ = [
    "ConformalRegressor",
    "IntervalMetrics",
    "RegressionPredictive",
    "RegressionScore",
    "calibrate_regressor",
    "has_finite_sd",
    "interval_metrics",
]
