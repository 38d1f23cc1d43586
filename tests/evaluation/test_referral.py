"""Referral curves on hand-made predictions whose uncertainty order is known."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from pyro_bnn.evaluation import ReferralScore, referral_curve
from pyro_bnn.evaluation.referral import referred_count


def _confident(label: int, p: float, classes: int = 3) -> torch.Tensor:
    """A distribution with mass ``p`` on ``label`` and the rest spread evenly."""
    row = torch.full((classes,), (1 - p) / (classes - 1), dtype=torch.float64)
    row[label] = p
    return row


def test_referring_the_uncertain_mistakes_first_raises_accuracy_step_by_step():
    # ten inputs; the four least confident are exactly the four mistakes
    confidence = [0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.40, 0.39, 0.38, 0.37]
    labels = torch.zeros(10, dtype=torch.long)
    predicted = [0, 0, 0, 0, 0, 0, 1, 1, 2, 2]
    probs = torch.stack([_confident(c, p) for c, p in zip(predicted, confidence, strict=True)])
    curve = referral_curve(probs, labels, [0.0, 0.1, 0.2, 0.4, 0.5], score="entropy")
    assert curve.retained == (10, 9, 8, 6, 5)
    assert curve.accuracy == pytest.approx((0.6, 6 / 9, 6 / 8, 1.0, 1.0))
    assert curve.to_dict()["score"] == "entropy"


def test_mutual_information_orders_by_disagreement_not_by_entropy():
    # input 0: every sample is flat (high entropy, no disagreement) and right by a hair;
    # input 1: the samples disagree (moderate entropy, high mutual information) and the mean is wrong;
    # input 2: confident and right
    flat = torch.tensor([0.34, 0.33, 0.33], dtype=torch.float64)
    samples = torch.stack(
        [
            torch.stack([flat, torch.tensor([0.05, 0.9, 0.05], dtype=torch.float64), _confident(2, 0.98)]),
            torch.stack([flat, torch.tensor([0.45, 0.1, 0.45], dtype=torch.float64), _confident(2, 0.98)]),
        ]
    )  # (S=2, N=3, C=3)
    labels = torch.tensor([0, 0, 2])
    by_entropy = referral_curve(samples, labels, [0.0, 0.34], score="entropy")
    by_mi = referral_curve(samples, labels, [0.0, 0.34], score=ReferralScore.MUTUAL_INFORMATION)
    assert by_entropy.accuracy == pytest.approx((2 / 3, 0.5))  # refers the flat input, which was right
    assert by_mi.accuracy == pytest.approx((2 / 3, 1.0))  # refers the disputed input, which was wrong


def test_inputs_whose_probabilities_are_permutations_tie_and_keep_their_input_order():
    # the same entropy, but 1.2798541784 and 1.2798542976 in float32 summed in class order, which referred the
    # second input (wrong) first; tied, the stable sort refers the first (right) and keeps the wrong one
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]])
    assert referral_curve(probs, torch.tensor([0, 0]), [0.5]).accuracy == (0.0,)


def test_a_fraction_refers_floor_f_n_inputs_without_binary_rounding():
    # 0.29 * 100 is 28.999999999999996 in floats and 0.57 * 100 56.99999999999999: their floors kept 72 and 44
    curve = referral_curve(torch.full((100, 2), 0.5), torch.zeros(100, dtype=torch.long), [0.29, 0.57, 0.58])
    assert curve.retained == (71, 43, 42)
    # every k / N of N up to 120 refers k (a plain floor gets 231 of these 7260 one short), and the float half
    # way to the next refers k too
    for n in range(1, 121):
        for k in range(n):
            assert referred_count(k / n, n) == k, (k, n)
            assert referred_count((k + 0.5) / n, n) == k, (k, n)


@pytest.mark.parametrize(
    ("fractions", "score", "message"),
    [
        ([1.0], "entropy", "in [0, 1), got 1.0"),
        ([-0.1], "entropy", "got -0.1"),
        ([], "entropy", "at least one value"),
        ([0.1], "variance", "unknown referral score 'variance'"),
    ],
)
def test_bad_arguments_fail_in_one_line(fractions, score, message):
    probs = torch.full((4, 2), 0.5)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        referral_curve(probs, torch.zeros(4, dtype=torch.long), fractions, score=score)


@pytest.mark.parametrize(
    "fractions",
    [0.1, "0.1", None, np.array(0.1), torch.tensor(0.1)],
    ids=["float", "str", "none", "0d-array", "0d-tensor"],
)
def test_one_fraction_not_in_a_sequence_is_a_one_line_error(fractions):
    # a bare 0.1 was "TypeError: 'float' object is not iterable"; "0.1" was read as the fractions "0", ".", "1";
    # a 0-d array or tensor: "iteration over a 0-d array"
    probs = torch.full((4, 2), 0.5)
    message = f"fractions must be a sequence of numbers in [0, 1), e.g. [0.1], got {fractions!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        referral_curve(probs, torch.zeros(4, dtype=torch.long), fractions)
