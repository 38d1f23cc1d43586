import pytest
import torch

from pyro_bnn.evaluation import (
    DEFAULT_NUM_BINS,
    CalibrationResult,
    calibration,
    expected_calibration_error,
    maximum_calibration_error,
)
from pyro_bnn.evaluation.calibration import assign_bins

NAN = float("nan")

# Six points, three classes, used with both 10 and 15 bins. Confidence is the row max, prediction its class.
PROBS = torch.tensor(
    [
        [0.5, 0.3, 0.2],  # conf 0.5,  pred 0, label 0: right
        [0.45, 0.35, 0.2],  # conf 0.45, pred 0, label 1: wrong
        [0.9, 0.05, 0.05],  # conf 0.9,  pred 0, label 0: right
        [0.95, 0.03, 0.02],  # conf 0.95, pred 0, label 0: right
        [0.1, 0.85, 0.05],  # conf 0.85, pred 1, label 2: wrong
        [1.0, 0.0, 0.0],  # conf 1.0,  pred 0, label 0: right
    ]
)
LABELS = torch.tensor([0, 1, 0, 0, 2, 0])


def _assert_bins(result, counts, confidence, accuracy):
    assert result.bin_counts.dtype == torch.int64
    assert result.bin_counts.tolist() == counts
    # NaN marks an empty bin, so NaNs must line up too.
    expected_confidence = torch.tensor(confidence, dtype=torch.float64)
    expected_accuracy = torch.tensor(accuracy, dtype=torch.float64)
    torch.testing.assert_close(result.bin_confidence.cpu(), expected_confidence, equal_nan=True)
    torch.testing.assert_close(result.bin_accuracy.cpu(), expected_accuracy, equal_nan=True)


def test_ten_bins_hand_case(device):
    result = calibration(PROBS.to(device), LABELS.to(device), n_bins=10)
    # Bins (0, .1], (.1, .2], ..., (.9, 1]. 0.5 and 0.9 lie on edges and go to the lower bins 4 and 8.
    #   bin 4 (.4, .5]: 0.5 right, 0.45 wrong -> n 2, conf (0.5 + 0.45) / 2 = 0.475, acc 0.5, gap 0.025
    #   bin 8 (.8, .9]: 0.9 right, 0.85 wrong -> n 2, conf (0.9 + 0.85) / 2 = 0.875, acc 0.5, gap 0.375
    #   bin 9 (.9, 1]: 0.95 right, 1.0 right -> n 2, conf 0.975, acc 1, gap 0.025
    # ECE = 2/6 * (0.025 + 0.375 + 0.025) = 0.425 / 3 = 0.141666...; MCE = 0.375
    # Every other bin is empty: NaN statistics, no part in ECE or MCE.
    assert result.n_bins == 10
    assert result.ece == pytest.approx(0.425 / 3, abs=1e-6)
    assert result.mce == pytest.approx(0.375, abs=1e-6)
    _assert_bins(
        result,
        counts=[0, 0, 0, 0, 2, 0, 0, 0, 2, 2],
        confidence=[NAN] * 4 + [0.475] + [NAN] * 3 + [0.875, 0.975],
        accuracy=[NAN] * 4 + [0.5] + [NAN] * 3 + [0.5, 1.0],
    )
    torch.testing.assert_close(result.bin_edges.cpu(), torch.linspace(0, 1, 11, dtype=torch.float64))


