"""``cubic_regression``: the implicit-BNN paper's 1-D set with a gap in [-1, 1), and ``load_dataset("cubic")``."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn.data import DatasetName, DatasetSplits, RegressionData, Task, TensorSplit, cubic_regression, load_dataset


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
        ({"step": 0.0}, "step must be a finite number > 0, got 0.0"),
        ({"test_step": -1.0}, "test_step must be a finite number > 0, got -1.0"),
        ({"noise_scale": -1.0}, "noise_scale must be a finite number >= 0, got -1.0"),
        ({"test_range": (2.0, -2.0)}, r"test_range must be \(low, high\) with low < high"),
        ({"test_range": (1, 2, 3)}, r"test_range must be a pair \(low, high\) of numbers, got \(1, 2, 3\)"),
        ({"test_range": ("a", 1)}, r"test_range must be a pair \(low, high\) of numbers"),
        ({"seed": -3}, "seed must be an int >= 0, got -3"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cubic_regression(**kwargs)


# ---- load_dataset("cubic") ---------------------------------------------------------------------------


def test_load_dataset_cubic_shapes_and_task():
    splits = load_dataset("cubic")
    assert splits.task is Task.REGRESSION and DatasetName("cubic").task is Task.REGRESSION
    assert splits.num_classes is None and splits.output_dim == 1
    assert splits.input_shape == (1,) and splits.normalization is None
    assert (len(splits.train), len(splits.val), len(splits.test)) == (400, 0, 801)
    for part in (splits.train, splits.val, splits.test):
        assert part.x.shape == part.y.shape == (len(part), 1)
        assert part.x.dtype == part.y.dtype == torch.float32
    data = cubic_regression(seed=0)
    assert torch.equal(splits.train.y, data.y_train) and torch.equal(splits.test.x, data.x_test)


def test_classification_sets_keep_their_task():
    splits = load_dataset("moons")
    assert splits.task is Task.CLASSIFICATION and splits.output_dim == splits.num_classes == 2
    assert all(DatasetName(name).task is Task.CLASSIFICATION for name in ("mnist", "digits", "circles"))


def test_cubic_validation_and_subset_on_request():
    splits = load_dataset("cubic", val_size=0.25, train_subset=50, seed=3)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (50, 100, 801)
    train_x = set(splits.train.x.squeeze(1).tolist())
    assert not train_x & set(splits.val.x.squeeze(1).tolist())
    assert train_x <= set(cubic_regression().x_train.squeeze(1).tolist())


def test_cubic_ignores_normalization_and_passes_generator_arguments():
    splits = load_dataset("cubic", normalization="standard", noise_scale=0.0, step=0.1, test_step=0.5)
    assert (len(splits.train), len(splits.test)) == (40, 17)
    torch.testing.assert_close(splits.train.y, splits.train.x.double().pow(3).float())
    with pytest.raises(TypeError, match="cubic: step, noise_scale, test_range, test_step"):
        load_dataset("cubic", n_samples=10)


def test_cubic_loaders_yield_float_targets():
    train, _, test = load_dataset("cubic").loaders(batch_size=64, seed=0)
    x, y = next(iter(train))
    assert x.shape == y.shape == (64, 1) and y.dtype == torch.float32
    assert sum(len(batch[0]) for batch in test) == 801


def test_dataset_splits_check_num_classes_against_the_task():
    part = TensorSplit(torch.zeros(3, 1), torch.zeros(3, 1))
    with pytest.raises(ValueError, match="num_classes must be None"):
        DatasetSplits("cubic", part, part, part, 1, (1,), None, Task.REGRESSION)
    flat = TensorSplit(torch.zeros(3, 1), torch.zeros(3))
    with pytest.raises(ValueError, match=r"regression targets must be \(N, D\)"):
        DatasetSplits("cubic", flat, flat, flat, None, (1,), None, Task.REGRESSION)
    with pytest.raises(ValueError, match="num_classes of a classification data set must be an int >= 1, got None"):
        DatasetSplits("moons", flat, flat, flat, None, (1,), None)
