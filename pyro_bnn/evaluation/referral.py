"""Referral curves: accuracy on the inputs a classifier keeps when it refers its most uncertain ones to a human.

Sort the inputs by an uncertainty score (total predictive entropy, mutual information or one minus the largest mean
probability), set aside the most uncertain fraction ``f`` and score the rest. A predictive whose uncertainty means
something has a rising curve: the inputs it refers are the ones it would have got wrong. The risk-coverage curve
over every fraction, and its area, are :mod:`pyro_bnn.evaluation.selective`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

import torch

from pyro_bnn.checks import holds_values
from pyro_bnn.evaluation._validation import check_labels, check_probs
from pyro_bnn.evaluation.ood import ood_scores
from pyro_bnn.evaluation.uncertainty import entropy_decomposition

DEFAULT_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
"""Referred fractions of a curve unless told otherwise."""


class ReferralScore(str, Enum):
    """The uncertainty that decides which inputs are referred first."""

    ENTROPY = "entropy"
    """Total predictive entropy ``H[pbar]``."""
    MUTUAL_INFORMATION = "mutual_information"
    """Mutual information between the label and the weights (the epistemic part of the entropy)."""
    MAX_PROBABILITY = "max_probability"
    """``1 - max_c pbar_c``: one minus the confidence of the posterior-mean prediction."""


@dataclass(frozen=True)
class ReferralCurve:
    """Accuracy on the retained inputs at each referred fraction.

    Attributes:
        score: What ordered the inputs.
        fractions: ``(F,)`` referred fractions, as asked.
        retained: ``(F,)`` inputs kept at each fraction, ``N - floor(f N)``.
        accuracy: ``(F,)`` accuracy of the posterior-mean prediction on the kept inputs.
    """

    score: ReferralScore
    fractions: tuple[float, ...]
    retained: tuple[int, ...]
    accuracy: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        """Plain JSON values."""
        return {
            "score": self.score.value,
            "fractions": list(self.fractions),
            "retained": list(self.retained),
            "accuracy": list(self.accuracy),
        }


def ranking_uncertainty(samples: torch.Tensor, score: ReferralScore) -> torch.Tensor:
    """The uncertainty that orders the inputs of a referral or risk-coverage curve, larger for a more uncertain one.

    The :func:`~pyro_bnn.evaluation.ood_scores` of ``samples``, with each entropy summed over the row's
    probabilities sorted: inputs whose probabilities are a permutation of one another then tie exactly, where a
    float32 sum in class order differs by an ulp between them and would order them by rounding.

    Args:
        samples: ``(S, N, C)`` validated class probabilities (``check_probs``).
        score: What to compute.

    Returns:
        ``(N,)`` scores, in the dtype :func:`~pyro_bnn.evaluation.ood_scores` gives.
    """
    if score is ReferralScore.MAX_PROBABILITY:
        return ood_scores(samples)[score.value]  # a max and one subtraction: already the same for any class order
    total = entropy_decomposition(samples.mean(dim=0).sort(dim=-1).values).total  # the mean as ood_scores takes it
    if score is ReferralScore.ENTROPY:
        return total
    aleatoric = entropy_decomposition(samples.sort(dim=-1).values).aleatoric  # entropy ignores each row's order
    return (total - aleatoric).clamp_min(0.0)  # as entropy_decomposition clamps the round-off below 0


def referred_count(fraction: float, num_inputs: int) -> int:
    """``floor(f N)``, the inputs referred at fraction ``f`` of ``N``, without binary rounding's off-by-one.

    In floats ``0.29 * 100`` is ``28.999999999999996``, whose floor refers 28 where ``f N`` is 29. So when ``f``
    is the float nearest to ``k / N`` for an integer ``k`` (0.29 is 29 / 100's, 1 / 3 is 1 / 3's) the count is
    ``k``; any other ``f`` lies strictly between two such points and gets the floor of its exact value times ``N``.
    """
    nearest = round(fraction * num_inputs)
    if num_inputs and nearest / num_inputs == fraction:  # int / int is the correctly rounded quotient
        return nearest
    return math.floor(Fraction(fraction) * num_inputs)  # Fraction(float) is the float's exact binary value


def _check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    if not holds_values(fractions):
        # one fraction alone (0.1, or a 0-d array or tensor) is an easy slip; tuple() would raise a bare
        # "'float' object is not iterable" ("iteration over a 0-d array")
        raise ValueError(f"fractions must be a sequence of numbers in [0, 1), e.g. [0.1], got {fractions!r}")
    values = tuple(fractions)
    if not values:
        raise ValueError("fractions must hold at least one value in [0, 1), got none")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
            raise ValueError(f"every referred fraction must be a number in [0, 1), got {value!r}")
    return tuple(float(v) for v in values)


def referral_curve(
    probs: torch.Tensor,
    labels: torch.Tensor,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    *,
    score: ReferralScore | str = ReferralScore.ENTROPY,
) -> ReferralCurve:
    """Accuracy on the inputs kept after referring the most uncertain fraction of them.

    The inputs are ordered by ``score``, most uncertain first (ties keep their input order, a stable sort; inputs
    whose probabilities are permutations of one another tie exactly, see :func:`ranking_uncertainty`); at
    fraction ``f`` the first ``floor(f N)`` are referred and the posterior-mean prediction ``argmax mean_s p_s`` is
    scored on the rest.

    Args:
        probs: ``(S, N, C)`` posterior samples of class probabilities, or their mean ``(N, C)`` (then
            ``"mutual_information"`` orders nothing: the mutual information of one distribution is 0).
        labels: ``(N,)`` integer class labels.
        fractions: Referred fractions, each in ``[0, 1)``.
        score: ``"entropy"``, ``"mutual_information"`` or ``"max_probability"`` (:class:`ReferralScore`).

    Returns:
        The curve, one accuracy per fraction.

    Raises:
        ValueError: invalid ``probs`` or ``labels`` (see :mod:`pyro_bnn.evaluation`), a fraction outside
            ``[0, 1)`` or fractions that are not a sequence (one number alone), or an unknown score; one line naming
            the value.
    """
    checked = check_probs(probs)
    samples = checked if checked.dim() == 3 else checked.unsqueeze(0)
    labels = check_labels(labels, num_points=samples.shape[1], num_classes=samples.shape[2], device=samples.device)
    try:
        score = ReferralScore(score)
    except ValueError:
        known = ", ".join(repr(s.value) for s in ReferralScore)
        raise ValueError(f"unknown referral score {score!r}; expected one of {known}") from None
    values = _check_fractions(fractions)
    uncertainty = ranking_uncertainty(samples, score)  # larger for a more uncertain input
    order = torch.sort(uncertainty, descending=True, stable=True).indices  # most uncertain first
    correct = (samples.mean(0).argmax(-1) == labels)[order].double()
    n = correct.numel()
    retained, accuracy = [], []
    for fraction in values:
        referred = referred_count(fraction, n)
        kept = correct[referred:]
        retained.append(int(kept.numel()))
        accuracy.append(float(kept.mean()))
    return ReferralCurve(score, values, tuple(retained), tuple(accuracy))


__all__ = ["DEFAULT_FRACTIONS", "ReferralCurve", "ReferralScore", "referral_curve"]