def test_fifteen_bins_hand_case_is_the_default():
    result = calibration(PROBS, LABELS)
    # Bins of width 1/15: 0.45 * 15 = 6.75 -> bin 6, 0.5 * 15 = 7.5 -> bin 7, 0.85 * 15 = 12.75 -> bin 12,
    # 0.9 * 15 = 13.5 -> bin 13, 0.95 * 15 = 14.25 and 1.0 (top edge) -> bin 14.
    #   bin 6: n 1, conf 0.45, acc 0, gap 0.45     bin 7: n 1, conf 0.5, acc 1, gap 0.5
    #   bin 12: n 1, conf 0.85, acc 0, gap 0.85    bin 13: n 1, conf 0.9, acc 1, gap 0.1
    #   bin 14: n 2, conf 0.975, acc 1, gap 0.025
    # ECE = (0.45 + 0.5 + 0.85 + 0.1) / 6 + 2/6 * 0.025 = 1.95 / 6 = 0.325; MCE = 0.85
    assert DEFAULT_NUM_BINS == 15 and result.n_bins == 15
    assert result.ece == pytest.approx(0.325, abs=1e-6)
    assert result.mce == pytest.approx(0.85, abs=1e-6)
    _assert_bins(
        result,
        counts=[0] * 6 + [1, 1] + [0] * 4 + [1, 1, 2],
        confidence=[NAN] * 6 + [0.45, 0.5] + [NAN] * 4 + [0.85, 0.9, 0.975],
        accuracy=[NAN] * 6 + [0.0, 1.0] + [NAN] * 4 + [0.0, 1.0, 1.0],
    )


def test_fifteen_bins_confidences_on_edges_go_to_the_lower_bin():
    probs = torch.tensor(
        [
            [0.8, 0.15, 0.05],  # conf 0.8 = 12/15, an edge -> bin 11 (11/15, 12/15]; label 1: wrong
            [0.4, 0.35, 0.25],  # conf 0.4 = 6/15, an edge -> bin 5 (5/15, 6/15]; label 0: right
            [0.78, 0.12, 0.1],  # conf 0.78 * 15 = 11.7 -> bin 11; label 0: right
            [0.99, 0.005, 0.005],  # conf 0.99 * 15 = 14.85 -> bin 14; label 0: right
        ]
    )
    result = calibration(probs, torch.tensor([1, 0, 0, 0]), n_bins=15)
    #   bin 5: n 1, conf 0.4, acc 1, gap 0.6
    #   bin 11: n 2, conf (0.8 + 0.78) / 2 = 0.79, acc 0.5, gap 0.29
    #   bin 14: n 1, conf 0.99, acc 1, gap 0.01
    # ECE = 1/4 * 0.6 + 2/4 * 0.29 + 1/4 * 0.01 = 0.15 + 0.145 + 0.0025 = 0.2975; MCE = 0.6
    # (With lower-closed bins 0.8 and 0.4 would land in bins 12 and 6 and the counts below would differ.)
    assert result.bin_counts.tolist() == [0] * 5 + [1] + [0] * 5 + [2, 0, 0, 1]
    assert result.ece == pytest.approx(0.2975, abs=1e-6)
    assert result.mce == pytest.approx(0.6, abs=1e-6)


