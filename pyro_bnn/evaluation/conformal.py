"""Split conformal classification: prediction sets with a finite-sample coverage guarantee.

Calibrate on ``n`` labelled inputs that the model was not trained on: compute a nonconformity score
``s(x_i, y_i)`` for each, take the ``k = ceil((n + 1)(1 - alpha))``-th smallest of them as the threshold ``q``, and
predict for a new input every class whose score is at most ``q``. When the calibration and test pairs are
exchangeable the set holds the true label with probability at least ``1 - alpha`` (and, for continuous scores, at
most ``1 - alpha + 1 / (n + 1)``), whatever the model (Vovk et al., 2005; Angelopoulos and Bates, 2021). ``k > n``
(fewer than ``(1 - alpha) / alpha`` calibration points) has no finite threshold and is refused.

The scores (:class:`ConformalMethod`):

* ``thr``: ``1 - p_y`` (LAC, Sadinle et al., 2019): the smallest sets on average, but no adaptivity.
* ``aps``: the probability mass of the classes ranked above ``y`` plus ``u * p_y`` (Romano et al., 2020).
* ``raps``: APS plus ``lam * max(0, rank(y) - k_reg)`` (Angelopoulos et al., 2021), which penalises long sets.

Ranks come from a stable descending sort: tied classes rank by class index, the lower first. ``u`` is uniform on
``[0, 1]``, one draw per input (shared by its classes), for the randomised variants; the non-randomised ones take
``u = 1``, the whole mass up to and including ``y``. Every set is ``{c : s(x, c) <= q}``, so it may be empty.
Scores are computed in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

import torch

from pyro_bnn.checks import non_negative_float, non_negative_int, open_unit, positive_int
from pyro_bnn.evaluation._validation import check_labels, check_probs


class ConformalMethod(str, Enum):
    """The nonconformity score of a conformal classifier."""

    THR = "thr"
    """``1 - p_y``, the threshold (LAC) score."""
    APS = "aps"
    """Adaptive prediction sets: the mass of the classes ranked above ``y`` plus ``u * p_y``."""
    RAPS = "raps"
    """Regularised APS: the APS score plus ``lam * max(0, rank(y) - k_reg)`` (``rank`` 1 for the top class)."""


class ScoreSource(str, Enum):
    """Which probabilities a conformal score is computed from."""

    MEAN = "mean"
    """The posterior-mean probabilities ``pbar = mean_s p_s``."""
    SAMPLES = "samples"
    """Each posterior sample's probabilities ``p_s``; the score is the mean over samples of the per-sample score."""


class ClassifierPredictive(Protocol):
    """What a conformal classifier reads of a prediction; :class:`pyro_bnn.predict.Prediction` has it."""

    probs: torch.Tensor | None
    targets: torch.Tensor | None


def check_alpha(alpha: object) -> float:
    """Validates a miscoverage level; returns it as a float.

    Raises:
        ValueError: ``alpha`` is not a number strictly between 0 and 1.
    """
    return open_unit(alpha, "alpha")


def _quantile_rank(num_calibration: int, alpha: float) -> int:
    # 1 - alpha is rarely exact in binary (1 - 0.7 = 0.30000000000000004), which would push an exact integer
    # (n + 1)(1 - alpha) one rank up; 1e-9 is far below the spacing 1 / (n + 1) of the ranks that matter.
    return math.ceil((num_calibration + 1) * (1.0 - alpha) - 1e-9)


def min_calibration_size(alpha: float) -> int:
    """The fewest calibration points that give a finite conformal threshold at ``alpha``: ``ceil((1 - a) / a)``.

    Raises:
        ValueError: ``alpha`` is not in ``(0, 1)``.
    """
    alpha = check_alpha(alpha)
    return max(1, math.ceil((1.0 - alpha) / alpha - 1e-9))


