"""Selective prediction: the risk-coverage curve of a classifier that abstains on its most uncertain inputs.

Order the inputs by an uncertainty score (:class:`~pyro_bnn.evaluation.ReferralScore`: one minus the largest mean
probability, total entropy or mutual information), least uncertain first. Keeping the first ``k`` of ``N`` gives
coverage ``k / N`` and risk the error rate of the posterior-mean prediction on them. The area under that curve,
``AURC = (1/N) sum_k risk_k`` (Geifman et al., 2019), is small when the mistakes come last; a score that knows
nothing gives about the overall error rate, a perfect one ``(1/N) sum_k max(0, k - N_right) / k``.

Inputs with the same score have no order among them: the curve is its expectation over a uniformly random order
within each tie, so it never depends on the order the inputs came in. Entropies are summed over each row's
probabilities sorted (:func:`~pyro_bnn.evaluation.referral.ranking_uncertainty`), so inputs whose probabilities
are a permutation of one another tie exactly rather than by float rounding. Accuracy at a fixed share of inputs referred
is :func:`~pyro_bnn.evaluation.referral_curve`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyro_bnn.evaluation._validation import check_labels, check_probs
from pyro_bnn.evaluation.referral import ReferralScore, ranking_uncertainty


@dataclass(frozen=True)
class RiskCoverageCurve:
    """Risk of the kept inputs at every coverage.

    Attributes:
        score: What ordered the inputs.
        coverage: ``(N,)`` kept shares ``k / N``, ``k = 1..N``.
        risk: ``(N,)`` error rate of the posterior-mean prediction on the ``k`` least uncertain inputs (expected
            over the order within ties).
        aurc: Area under the curve, the mean of ``risk``.
    """

    score: ReferralScore
    coverage: tuple[float, ...]
    risk: tuple[float, ...]
    aurc: float

    def to_dict(self) -> dict[str, object]:
        """Plain JSON values."""
        return {"score": self.score.value, "coverage": list(self.coverage), "risk": list(self.risk), "aurc": self.aurc}


def _check_score(score: ReferralScore | str) -> ReferralScore:
    try:
        return ReferralScore(score)
    except ValueError:
        known = ", ".join(repr(s.value) for s in ReferralScore)
        raise ValueError(f"unknown selective score {score!r}; expected one of {known}") from None


def risk_coverage_curve(
    probs: torch.Tensor, labels: torch.Tensor, *, score: ReferralScore | str = ReferralScore.MAX_PROBABILITY
) -> RiskCoverageCurve:
    """The risk-coverage curve and its area for one uncertainty score.

    Args:
        probs: ``(S, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)``.
        labels: ``(N,)`` integer class labels.
        score: ``"max_probability"``, ``"entropy"`` or ``"mutual_information"`` (:class:`ReferralScore`).

    Returns:
        The curve, with ``N`` points.

    Raises:
        ValueError: invalid ``probs`` or ``labels`` (see :mod:`pyro_bnn.evaluation`), or an unknown score.
    """
    score = _check_score(score)
    probs = check_probs(probs)
    samples = probs if probs.dim() == 3 else probs.unsqueeze(0)
    labels = check_labels(labels, num_points=samples.shape[1], num_classes=samples.shape[2], device=samples.device)
    uncertainty = ranking_uncertainty(samples, score).double()
    wrong = (samples.mean(0).argmax(-1) != labels).double()
    ordered, order = torch.sort(uncertainty, stable=True)
    wrong = wrong[order]
    # Each tie group's errors are spread evenly over its places: the expected error at each place under a random
    # order within the group, which makes the cumulative sum the expected number of errors among the first k.
    _, group, counts = torch.unique_consecutive(ordered, return_inverse=True, return_counts=True)
    group_errors = torch.zeros(counts.numel(), dtype=torch.float64, device=wrong.device).index_add_(0, group, wrong)
    wrong = (group_errors / counts)[group]
    kept = torch.arange(1, wrong.numel() + 1, dtype=torch.float64, device=wrong.device)
    risk = wrong.cumsum(0) / kept
    n = wrong.numel()
    coverage = tuple((kept / n).tolist())
    return RiskCoverageCurve(score, coverage, tuple(risk.tolist()), float(risk.mean()))


def aurc_by_score(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The AURC of each :class:`ReferralScore`, keyed by its value.

    Args:
        probs: ``(S, N, C)`` or ``(N, C)`` class probabilities.
        labels: ``(N,)`` integer class labels.

    Returns:
        ``{"entropy": ..., "mutual_information": ..., "max_probability": ...}``.

    Raises:
        ValueError: invalid ``probs`` or ``labels``.
    """
    return {score.value: risk_coverage_curve(probs, labels, score=score).aurc for score in ReferralScore}


__all__ = ["RiskCoverageCurve", "aurc_by_score", "risk_coverage_curve"]
