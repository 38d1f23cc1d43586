"""OOD scores and detection metrics: hand-computed cases, a pairwise oracle for ties, and scikit-learn."""

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from pyro_bnn.evaluation import DETECTION_KEYS, OodScore, ood_detection, ood_metrics, ood_scores


def _pairwise_auroc(inside: np.ndarray, outside: np.ndarray) -> float:
    """Mann-Whitney: the chance that an OOD score beats an in-distribution one, a tie counting one half."""
    greater = (outside[:, None] > inside[None, :]).mean()
    tied = (outside[:, None] == inside[None, :]).mean()
    return float(greater + tied / 2)


def _brute_force_fpr95(inside: np.ndarray, outside: np.ndarray) -> float:
    """The documented rule by counting: the threshold is the ceil(0.95 n_out)-th largest OOD score, and an
    in-distribution score at or above it is a false positive."""
    k = math.ceil(0.95 * len(outside))
    threshold = np.sort(outside)[::-1][k - 1]
    return float((inside >= threshold).mean())


# ------------------------------------------------------------------------------------------------ hand-made cases


def test_perfect_separation():
    result = ood_detection(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.7, 0.8, 0.9, 1.0]))
    assert tuple(result) == DETECTION_KEYS
    assert result == {"auroc": 1.0, "aupr_in": 1.0, "aupr_out": 1.0, "fpr_at_95_tpr": 0.0}


def test_reversed_scores():
    result = ood_detection([0.7, 0.8, 0.9], [0.1, 0.2])
    assert result["auroc"] == 0.0
    assert result["fpr_at_95_tpr"] == 1.0  # detecting 95 % of OOD needs the lowest threshold: everything passes
    # every OOD input ranks last: precision at its recall steps is 1/4 and 2/5
    assert result["aupr_out"] == pytest.approx((1 / 4 + 2 / 5) / 2)


def test_identical_scores():
    result = ood_detection(torch.full((6,), 0.3), torch.full((4,), 0.3))
    assert result["auroc"] == 0.5
    # one threshold holding everyone: precision is the prevalence of each side
    assert result["aupr_out"] == pytest.approx(4 / 10)
    assert result["aupr_in"] == pytest.approx(6 / 10)
    assert result["fpr_at_95_tpr"] == 1.0


def test_fpr95_on_a_known_ranking_counts_ties_at_the_threshold():
    # 20 OOD scores 1..20: detecting 95 % (19 of 20) needs the threshold 2. In-distribution scores at or above 2:
    # the two tied at 2 and the 3, so 3 of 5.
    inside, outside = [0.0, 1.0, 2.0, 2.0, 3.0], list(range(1, 21))
    assert ood_detection(inside, outside)["fpr_at_95_tpr"] == pytest.approx(3 / 5)
    # 10 OOD scores: 95 % of 10 is 9.5, so all ten must be detected and the threshold is the smallest, 1;
    # in-distribution scores 1 and 2 are at or above it.
    assert ood_detection([0.0, 0.5, 1.0, 2.0], list(range(1, 11)))["fpr_at_95_tpr"] == pytest.approx(2 / 4)


def test_auroc_counts_a_tie_as_one_half():
    # pairs (out, in): 2>1, 2=2, 3>1, 3>2 -> (3 + 1/2) / 4
    assert ood_detection([1, 2], [2, 3])["auroc"] == pytest.approx(3.5 / 4)


def test_one_score_per_side_is_enough():
    assert ood_detection([0.0], [1.0]) == {"auroc": 1.0, "aupr_in": 1.0, "aupr_out": 1.0, "fpr_at_95_tpr": 0.0}


# ------------------------------------------------------------------------------------------------ random cases


