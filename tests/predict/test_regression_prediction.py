"""A regression Prediction's variance split and calibration, with scalar and per-sample noise."""

import pytest
import torch

from pyro_bnn.evaluation import regression_calibration
from pyro_bnn.predict import Prediction

MEANS = torch.tensor([[[1.0], [0.0]], [[3.0], [0.0]]])  # (S=2, N=2, D=1)
TARGETS = torch.tensor([[2.0], [0.5]])


def test_split_with_per_sample_noise():
    scales = torch.tensor([[[1.0], [2.0]], [[3.0], [2.0]]])
    prediction = Prediction(means=MEANS, noise_scale=scales, targets=TARGETS)
    split = prediction.variance_split()
    assert split.aleatoric.view(-1).tolist() == [5.0, 4.0]
    assert split.epistemic.view(-1).tolist() == [1.0, 0.0]
    assert prediction.predictive_std().view(-1).tolist() == pytest.approx([6**0.5, 2.0])
    assert prediction.predictive_std().dtype == torch.float32
    assert prediction.calibration() == regression_calibration(MEANS, scales, TARGETS)


def test_scalar_noise_keeps_the_old_moments():
    prediction = Prediction(means=MEANS, noise_scale=torch.tensor(0.5), targets=TARGETS)
    expected = (MEANS.var(0, unbiased=False) + 0.25).sqrt()
    assert torch.allclose(prediction.predictive_std(), expected)
    assert set(prediction.calibration(levels=(0.8,))) == {"coverage_80", "width_80", "qce", "crps", "sharpness"}


def test_refusals():
    student = Prediction(means=MEANS, noise_scale=torch.tensor(0.5), noise_df=torch.tensor(4.0), targets=TARGETS)
    assert student.variance_split().aleatoric.view(-1).tolist() == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError, match="regression calibration takes Gaussian noise; this prediction has Student-t"):
        student.calibration()
    with pytest.raises(ValueError, match="no targets"):
        Prediction(means=MEANS, noise_scale=torch.tensor(0.5)).calibration()
    with pytest.raises(ValueError, match="this is a classification prediction"):
        Prediction(probs=torch.full((1, 2, 2), 0.5)).variance_split()
