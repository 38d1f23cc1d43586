"""The risk-coverage curve and AURC against hand-computed curves, with a tie."""

from __future__ import annotations

import itertools

import pytest
import torch

from pyro_bnn.evaluation import ReferralScore, aurc_by_score, referral_curve, risk_coverage_curve


def _two_class(confidence: list[float], correct: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicts class 0 with each confidence; the label is 0 where ``correct``, else 1."""
    c = torch.tensor(confidence, dtype=torch.float64)
    probs = torch.stack([c, 1 - c], dim=-1)
    return probs, torch.tensor([0 if right else 1 for right in correct])


def test_aurc_by_hand_with_a_tie():
    # least uncertain first: 0.9 (right), a tie of 0.8 (one right, one wrong), 0.7 (right), 0.6 (wrong). Within
    # the tie each place carries half an error, so the risks are 0, 0.5/2, 1/3, 1/4, 2/5.
    probs, labels = _two_class([0.9, 0.8, 0.8, 0.7, 0.6], [1, 0, 1, 1, 0])
    curve = risk_coverage_curve(probs, labels, score="max_probability")
    assert curve.coverage == pytest.approx((0.2, 0.4, 0.6, 0.8, 1.0))
    assert curve.risk == pytest.approx((0.0, 0.25, 1 / 3, 0.25, 0.4))
    assert curve.aurc == pytest.approx((0 + 0.25 + 1 / 3 + 0.25 + 0.4) / 5)
    # the order of the tied inputs does not matter (a stable sort alone would give risk 1/2 at k = 2 here)
    swapped = risk_coverage_curve(probs[[0, 2, 1, 3, 4]], labels[[0, 2, 1, 3, 4]])
    assert swapped.risk == pytest.approx(curve.risk)
    assert curve.to_dict()["score"] == "max_probability"


def test_a_perfect_ordering_reaches_the_smallest_aurc_and_entropy_agrees_on_two_classes():
    probs, labels = _two_class([0.99, 0.95, 0.9, 0.7, 0.6, 0.55], [1, 1, 1, 1, 0, 0])
    right = 4
    best = sum(max(0, k - right) / k for k in range(1, 7)) / 6  # errors only after every right answer
    for score in ReferralScore:
        if score is ReferralScore.MUTUAL_INFORMATION:
            continue  # one distribution per input: no disagreement to order by
        assert risk_coverage_curve(probs, labels, score=score).aurc == pytest.approx(best)
    # reversed confidence puts both mistakes first
    worst = risk_coverage_curve(probs, 1 - labels).aurc
    assert worst == pytest.approx(sum(min(k, 4) / k for k in range(1, 7)) / 6)


def test_mutual_information_ties_everything_for_a_mean_prediction_and_gives_the_error_rate():
    probs, labels = _two_class([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0])
    curve = risk_coverage_curve(probs, labels, score="mutual_information")
    assert curve.risk == pytest.approx((0.5,) * 4)  # all tied at 0: every place carries the overall error rate


def test_the_curve_agrees_with_the_referral_curve_at_its_fractions():
    generator = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(5, 40, 4, generator=generator), dim=-1)
    labels = torch.randint(0, 4, (40,), generator=generator)
    for score in ReferralScore:
        curve = risk_coverage_curve(probs, labels, score=score)
        referral = referral_curve(probs, labels, (0.0, 0.25, 0.5), score=score)
        for kept, accuracy in zip(referral.retained, referral.accuracy, strict=True):
            assert 1 - curve.risk[kept - 1] == pytest.approx(accuracy)
    assert set(aurc_by_score(probs, labels)) == {s.value for s in ReferralScore}


def test_inputs_whose_probabilities_are_permutations_tie_exactly():
    # H[0.1, 0.2, 0.3, 0.4] summed in class order is 1.2798542976 in float32, and 1.2798541784 reversed: that
    # ulp ordered the right input (label 3) first, risk (0, 0.5) after it had been (1, 0.5) the other way round
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    curve = risk_coverage_curve(probs, torch.tensor([3, 3]), score="entropy")
    assert curve.risk == (0.5, 0.5) and curve.aurc == 0.5
    # every order of the four classes, label 0: right only where 0.4 comes first, 6 of 24, so every place carries
    # an error rate of 0.75 (was AURC 0.6654); mutual information of two samples permuted alike likewise (0.7946)
    orders = torch.tensor(list(itertools.permutations(range(4))))
    rows = torch.tensor([0.1, 0.2, 0.3, 0.4])[orders]  # (24, 4)
    labels = torch.zeros(24, dtype=torch.long)
    assert risk_coverage_curve(rows, labels, score="entropy").aurc == 0.75
    second = torch.tensor([0.05, 0.15, 0.3, 0.5])[orders]
    for score in ReferralScore:
        assert risk_coverage_curve(torch.stack([rows, second]), labels, score=score).aurc == 0.75


def test_an_unknown_score_is_one_line():
    probs, labels = _two_class([0.9, 0.8], [1, 0])
    with pytest.raises(ValueError, match="unknown selective score 'variance'"):
        risk_coverage_curve(probs, labels, score="variance")
