"""Selective prediction in ``pyro-bnn evaluate``: the risk-coverage curves of a classifier's test predictive and
its accuracy at fixed shares of referred inputs, as a record in ``evaluation.json`` and a figure in the run folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyro_bnn.evaluation import ReferralScore, referral_curve, risk_coverage_curve
from pyro_bnn.plots import plot_risk_coverage
from pyro_bnn.predict import Prediction

REFERRAL_RATES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
"""Shares of the most uncertain test inputs referred, at which the record gives the accuracy of the rest."""


def selective_record(prediction: Prediction, figure: Path | None = None, title: str | None = None) -> dict[str, Any]:
    """AURC and accuracy at :data:`REFERRAL_RATES` for each uncertainty score (1 - max probability, total entropy,
    mutual information) of a classifier's prediction with targets.

    Args:
        prediction: ``probs (S, N, C)`` and ``targets (N,)``.
        figure: Where to write the risk-coverage figure (one line per score), or None.
        title: The figure's title.

    Returns:
        ``{"aurc": {score: value}, "accuracy_at_referral": {score: {rate: accuracy}}}``.
    """
    probs, labels = prediction.probs.detach().cpu(), prediction.targets.cpu()
    curves = [risk_coverage_curve(probs, labels, score=score) for score in ReferralScore]
    record: dict[str, Any] = {"aurc": {c.score.value: c.aurc for c in curves}, "accuracy_at_referral": {}}
    for score in ReferralScore:
        referral = referral_curve(probs, labels, REFERRAL_RATES, score=score)
        record["accuracy_at_referral"][score.value] = {
            f"{rate:g}": accuracy for rate, accuracy in zip(referral.fractions, referral.accuracy, strict=True)
        }
    if figure is not None:
        plot_risk_coverage(curves, title=title).savefig(figure, dpi=110)
    return record


__all__ = ["REFERRAL_RATES", "selective_record"]
