"""Split conformal classification against its oracles: the finite-sample coverage guarantee over many exchangeable
splits (and a broken quantile that fails it), hand-computed APS / RAPS sets with ties, and the randomised APS set
sizes against a direct enumeration."""

from __future__ import annotations

import math

import pytest
import torch

from pyro_bnn.evaluation import (
    ConformalClassifier,
    ConformalMethod,
    calibrate_classifier,
    class_scores,
    conformal_quantile,
    min_calibration_size,
    prediction_set_metrics,
)
from pyro_bnn.evaluation import conformal as conformal_module
from pyro_bnn.predict import Prediction

# ------------------------------------------------------------------------------------- the finite-sample guarantee

ALPHA = 0.1
N_CAL = 20  # k = ceil(21 * 0.9) = 19, so E[coverage] = 19/21 = 0.9048; without the +1, k = 18: 18/21 = 0.857
N_TEST = 50
TRIALS = 1000
# The coverage of one split, given its calibration scores, is Beta(k, n + 1 - k) distributed (sd 0.062 here) and its
# test part adds binomial noise (sd 0.042 at most): the mean over 1000 splits has sd <= 0.0024. 0.01 is four of
# them; the broken quantile misses 1 - alpha by 0.043, more than four times the tolerance.
TOLERANCE = 0.01
CLASSES = 5


def _split_data(generator: torch.Generator, samples: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """One exchangeable data set: a 3-sample predictive of N_CAL + N_TEST inputs and labels drawn from another,
    sharper distribution, so that the model is miscalibrated (the guarantee must not care)."""
    n = N_CAL + N_TEST
    logits = 2.0 * torch.randn(n, CLASSES, generator=generator, dtype=torch.float64)
    truth = torch.softmax(1.5 * logits, dim=-1)
    labels = torch.multinomial(truth, 1, generator=generator).squeeze(1)
    jitter = 0.7 * torch.randn(samples, n, CLASSES, generator=generator, dtype=torch.float64)
    return torch.softmax(logits + jitter, dim=-1), labels


def _mean_coverage(**options) -> float:
    generator = torch.Generator().manual_seed(2024)
    coverages = []
    for _ in range(TRIALS):
        probs, labels = _split_data(generator)
        calibration = Prediction(probs=probs[:, :N_CAL], targets=labels[:N_CAL])
        classifier = calibrate_classifier(calibration, ALPHA, generator=generator, **options)
        sets = classifier.prediction_sets(Prediction(probs=probs[:, N_CAL:]), generator=generator)
        coverages.append(prediction_set_metrics(sets, labels[N_CAL:]).coverage)
    return sum(coverages) / TRIALS


def _within_guarantee(coverage: float) -> bool:
    return 1 - ALPHA - TOLERANCE <= coverage <= 1 - ALPHA + 1 / (N_CAL + 1) + TOLERANCE


CLASSIFIERS = {
    "thr": {"method": "thr"},
    "aps": {"method": "aps"},
    "aps-deterministic": {"method": "aps", "randomized": False},
    "raps": {"method": "raps", "lam": 0.1, "k_reg": 1},
    "raps-deterministic": {"method": "raps", "lam": 0.1, "k_reg": 2, "randomized": False},
    "aps-samples": {"method": "aps", "source": "samples"},
}


@pytest.mark.parametrize("options", CLASSIFIERS.values(), ids=CLASSIFIERS.keys())
def test_mean_coverage_over_exchangeable_splits_lies_in_the_guaranteed_band(options):
    coverage = _mean_coverage(**options)
    assert _within_guarantee(coverage), coverage
    # Scores without ties give exactly the rank's expectation, 19/21: a quantile one rank too high (20/21 = 0.952)
    # stays inside the band above, not here.
    assert abs(coverage - math.ceil((N_CAL + 1) * (1 - ALPHA)) / (N_CAL + 1)) <= TOLERANCE, coverage


def _broken_quantile(scores: torch.Tensor, alpha: float) -> float:
    """The empirical (1 - alpha) quantile without the n + 1 correction."""
    rank = math.ceil(scores.numel() * (1 - alpha))
    return float(torch.sort(scores.double()).values[rank - 1])


def test_a_quantile_without_the_n_plus_1_correction_fails_the_same_check(monkeypatch):
    monkeypatch.setattr(conformal_module, "conformal_quantile", _broken_quantile)
    coverage = _mean_coverage(method="thr")
    assert not _within_guarantee(coverage), coverage
    assert coverage == pytest.approx(18 / 21, abs=TOLERANCE)  # and it lands where the broken rank says


# ------------------------------------------------------------------------------------------------ the quantile


def test_the_quantile_is_the_ceil_n_plus_1_order_statistic():
    scores = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.0])  # n = 10
    assert conformal_quantile(scores, 0.2) == pytest.approx(0.8)  # ceil(11 * 0.8) = 9: the 9th smallest
    assert conformal_quantile(scores, 0.5) == pytest.approx(0.5)  # ceil(5.5) = 6
    assert conformal_quantile(scores, 0.7) == pytest.approx(0.3)  # 11 * 0.3 = 3.3000000000000003 in floats: 4th
    assert conformal_quantile(torch.arange(9.0), 0.1) == 8.0  # ceil(10 * 0.9) = 9 exactly, despite 1 - 0.1


