"""``cubic_regression``: the implicit-BNN paper's 1-D set with a gap in [-1, 1)."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn.data import RegressionData, cubic_regression


def test_shapes_and_dtypes():
    data = cubic_regression()
    assert isinstance(data, RegressionData)
    assert data.x_train.shape == data.y_train.shape == (400, 1)
    assert data.x_test.shape == data.y_test.shape == (801, 1)
    for tensor in (data.x_train, data.y_train, data.x_test, data.y_test):
        assert tensor.dtype == torch.float32


def test_training_inputs_skip_the_gap():
    x = cubic_regression().x_train.squeeze(1).double()
    assert not ((x >= -1.0 + 1e-6) & (x < 1.0 - 1e-6)).any()
    assert x.min().item() == pytest.approx(-3.0) and x.max().item() == pytest.approx(2.99)
    left, right = x[x < 0], x[x > 0]
    assert len(left) == len(right) == 200
    assert left.max().item() == pytest.approx(-1.01) and right.min().item() == pytest.approx(1.0)
    torch.testing.assert_close(left.diff(), torch.full((199,), 0.01, dtype=torch.float64), atol=1e-6, rtol=0)


def test_test_grid_spans_the_range_and_the_gap_with_the_noiseless_cubic():
    data = cubic_regression(test_range=(-4.0, 4.0), test_step=0.01)
    x = data.x_test.squeeze(1)
    assert x[0].item() == pytest.approx(-4.0) and x[-1].item() == pytest.approx(4.0)
    assert ((x > -1.0) & (x < 1.0)).sum().item() == 199
    torch.testing.assert_close(data.y_test, data.x_test.double().pow(3).float())


@pytest.mark.parametrize("noise_scale", [0.5, 2.0, 3.0])
def test_noise_has_the_requested_scale(noise_scale):
    data = cubic_regression(noise_scale=noise_scale, step=0.002, seed=1)  # 2000 points: std within ~2 %
    residual = (data.y_train.double() - data.x_train.double().pow(3)).squeeze(1)
    assert residual.std().item() == pytest.approx(noise_scale, rel=0.06)
    assert abs(residual.mean().item()) < 4 * noise_scale / len(residual) ** 0.5


def test_zero_noise_gives_the_exact_cubic():
    data = cubic_regression(noise_scale=0.0)
    torch.testing.assert_close(data.y_train, data.x_train.double().pow(3).float())


def test_seed_controls_the_noise():
    a, b, c = cubic_regression(seed=0), cubic_regression(seed=0), cubic_regression(seed=1)
    assert torch.equal(a.y_train, b.y_train)
    assert not torch.equal(a.y_train, c.y_train)
    assert torch.equal(a.x_train, c.x_train)


def test_step_sets_the_number_of_points():
    assert len(cubic_regression(step=0.1).x_train) == 40
    assert len(cubic_regression(test_step=0.5).x_test) == 17


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step": 0.0}, "step must be a finite float > 0"),
        ({"test_step": -1.0}, "test_step must be a finite float > 0"),
        ({"noise_scale": -1.0}, "noise_scale must be a finite float >= 0"),
        ({"test_range": (2.0, -2.0)}, r"test_range must be \(low, high\) with low < high"),
        ({"seed": -3}, "seed must be a non-negative integer"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cubic_regression(**kwargs)
