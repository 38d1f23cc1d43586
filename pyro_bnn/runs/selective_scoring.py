"""Selective prediction in ``pyro-bnn evaluate``: the risk-coverage curves of a classifier's test predictive and
its accuracy at fixed shares of referred inputs, as a record in ``evaluation.json`` and a figure in the run folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyro_bnn.evaluation import ReferralScore, risk_coverage_curve
from pyro_bnn.evaluation.referral import referred_count
from pyro_bnn.predict import Prediction

REFERRAL_RATES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
"""Shares of the most uncertain test inputs referred, at which the record gives the accuracy of the rest."""


def selective_record(prediction: Prediction, figure: Path | None = None, title: str | None = None) -> dict[str, Any]:
    """AURC and accuracy at :data:`REFERRAL_RATES` for each uncertainty score (1 - max probability, total entropy,
    and mutual information when there are several samples) of a classifier's prediction with targets.

    The accuracies are read off the risk-coverage curve, which averages over the order of inputs with tied scores
    (a point estimate's saturated probabilities tie often), so they never depend on the order of the test set.

    Args:
        prediction: ``probs (S, N, C)`` and ``targets (N,)``.
        figure: Where to write the risk-coverage figure (one line per score), or None.
        title: The figure's title.

    Returns:
        ``{"aurc": {score: value}, "accuracy_at_referral": {score: {rate: accuracy}}}``.
    """
    probs, labels = prediction.probs.detach().cpu(), prediction.targets.cpu()
    # One sample has no epistemic part: its mutual information is 0 for every input, an order of nothing.
    scores = [s for s in ReferralScore if probs.shape[0] > 1 or s is not ReferralScore.MUTUAL_INFORMATION]
    curves = [risk_coverage_curve(probs, labels, score=score) for score in scores]
    count = len(labels)
    record: dict[str, Any] = {"aurc": {c.score.value: c.aurc for c in curves}, "accuracy_at_referral": {}}
    for curve in curves:
        kept = {rate: count - referred_count(rate, count) for rate in REFERRAL_RATES}  # as referral_curve keeps them
        record["accuracy_at_referral"][curve.score.value] = {
            f"{rate:g}": 1.0 - curve.risk[k - 1] for rate, k in kept.items() if k > 0
        }
    if figure is not None:
        from pyro_bnn.plots import plot_risk_coverage  # matplotlib: imported when drawn

        plot_risk_coverage(curves, title=title).savefig(figure, dpi=110)
    return record


__all__ = ["REFERRAL_RATES", "selective_record"]