@pytest.mark.parametrize(("alpha", "smallest"), [(0.1, 9), (0.05, 19), (0.2, 4), (0.5, 1), (0.01, 99), (0.3, 3)])
def test_min_calibration_size_is_the_first_n_with_a_finite_quantile(alpha, smallest):
    assert min_calibration_size(alpha) == smallest
    conformal_quantile(torch.rand(smallest), alpha)
    if smallest > 1:
        with pytest.raises(ValueError, match=f"{smallest - 1} calibration points are too few for alpha={alpha:g}"):
            conformal_quantile(torch.rand(smallest - 1), alpha)


# -------------------------------------------------------------------------------- hand-computed sets with ties

# Dyadic probabilities, so every sum is exact. Row 0: classes 2 and 3 tie at 1/8; row 1: all four tie.
TOY = torch.tensor([[0.25, 0.5, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)


def test_aps_scores_by_hand_with_ties_broken_by_class_index():
    # row 0 ranks classes 1, 0, 2, 3 (2 before 3: the lower index wins the tie); u = 1 sums up to and including
    assert class_scores(TOY, "aps").tolist() == [[0.75, 0.5, 0.875, 1.0], [0.25, 0.5, 0.75, 1.0]]
    # u = 1/2: the mass above plus half the class's own
    half = class_scores(TOY, "aps", u=torch.tensor([0.5, 0.5]))
    assert half.tolist() == [[0.625, 0.25, 0.8125, 0.9375], [0.125, 0.375, 0.625, 0.875]]
    assert class_scores(TOY, "thr").tolist() == [[0.75, 0.5, 0.875, 0.875], [0.75, 0.75, 0.75, 0.75]]


def test_raps_adds_lam_per_rank_beyond_k_reg():
    # lam = 1/4, k_reg = 1: ranks 1, 2, 3, 4 pay 0, 1/4, 1/2, 3/4
    raps = class_scores(TOY, "raps", lam=0.25, k_reg=1)
    assert raps.tolist() == [[1.0, 0.5, 1.375, 1.75], [0.25, 0.75, 1.25, 1.75]]
    assert class_scores(TOY, "raps", lam=0.25, k_reg=0).tolist()[1] == [0.5, 1.0, 1.5, 2.0]


@pytest.mark.parametrize(
    ("method", "quantile", "expected"),
    [
        # APS at q = 7/8: row 0 keeps 1, 0, 2 but not the tied class 3; row 1 keeps the first three by index
        ("aps", 0.875, [[True, True, True, False], [True, True, True, False]]),
        ("aps", 0.5, [[False, True, False, False], [True, True, False, False]]),
        ("aps", 0.4, [[False, False, False, False], [True, False, False, False]]),  # an empty set is allowed
        # RAPS (lam 1/4, k_reg 1) at q = 1: the penalty stops row 0 after two classes, row 1 after two
        ("raps", 1.0, [[True, True, False, False], [True, True, False, False]]),
        # THR keeps tied classes together: q = 7/8 keeps both 1/8 classes of row 0 and all of row 1
        ("thr", 0.875, [[True, True, True, True], [True, True, True, True]]),
        ("thr", 0.7, [[False, True, False, False], [False, False, False, False]]),
    ],
)
def test_hand_computed_sets(method, quantile, expected):
    # the method as its string: the classifier takes the enums' values as well
    classifier = ConformalClassifier(method, 0.1, quantile, 100, randomized=False, lam=0.25, k_reg=1)
    assert classifier.method is ConformalMethod(method)
    assert classifier.prediction_sets(TOY).tolist() == expected


def test_calibration_picks_the_hand_computed_rank():
    # nine calibration copies of row 0, labels cycling over 0..3 and then 1: APS (u = 1) scores 0.75, 0.5, 0.875,
    # 1.0, ... ; alpha = 0.2 takes the ceil(10 * 0.8) = 8th smallest
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 1])
    probs = TOY[:1].expand(9, 4)
    classifier = calibrate_classifier(probs, 0.2, method="aps", labels=labels, randomized=False)
    ordered = sorted([0.75, 0.5, 0.875, 1.0] * 2 + [0.5])
    assert classifier.quantile == ordered[7] == 1.0
    assert classifier.num_calibration == 9
    assert classifier.num_classes == 4