@pytest.mark.parametrize("seed", range(6))
def test_random_integer_scores_with_ties_agree_with_sklearn_and_the_oracles(seed, device):
    rng = np.random.default_rng(seed)
    n_in, n_out = rng.integers(5, 60, size=2)
    inside = rng.integers(0, 6, size=n_in).astype(np.float64)  # few values: many ties, within and across sides
    outside = rng.integers(1, 8, size=n_out).astype(np.float64)
    result = ood_detection(torch.tensor(inside, device=device), torch.tensor(outside, device=device))

    labels = np.r_[np.zeros(n_in), np.ones(n_out)]
    scores = np.r_[inside, outside]
    assert result["auroc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert result["auroc"] == pytest.approx(_pairwise_auroc(inside, outside), abs=1e-12)
    assert result["aupr_out"] == pytest.approx(average_precision_score(labels, scores), abs=1e-12)
    assert result["aupr_in"] == pytest.approx(average_precision_score(1 - labels, -scores), abs=1e-12)
    assert result["fpr_at_95_tpr"] == pytest.approx(_brute_force_fpr95(inside, outside), abs=1e-12)
    assert all(0.0 <= value <= 1.0 for value in result.values())


@pytest.mark.parametrize("seed", range(3))
def test_random_continuous_scores_agree_with_the_oracles(seed):
    generator = torch.Generator().manual_seed(seed)
    inside = torch.randn(200, generator=generator, dtype=torch.float64)
    outside = torch.randn(137, generator=generator, dtype=torch.float64) + 1.0
    result = ood_detection(inside, outside)
    assert result["auroc"] == pytest.approx(_pairwise_auroc(inside.numpy(), outside.numpy()), abs=1e-12)
    assert result["fpr_at_95_tpr"] == pytest.approx(_brute_force_fpr95(inside.numpy(), outside.numpy()), abs=1e-12)
    assert 0.5 < result["auroc"] < 1.0


def test_swapping_the_sides_and_negating_the_scores_swaps_the_aupr():
    rng = np.random.default_rng(3)
    inside, outside = rng.integers(0, 4, 30), rng.integers(1, 6, 25)
    forward = ood_detection(inside, outside)
    swapped = ood_detection(-outside, -inside)
    assert swapped["auroc"] == pytest.approx(forward["auroc"])
    assert swapped["aupr_in"] == pytest.approx(forward["aupr_out"])
    assert swapped["aupr_out"] == pytest.approx(forward["aupr_in"])


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "inside, outside, message",
    [
        (torch.tensor([]), torch.tensor([1.0]), r"in_scores must hold at least one score; got shape \(0,\)"),
        (torch.tensor([1.0]), torch.zeros(0), r"out_scores must hold at least one score"),
        (torch.tensor([1.0, float("nan")]), torch.tensor([1.0]), "in_scores must be finite; found nan at index 1"),
        (
            torch.tensor([1.0]),
            torch.tensor([0.0, 0.0, float("inf")]),
            "out_scores must be finite; found inf at index 2",
        ),
        (torch.ones(2, 3), torch.tensor([1.0]), r"in_scores must have rank 1 \(N,\); got shape \(2, 3\) \(rank 2\)"),
        (torch.tensor([1.0]), torch.tensor(1.0), r"out_scores must have rank 1 \(N,\); got shape \(\) \(rank 0\)"),
        (torch.tensor([True]), torch.tensor([1.0]), "in_scores must hold real scores; got dtype torch.bool"),
        ("abc", torch.tensor([1.0]), "in_scores must"),
    ],
)
def test_bad_scores_are_one_line_naming_the_value(inside, outside, message):
    with pytest.raises(ValueError, match=message) as caught:
        ood_detection(inside, outside)
    assert len(str(caught.value).splitlines()) == 1


# ------------------------------------------------------------------------------------------------ scores


def test_uniform_probs_have_entropy_log_c_and_the_lowest_confidence(device):
    probs = torch.full((3, 5, 4), 0.25, device=device)
    scores = ood_scores(probs)
    assert list(scores) == [score.value for score in OodScore]
    for name, value in scores.items():
        assert value.shape == (5,) and value.device == probs.device, name
    torch.testing.assert_close(scores["entropy"].cpu(), torch.full((5,), math.log(4)))
    torch.testing.assert_close(scores["mutual_information"].cpu(), torch.zeros(5), atol=1e-6, rtol=0)
    torch.testing.assert_close(scores["max_probability"].cpu(), torch.full((5,), 0.75))