def conformal_quantile(scores: torch.Tensor, alpha: float) -> float:
    """The split-conformal threshold: the ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` calibration scores.

    Args:
        scores: ``(n,)`` calibration scores, real and finite.
        alpha: Miscoverage level in ``(0, 1)``.

    Returns:
        The threshold ``q``, a Python float.

    Raises:
        ValueError: ``scores`` is not a non-empty finite 1-D tensor, ``alpha`` not in ``(0, 1)``, or ``n`` too small
            for ``alpha`` (:func:`min_calibration_size`), which would need the ``n + 1``-th score.
    """
    alpha = check_alpha(alpha)
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1 or scores.numel() == 0:
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a non-empty 1-D tensor (n,); got {shape}")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite; found a NaN or infinite calibration score")
    n = scores.numel()
    rank = _quantile_rank(n, alpha)
    if rank > n:
        raise ValueError(
            f"{n} calibration points are too few for alpha={alpha:g}: a finite threshold needs at least "
            f"{min_calibration_size(alpha)}"
        )
    return float(torch.sort(scores.double()).values[rank - 1])


def _check_options(method: object, lam: object, k_reg: object, source: object) -> tuple[ConformalMethod, ScoreSource]:
    try:
        method = ConformalMethod(method)
    except ValueError:
        known = ", ".join(m.value for m in ConformalMethod)
        raise ValueError(f"unknown conformal method {method!r}; expected one of {known}") from None
    try:
        source = ScoreSource(source)
    except ValueError:
        known = ", ".join(s.value for s in ScoreSource)
        raise ValueError(f"unknown score source {source!r}; expected one of {known}") from None
    non_negative_float(lam, "lam")
    non_negative_int(k_reg, "k_reg")
    return method, source


def class_scores(
    probs: torch.Tensor,
    method: ConformalMethod | str,
    *,
    u: torch.Tensor | None = None,
    lam: float = 0.0,
    k_reg: int = 0,
) -> torch.Tensor:
    """The nonconformity score of every class of every input (see the module docstring).

    Args:
        probs: ``(..., N, C)`` class probabilities (validated by the caller).
        method: The score.
        u: ``(N,)`` uniform draws of the randomised APS / RAPS, or None for ``u = 1``; ignored by ``thr``.
        lam: RAPS' penalty per rank beyond ``k_reg``.
        k_reg: RAPS' ranks without penalty.

    Returns:
        ``(..., N, C)`` float64 scores; the set of input ``n`` at threshold ``q`` is ``scores[..., n, :] <= q``.
    """
    probs = probs.double()
    if ConformalMethod(method) is ConformalMethod.THR:
        return 1.0 - probs
    ordered, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    above = ordered.cumsum(dim=-1) - ordered  # mass of the classes ranked before each position
    ranks = torch.arange(1, probs.shape[-1] + 1, dtype=torch.float64, device=probs.device)
    weight = torch.ones_like(probs[..., :1]) if u is None else u.to(probs).unsqueeze(-1)
    sorted_scores = above + weight * ordered
    if ConformalMethod(method) is ConformalMethod.RAPS:
        sorted_scores = sorted_scores + lam * (ranks - k_reg).clamp_min(0.0)
    return torch.empty_like(sorted_scores).scatter_(-1, order, sorted_scores)