@pytest.mark.parametrize("source", ["mean", "samples"])
def test_test_probabilities_of_another_class_count_are_refused(source):
    # calibrated on 4 classes: (5, 7) probabilities gave (5, 7) sets, and (2, 5, 3) ones (2, 5, 3)-scored sets
    probs = torch.softmax(torch.randn(2, 20, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
    classifier = calibrate_classifier(probs, 0.1, labels=torch.arange(20) % 4, source=source)
    assert classifier.prediction_sets(probs[:, :5]).shape == (5, 4)
    for other in (torch.full((5, 7), 1 / 7), torch.full((2, 5, 3), 1 / 3)):
        classes = other.shape[-1]
        message = f"^the probabilities have {classes} classes; this classifier was calibrated on 4$"
        with pytest.raises(ValueError, match=message):
            classifier.prediction_sets(other)
    # one made by hand records no class count and takes any (its threshold is the caller's to mean)
    assert ConformalClassifier("thr", 0.1, 0.5, 100).prediction_sets(torch.full((5, 7), 1 / 7)).shape == (5, 7)
    with pytest.raises(ValueError, match="^num_classes must be an int >= 1, got 0$"):
        ConformalClassifier("thr", 0.1, 0.5, 100, num_classes=0)


# --------------------------------------------------------------------------- randomised APS against enumeration


def _naive_aps_set_size(probs: list[float], u: float, q: float) -> int:
    """The APS set of one input, straight from the definition: rank by probability (ties by index), keep every
    class whose mass above plus u times its own is at most q."""
    ranked = sorted(range(len(probs)), key=lambda c: (-probs[c], c))
    size, above = 0, 0.0
    for c in ranked:
        if above + u * probs[c] <= q:
            size += 1
        above += probs[c]
    return size


def test_randomised_aps_set_sizes_match_a_direct_enumeration():
    row = [0.5, 0.3, 0.15, 0.05]
    q = 0.6
    # Enumerate u over a fine grid of midpoints: the share of u giving each size, exact to 1/grid.
    grid = 20_000
    enumerated = torch.zeros(len(row) + 1, dtype=torch.float64)
    for i in range(grid):
        enumerated[_naive_aps_set_size(row, (i + 0.5) / grid, q)] += 1 / grid
    # by hand: size >= 1 iff u <= 1.2 (always), >= 2 iff 0.5 + 0.3u <= 0.6, u <= 1/3; >= 3 never
    assert enumerated.tolist() == pytest.approx([0.0, 2 / 3, 1 / 3, 0.0, 0.0], abs=1e-4)
    # The implementation, 40,000 inputs with the same probabilities and their own u each
    copies = 40_000
    classifier = ConformalClassifier(ConformalMethod.APS, 0.1, q, 100, randomized=True)
    probs = torch.tensor(row, dtype=torch.float64).expand(copies, -1)
    sizes = classifier.prediction_sets(probs, generator=torch.Generator().manual_seed(7)).sum(dim=1)
    observed = torch.bincount(sizes, minlength=len(row) + 1).double() / copies
    # Each share is a binomial proportion with sd <= 0.0025 at n = 40,000; 0.01 is four of them.
    assert observed.tolist() == pytest.approx(enumerated.tolist(), abs=0.01)


# ----------------------------------------------------------------------------------- metrics and per-sample scores


def test_set_metrics_by_hand():
    sets = torch.tensor([[True, True, False], [False, False, False], [True, False, False], [True, True, True]])
    labels = torch.tensor([1, 0, 2, 2])
    metrics = prediction_set_metrics(sets, labels)
    assert metrics.coverage == 0.5  # rows 0 and 3 hold their label
    assert metrics.mean_size == 1.5
    assert metrics.empty_share == 0.25
    assert metrics.by_size == {0: (1, 0.0), 1: (1, 0.0), 2: (1, 1.0), 3: (1, 1.0)}
    assert metrics.to_dict()["coverage_by_size"]["2"] == {"count": 1, "coverage": 1.0}


def test_sample_scores_equal_mean_scores_for_thr_and_differ_for_aps_where_samples_disagree():
    # two samples that rank the classes in opposite orders; their mean (0.4, 0.2, 0.4) ties classes 0 and 2
    samples = torch.tensor([[[0.7, 0.2, 0.1]], [[0.1, 0.2, 0.7]]], dtype=torch.float64)
    mean = samples.mean(0)
    assert class_scores(samples, "thr").mean(0)[0].tolist() == pytest.approx(class_scores(mean, "thr")[0].tolist())
    # APS of sample 0 for class 0: 0.7, of sample 1: 0.1 + 0.2 + 0.7 = 1.0; mean 0.85. Under the mean class 0 ranks
    # first (0.4), class 2 second (0.8) and class 1 last (1.0): confident scores where the samples disagree
    per_sample = class_scores(samples, "aps").mean(0)
    assert per_sample[0].tolist() == pytest.approx([0.85, 0.9, 0.85])
    assert class_scores(mean, "aps")[0].tolist() == pytest.approx([0.4, 1.0, 0.8])


# ------------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p, y: calibrate_classifier(p, 0.0, labels=y), r"alpha must be a number in \(0, 1\), got 0.0"),
        (lambda p, y: calibrate_classifier(p, 1.5, labels=y), "got 1.5"),
        (lambda p, y: calibrate_classifier(p, True, labels=y), "got True"),
        (lambda p, y: calibrate_classifier(p, 0.01, labels=y), "8 calibration points are too few for alpha=0.01"),
        (lambda p, y: calibrate_classifier(p, 0.1, method="lac2", labels=y), "unknown conformal method 'lac2'"),
        (lambda p, y: calibrate_classifier(p, 0.5, source="median", labels=y), "unknown score source 'median'"),
        (lambda p, y: calibrate_classifier(p, 0.5, method="raps", lam=-1, labels=y), "lam must be a finite"),
        (lambda p, y: calibrate_classifier(p, 0.5, method="raps", k_reg=1.5, labels=y), "k_reg must be an int"),
        (lambda p, y: calibrate_classifier(p, 0.5), "calibration needs labels"),
        (lambda p, y: calibrate_classifier(Prediction(means=p[None]), 0.5), "needs class probabilities"),
        (lambda p, y: calibrate_classifier(p * 2, 0.5, labels=y), "sum to 1"),
        (lambda p, y: prediction_set_metrics(p > 0.3, y[:3]), "labels has N=3 entries"),
        (lambda p, y: prediction_set_metrics(p, y), "sets must be a non-empty bool tensor"),
    ],
)
def test_bad_input_is_one_line(call, message):
    probs = torch.softmax(torch.randn(8, 3), dim=-1)
    labels = torch.randint(0, 3, (8,))
    with pytest.raises(ValueError, match=message) as info:
        call(probs, labels)
    assert "\n" not in str(info.value)