def test_identical_samples_carry_no_mutual_information():
    row = torch.softmax(torch.randn(6, 3, generator=torch.Generator().manual_seed(1)), dim=-1)
    scores = ood_scores(row.expand(8, 6, 3).clone())
    torch.testing.assert_close(scores["mutual_information"], torch.zeros(6), atol=1e-6, rtol=0)
    averaged = ood_scores(row)  # (N, C): no samples, so no disagreement either
    assert torch.equal(averaged["mutual_information"], torch.zeros(6))
    torch.testing.assert_close(scores["entropy"], averaged["entropy"])


def test_hand_case_of_two_disagreeing_samples():
    # samples [1, 0] and [0, 1]: mean [0.5, 0.5]; entropy log 2, each sample certain, so MI log 2; 1 - max 0.5.
    # samples [0.9, 0.1] twice: entropy H(0.9) with no disagreement; 1 - max 0.1.
    probs = torch.tensor([[[1.0, 0.0], [0.9, 0.1]], [[0.0, 1.0], [0.9, 0.1]]], dtype=torch.float64)
    scores = ood_scores(probs)
    h09 = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    torch.testing.assert_close(scores["entropy"], torch.tensor([math.log(2), h09], dtype=torch.float64))
    torch.testing.assert_close(scores["mutual_information"], torch.tensor([math.log(2), 0.0], dtype=torch.float64))
    torch.testing.assert_close(scores["max_probability"], torch.tensor([0.5, 0.1], dtype=torch.float64))


def test_half_precision_probs_give_float32_scores():
    scores = ood_scores(torch.full((2, 3, 2), 0.5, dtype=torch.float16))
    assert all(value.dtype == torch.float32 for value in scores.values())


# ------------------------------------------------------------------------------------------------ ood_metrics


def test_confident_in_distribution_against_uniform_ood_is_perfectly_detected():
    inside = torch.tensor([[0.97, 0.01, 0.02], [0.02, 0.96, 0.02], [0.01, 0.01, 0.98]]).expand(4, 3, 3)
    outside = torch.full((4, 2, 3), 1 / 3)
    outside[0, :, :] = torch.tensor([0.5, 0.25, 0.25])  # disagreeing samples: mutual information > 0
    metrics = ood_metrics(inside, outside)
    assert list(metrics) == [score.value for score in OodScore]
    for name in ("entropy", "mutual_information", "max_probability"):
        assert metrics[name]["auroc"] == 1.0 and metrics[name]["fpr_at_95_tpr"] == 0.0, name
        assert set(metrics[name]) == {*DETECTION_KEYS, "mean_in", "mean_out"}
        assert metrics[name]["mean_out"] > metrics[name]["mean_in"], name
    assert metrics["max_probability"]["mean_in"] == pytest.approx(1 - (0.97 + 0.96 + 0.98) / 3, abs=1e-6)


def test_ood_metrics_agree_with_ood_detection_on_the_scores():
    generator = torch.Generator().manual_seed(4)
    inside = torch.softmax(3 * torch.randn(5, 40, 4, generator=generator), dim=-1)
    outside = torch.softmax(torch.randn(7, 30, 4, generator=generator), dim=-1)  # other S: allowed
    metrics = ood_metrics(inside, outside)
    for name, score_in in ood_scores(inside).items():
        score_out = ood_scores(outside)[name]
        assert metrics[name] == {
            **ood_detection(score_in, score_out),
            "mean_in": pytest.approx(float(score_in.mean())),
            "mean_out": pytest.approx(float(score_out.mean())),
        }


@pytest.mark.parametrize(
    "inside, outside, message",
    [
        (
            torch.full((3, 2), 0.5),
            torch.full((3, 4), 0.25),
            r"same number of classes C; got shapes \(3, 2\) and \(3, 4\)",
        ),
        (torch.full((3, 2), 0.6), torch.full((3, 2), 0.5), "in_probs: probs must sum to 1"),
        (torch.full((3, 2), 0.5), torch.full((2, 1, 3, 2), 0.5), "out_probs: probs must have rank 2"),
        (torch.full((3, 2), 0.5), torch.full((0, 2), 0.5), "out_probs: probs must have at least one"),
    ],
)
def test_ood_metrics_names_the_bad_side(inside, outside, message):
    with pytest.raises(ValueError, match=message):
        ood_metrics(inside, outside)
