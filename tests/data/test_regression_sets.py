"""The heteroscedastic synthetic set (its noise matches the stated function) and the standardised diabetes set."""

import pytest
import torch
from sklearn.datasets import load_diabetes

from pyro_bnn.data import (
    DatasetName,
    Task,
    dataset_shape,
    diabetes_regression,
    heteroscedastic_mean,
    heteroscedastic_noise_sd,
    heteroscedastic_regression,
    load_dataset,
)
from pyro_bnn.data.regression_sets import DIABETES_TARGET_SD, diabetes_target_scale


def test_noise_function_by_hand():
    x = torch.tensor([-4.0, 0.0, 1.5])
    assert heteroscedastic_noise_sd(x).tolist() == pytest.approx([0.9, 0.1, 0.4])
    assert heteroscedastic_mean(torch.tensor([0.0, torch.pi / 2])).tolist() == pytest.approx([0.0, torch.pi / 2])


def test_heteroscedastic_residuals_follow_the_noise_function():
    data = heteroscedastic_regression(n_samples=40_000, seed=3)
    x, y = data.x_train.double().squeeze(1), data.y_train.double().squeeze(1)
    z = (y - heteroscedastic_mean(x)) / heteroscedastic_noise_sd(x)
    assert float(z.mean()) == pytest.approx(0.0, abs=0.02)
    for lo, hi in [(-4, -2), (-1, 1), (2, 4)]:  # standardised residuals have sd 1 in every band
        band = (x >= lo) & (x < hi)
        assert float(z[band].std()) == pytest.approx(1.0, abs=0.03)
    assert (data.x_train.abs() <= 4).all()


def test_heteroscedastic_split_shapes_and_seeds():
    splits = load_dataset("heteroscedastic", seed=1)
    assert splits.task is Task.REGRESSION and splits.output_dim == 1
    assert (len(splits.train), len(splits.val), len(splits.test)) == (400, 0, 801)
    assert splits.test.x[0].item() == -4.0 and splits.test.x[-1].item() == 4.0
    again = load_dataset("heteroscedastic", seed=1)
    assert torch.equal(splits.train.y, again.train.y)
    assert not torch.equal(splits.train.y, load_dataset("heteroscedastic", seed=2).train.y)
    assert len(load_dataset("heteroscedastic", n_samples=50, val_size=10).train) == 40
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        load_dataset("heteroscedastic", noise=0.1)


def test_diabetes_is_standardised_offline():
    data = diabetes_regression(seed=0)
    assert data.x_train.shape == (354, 10) and data.x_test.shape == (88, 10)
    assert data.y_train.shape == (354, 1) and data.y_test.shape == (88, 1)
    assert torch.allclose(data.x_train.mean(0), torch.zeros(10), atol=1e-5)
    assert torch.allclose(data.x_train.std(0), torch.ones(10), atol=1e-5)
    assert float(data.y_train.std()) == pytest.approx(1.0, abs=1e-5)
    raw_sd = float(load_diabetes().target.std(ddof=1))
    assert raw_sd == pytest.approx(DIABETES_TARGET_SD, abs=0.01)
    assert not torch.equal(data.y_test, diabetes_regression(seed=1).y_test)


def test_diabetes_targets_map_back_to_the_raw_score():
    """``y * sd + mean`` with the training part's mean and sd gives back the raw scores of both parts: sorted, they
    are the 442 raw targets. At seed 0 the training sd is 76.34, not the whole set's 77.09."""
    raw = torch.as_tensor(load_diabetes().target, dtype=torch.float64).sort().values
    for seed in (0, 1):
        data = diabetes_regression(seed=seed)
        mean, sd = diabetes_target_scale(seed=seed)
        back = torch.cat([data.y_train, data.y_test]).double().squeeze(1) * sd + mean
        assert torch.allclose(back.sort().values, raw, atol=1e-4)
    assert diabetes_target_scale(seed=0) == pytest.approx((152.36, 76.34), abs=0.005)
    with pytest.raises(ValueError, match="seed"):
        diabetes_target_scale(seed=-1)


def test_heteroscedastic_is_registered_as_regression():
    assert DatasetName("heteroscedastic").task is Task.REGRESSION
    shape = dataset_shape("heteroscedastic")
    assert shape.input_shape == (1,) and shape.num_classes is None