def test_samples_are_averaged_before_taking_the_confidence(device):
    # Dyadic probabilities, so means are exact in float32. Shape (2 samples, 3 points, 3 classes); 10 bins.
    #   point 0: mean of [0.75, 0.25, 0] and [0.25, 0.25, 0.5] = [0.5, 0.25, 0.25]: conf 0.5 (an edge ->
    #            bin 4), pred 0, label 0: right
    #   point 1: mean of [1, 0, 0] and [0.5, 0.5, 0] = [0.75, 0.25, 0]: conf 0.75 -> bin 7, pred 0,
    #            label 1: wrong
    #   point 2: mean of [0, 0, 1] and [0, 0.125, 0.875] = [0, 0.0625, 0.9375]: conf 0.9375 -> bin 9, pred 2,
    #            label 2: right
    probs = torch.tensor(
        [
            [[0.75, 0.25, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
            [[0.25, 0.25, 0.5], [0.5, 0.5, 0.0], [0.0, 0.125, 0.875]],
        ],
        device=device,
    )
    labels = torch.tensor([0, 1, 2], device=device)
    result = calibration(probs, labels, n_bins=10)
    # gaps: bin 4 |1 - 0.5| = 0.5, bin 7 |0 - 0.75| = 0.75, bin 9 |1 - 0.9375| = 0.0625
    # ECE = (0.5 + 0.75 + 0.0625) / 3 = 0.4375; MCE = 0.75
    # Averaging per-sample confidences instead would give point 0 (maxima 0.75 and 0.5) 0.625, in bin 6.
    assert result.bin_counts.tolist() == [0, 0, 0, 0, 1, 0, 0, 1, 0, 1]
    assert result.ece == pytest.approx(0.4375, abs=1e-7)
    assert result.mce == pytest.approx(0.75, abs=1e-7)
    mean_result = calibration(probs.mean(dim=0), labels, n_bins=10)
    assert mean_result.ece == result.ece and mean_result.mce == result.mce


@pytest.mark.parametrize("n_bins", [1, 10, 15, 20])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_edge_belongs_to_the_bin_below_it(n_bins, dtype):
    # The value a user writes for the edge k / n_bins, rounded once to dtype.
    edges = torch.tensor([k / n_bins for k in range(n_bins + 1)], dtype=dtype)
    expected = [0] + list(range(n_bins))  # 0 joins the first bin; edge k >= 1 closes bin k - 1
    assert assign_bins(edges, n_bins).tolist() == expected


def test_assign_bins_interior_points_and_round_off_above_one():
    confidence = torch.tensor([0.0, 0.05, 0.1, 0.1000001, 0.55, 0.9999, 1.0, 1.0004])
    assert assign_bins(confidence, 10).tolist() == [0, 0, 0, 1, 5, 9, 9, 9]


def test_perfectly_calibrated_bins_have_zero_error():
    # Four points at confidence 0.75, three of them right: acc 0.75 = conf 0.75 in bin (0.7, 0.8].
    probs = torch.tensor([[0.75, 0.25]] * 4)
    result = calibration(probs, torch.tensor([0, 0, 0, 1]), n_bins=10)
    assert result.ece == pytest.approx(0.0, abs=1e-12)
    assert result.mce == pytest.approx(0.0, abs=1e-12)
    assert result.num_points == 4


def test_thin_wrappers_match_the_result():
    for n_bins in (10, 15):
        result = calibration(PROBS, LABELS, n_bins=n_bins)
        assert expected_calibration_error(PROBS, LABELS, n_bins=n_bins) == result.ece
        assert maximum_calibration_error(PROBS, LABELS, n_bins=n_bins) == result.mce
    assert expected_calibration_error(PROBS, LABELS) == pytest.approx(0.325, abs=1e-6)
    assert maximum_calibration_error(PROBS, LABELS) == pytest.approx(0.85, abs=1e-6)


def test_ece_is_the_count_weighted_mean_of_the_bin_gaps_on_random_data():
    generator = torch.Generator().manual_seed(1)
    probs = torch.softmax(3.0 * torch.randn(5, 500, 4, generator=generator), dim=-1)
    labels = torch.randint(0, 4, (500,), generator=generator)
    result = calibration(probs, labels, n_bins=15)
    filled = result.bin_counts > 0
    gaps = (result.bin_accuracy - result.bin_confidence).abs()[filled]
    weights = result.bin_counts[filled].double() / 500
    assert result.ece == pytest.approx(float((weights * gaps).sum()), abs=1e-12)
    assert result.mce == pytest.approx(float(gaps.max()), abs=1e-12)
    assert torch.isnan(result.bin_accuracy[~filled]).all()
    assert torch.isnan(result.bin_confidence[~filled]).all()
    assert int(result.bin_counts.sum()) == 500


def test_result_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match=r"bin_accuracy must have shape \(10,\) for n_bins=10; got \(9,\)"):
        CalibrationResult(
            ece=0.0,
            mce=0.0,
            bin_edges=torch.linspace(0, 1, 11),
            bin_counts=torch.zeros(10, dtype=torch.int64),
            bin_confidence=torch.zeros(10),
            bin_accuracy=torch.zeros(9),
            n_bins=10,
        )