def _probs_and_labels(
    prediction: ClassifierPredictive | torch.Tensor, labels: torch.Tensor | None, *, need_labels: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(prediction, torch.Tensor):
        probs = prediction
    else:
        probs = getattr(prediction, "probs", None)
        if probs is None:
            raise ValueError("a conformal classifier needs class probabilities; this prediction has none")
        labels = prediction.targets if labels is None else labels
    probs = check_probs(probs)
    samples = probs if probs.dim() == 3 else probs.unsqueeze(0)
    if need_labels:
        if labels is None:
            raise ValueError("calibration needs labels: pass a prediction with targets, or labels=")
        labels = check_labels(labels, num_points=samples.shape[1], num_classes=samples.shape[2], device=probs.device)
    return samples, labels


def _uniform(num_points: int, generator: torch.Generator | None) -> torch.Tensor:
    """``(num_points,)`` uniform draws on the generator's device (the CPU for torch's global one)."""
    device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(num_points, generator=generator, dtype=torch.float64, device=device)


@dataclass(frozen=True)
class ConformalClassifier:
    """A calibrated split-conformal classifier (:func:`calibrate_classifier` makes one).

    Attributes:
        method: The nonconformity score.
        alpha: The miscoverage level it was calibrated for.
        quantile: The threshold ``q`` on the score.
        num_calibration: ``n``, the calibration points.
        randomized: Whether APS / RAPS draw ``u`` (False: ``u = 1``); no effect on ``thr``.
        lam: RAPS' penalty per rank beyond ``k_reg``.
        k_reg: RAPS' ranks without penalty.
        source: Whether scores come from the posterior-mean probabilities or from each sample.
        num_classes: ``C``, the classes of the calibration probabilities; test probabilities must have as many
            (None, as in a classifier made by hand, checks nothing).
    """

    method: ConformalMethod
    alpha: float
    quantile: float
    num_calibration: int
    randomized: bool = True
    lam: float = 0.0
    k_reg: int = 0
    source: ScoreSource = ScoreSource.MEAN
    num_classes: int | None = None

    def __post_init__(self) -> None:
        # the enums' string values are accepted too ("aps", "mean"), as everywhere else
        method, source = _check_options(self.method, self.lam, self.k_reg, self.source)
        if self.num_classes is not None:
            positive_int(self.num_classes, "num_classes")
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "source", source)

    def _scores(self, samples: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        """``(N, C)`` scores of validated ``samples (S, N, C)`` with the draws ``u (N,)`` (or None)."""
        probs = samples.mean(dim=0) if self.source is ScoreSource.MEAN else samples
        scores = class_scores(probs, self.method, u=u, lam=self.lam, k_reg=self.k_reg)
        return scores if self.source is ScoreSource.MEAN else scores.mean(dim=0)

    def _draws(self, num_points: int, generator: torch.Generator | None) -> torch.Tensor | None:
        """The ``u`` of ``num_points`` inputs: uniform draws for a randomised APS / RAPS, else None."""
        if self.randomized and self.method is not ConformalMethod.THR:
            return _uniform(num_points, generator)
        return None

    def prediction_sets(
        self, prediction: ClassifierPredictive | torch.Tensor, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The prediction set of every input.

        Args:
            prediction: A :class:`~pyro_bnn.predict.Prediction` of the test inputs (its ``probs`` are read), or
                class probabilities ``(S, N, C)`` or ``(N, C)``.
            generator: The ``torch.Generator`` (any device) of the randomised variants' ``u`` (default: torch's
                global one); the draws are moved to the probabilities' device.

        Returns:
            ``(N, C)`` bool mask, True where the class is in the input's set, on the probabilities' device.

        Raises:
            ValueError: the probabilities fail validation (see :mod:`pyro_bnn.evaluation`), or have another number
                of classes than the calibration's.
        """
        samples, _ = _probs_and_labels(prediction, None, need_labels=False)
        if self.num_classes is not None and samples.shape[-1] != self.num_classes:
            # the threshold means nothing for another label space; broadcasting would return sets of its width
            raise ValueError(
                f"the probabilities have {samples.shape[-1]} classes; "
                f"this classifier was calibrated on {self.num_classes}"
            )
        u = self._draws(samples.shape[1], generator)
        return self._scores(samples, u) <= self.quantile


def calibrate_classifier(
    calibration: ClassifierPredictive | torch.Tensor,
    alpha: float,
    *,
    method: ConformalMethod | str = ConformalMethod.THR,
    labels: torch.Tensor | None = None,
    randomized: bool = True,
    lam: float = 0.01,
    k_reg: int = 1,
    source: ScoreSource | str = ScoreSource.MEAN,
    generator: torch.Generator | None = None,
) -> ConformalClassifier:
    """Calibrates a split-conformal classifier on held-out labelled inputs.

    With ``source="mean"`` (the default) the score is that of the posterior predictive ``pbar``. With
    ``source="samples"`` it is the mean over the posterior samples of each sample's own score: for ``thr`` that is
    the same number (``1 - p_y`` is linear in ``p``); for APS and RAPS each sample ranks the classes by its own
    probabilities, and the mean of their scores differs from ``pbar``'s score where the samples' rankings disagree
    (larger or smaller: it is not monotone in the disagreement), so the sets change where the posterior is
    uncertain about the ranking. The coverage guarantee holds either way; what changes is which inputs get the
    large sets.

    Args:
        calibration: A :class:`~pyro_bnn.predict.Prediction` with targets, or class probabilities ``(S, N, C)`` or
            ``(N, C)`` with ``labels``.
        alpha: Miscoverage level in ``(0, 1)``; sets hold the label with probability >= ``1 - alpha``.
        method: ``"thr"``, ``"aps"`` or ``"raps"`` (:class:`ConformalMethod`).
        labels: ``(N,)`` integer labels; default the prediction's targets.
        randomized: APS / RAPS: draw ``u`` uniform per input (exact coverage in expectation), or take ``u = 1``
            (a deterministic, more conservative score).
        lam: RAPS' penalty ``lambda`` per rank beyond ``k_reg``, >= 0.
        k_reg: RAPS' number of top ranks without penalty, >= 0.
        source: ``"mean"`` or ``"samples"`` (:class:`ScoreSource`).
        generator: The ``torch.Generator`` (any device) of the calibration points' ``u`` (default: torch's
            global one).

    Returns:
        The calibrated classifier.

    Raises:
        ValueError: invalid probabilities or labels, ``alpha`` not in ``(0, 1)``, an unknown method or source, a
            negative ``lam`` or ``k_reg``, or fewer calibration points than ``alpha`` needs; one line.
    """
    alpha = check_alpha(alpha)
    method, source = _check_options(method, lam, k_reg, source)
    samples, labels = _probs_and_labels(calibration, labels, need_labels=True)
    if method is not ConformalMethod.RAPS:
        lam, k_reg = 0.0, 0
    draft = ConformalClassifier(
        method, alpha, math.nan, samples.shape[1], bool(randomized), float(lam), int(k_reg), source, samples.shape[2]
    )
    scores = draft._scores(samples, draft._draws(samples.shape[1], generator))
    label_scores = scores.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return replace(draft, quantile=conformal_quantile(label_scores, alpha))


@dataclass(frozen=True)
class PredictionSetMetrics:
    """How prediction sets did against the true labels.

    Attributes:
        coverage: Share of inputs whose set holds the label.
        mean_size: Mean number of classes per set.
        empty_share: Share of empty sets.
        by_size: ``{size: (count, coverage)}`` for every set size that occurs, in increasing size (an empty set
            covers nothing).
    """

    coverage: float
    mean_size: float
    empty_share: float
    by_size: dict[int, tuple[int, float]]

    def to_dict(self) -> dict[str, object]:
        """Plain JSON values (the sizes as string keys)."""
        return {
            "coverage": self.coverage,
            "mean_set_size": self.mean_size,
            "empty_share": self.empty_share,
            "coverage_by_size": {str(size): {"count": c, "coverage": v} for size, (c, v) in self.by_size.items()},
        }


def prediction_set_metrics(sets: torch.Tensor, labels: torch.Tensor) -> PredictionSetMetrics:
    """Coverage, mean size, share of empty sets and size-stratified coverage of prediction sets.

    Args:
        sets: ``(N, C)`` bool mask (:meth:`ConformalClassifier.prediction_sets`).
        labels: ``(N,)`` integer labels.

    Returns:
        The metrics.

    Raises:
        ValueError: ``sets`` is not a non-empty ``(N, C)`` bool tensor, or ``labels`` do not fit it.
    """
    if not isinstance(sets, torch.Tensor) or sets.dtype != torch.bool or sets.dim() != 2 or sets.numel() == 0:
        found = f"{sets.dtype} {tuple(sets.shape)}" if isinstance(sets, torch.Tensor) else type(sets).__name__
        raise ValueError(f"sets must be a non-empty bool tensor (N, C); got {found}")
    labels = check_labels(labels, num_points=sets.shape[0], num_classes=sets.shape[1], device=sets.device)
    covered = sets.gather(1, labels.unsqueeze(1)).squeeze(1)
    sizes = sets.sum(dim=1)
    by_size = {}
    for size in torch.unique(sizes).tolist():
        chosen = sizes == size
        by_size[int(size)] = (int(chosen.sum()), float(covered[chosen].double().mean()))
    return PredictionSetMetrics(
        coverage=float(covered.double().mean()),
        mean_size=float(sizes.double().mean()),
        empty_share=float((sizes == 0).double().mean()),
        by_size=by_size,
    )


__all__ = [
    "ClassifierPredictive",
    "ConformalClassifier",
    "ConformalMethod",
    "PredictionSetMetrics",
    "ScoreSource",
    "calibrate_classifier",
    "check_alpha",
    "class_scores",
    "conformal_quantile",
    "min_calibration_size",
    "prediction_set_metrics",
]
