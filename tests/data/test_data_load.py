"""``load_dataset``: names, splits, subsets, normalisations; exact oracles on fake MNIST and real digits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyro_bnn.data import BatchLoader, DatasetName, DatasetSplits, Normalization, load_dataset

N_TRAIN = 50

# The fake MNIST is unknown content, loaded with a DataContentWarning (tested in test_data_cache.py).
pytestmark = pytest.mark.filterwarnings("ignore::pyro_bnn.data.DataContentWarning")


@pytest.fixture
def mnist_dir(tmp_path, make_tiny):
    """A fake MNIST of 50 training and 3 test images whose pixel [0, 0] is the image's index."""
    fake = make_tiny(n_train=N_TRAIN)
    fake.write(tmp_path / "idx", compress=True)
    return tmp_path / "idx", fake


def load_fake(mnist_dir, **kwargs) -> DatasetSplits:
    folder, _ = mnist_dir
    return load_dataset("mnist", data_dir=folder, download=False, **kwargs)


def example_ids(split) -> list[int]:
    """The index each image carries in pixel [0, 0] (unit normalisation)."""
    return [round(v) for v in (split.x[:, 0, 0, 0] * 255).tolist()]


# ---- names and options ---------------------------------------------------------------------------


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as error:
        load_dataset("svhn")
    message = str(error.value)
    assert "'svhn'" in message
    for name in (
        "'mnist'",
        "'fashion-mnist'",
        "'cifar10'",
        "'cifar100'",
        "'digits'",
        "'moons'",
        "'circles'",
        "'fmnist'",
    ):
        assert name in message


def test_names_are_case_insensitive_and_fmnist_is_an_alias():
    assert DatasetName("FMNIST") is DatasetName.FASHION_MNIST
    assert DatasetName(" Fashion-MNIST ") is DatasetName.FASHION_MNIST
    assert DatasetName("Digits") is DatasetName.DIGITS


def test_unknown_normalization_lists_the_members():
    with pytest.raises(ValueError, match=r"unknown normalization 'zscore'; expected one of 'unit', 'standard', 'bbb'"):
        load_dataset("digits", normalization="zscore")
    with pytest.raises(ValueError, match="unknown normalization"):
        load_dataset("moons", normalization="zscore")  # validated even where it is ignored
    assert Normalization("BBB") is Normalization.BBB


def test_list_normalization_says_standard_is_per_channel(capsys):
    """``pyro-bnn list normalization`` said "one scalar mean and std per data set", but CIFAR's are per channel."""
    from pyro_bnn.cli import main
    from pyro_bnn.data.cifar import CIFAR_MEAN_STD
    from pyro_bnn.data.images import FASHION_MNIST_MEAN_STD, MNIST_MEAN_STD

    assert main(["list", "normalization"]) == 0
    listing = " ".join(capsys.readouterr().out.split())
    assert (
        "standard (x / max_value - mean) / std with each data set's own mean and std per channel on the [0, 1] "
        "scale: the usual MNIST 0.1307 / 0.3081 and Fashion-MNIST 0.2860 / 0.3530 (one grey channel), CIFAR's "
        "published (R, G, B) constants (pyro_bnn.data.cifar.CIFAR_MEAN_STD); for digits, computed from its training "
        "split." in listing
    )
    assert "scalar" not in listing
    assert (MNIST_MEAN_STD, FASHION_MNIST_MEAN_STD) == ((0.1307, 0.3081), (0.2860, 0.3530))  # the numbers it names
    assert all(len(mean) == len(std) == 3 for mean, std in CIFAR_MEAN_STD.values())  # one per R, G, B channel


def test_generator_kwargs_are_checked():
    with pytest.raises(TypeError, match="factor"):
        load_dataset("moons", factor=0.3)
    with pytest.raises(TypeError, match="noise"):
        load_dataset("digits", noise=0.1)


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        load_dataset("moons", seed=seed)


# ---- exact pixels and normalisations -------------------------------------------------------------


@pytest.mark.parametrize(
    ("normalization", "transform"),
    [
        ("unit", lambda p: p / 255.0),
        ("bbb", lambda p: p / 126.0),
        ("standard", lambda p: (p / 255.0 - 0.1307) / 0.3081),
        ("mnist-standard", lambda p: (p / 255.0 - 0.1307) / 0.3081),
    ],
)
def test_mnist_normalizations(mnist_dir, normalization, transform):
    _, fake = mnist_dir
    splits = load_fake(mnist_dir, normalization=normalization, val_size=0)
    pixels = torch.from_numpy(fake.train_images).double().unsqueeze(1)
    torch.testing.assert_close(splits.train.x.double(), transform(pixels), rtol=0, atol=1e-6)
    assert splits.normalization is Normalization(normalization)
    assert splits.train.x.dtype == torch.float32


def test_fashion_mnist_standard_constants(mnist_dir):
    folder, fake = mnist_dir
    splits = load_dataset("fashion-mnist", data_dir=folder, download=False, normalization="standard", val_size=0)
    pixels = torch.from_numpy(fake.test_images).double().unsqueeze(1)
    torch.testing.assert_close(splits.test.x.double(), (pixels / 255 - 0.2860) / 0.3530, rtol=0, atol=1e-6)


def test_mnist_standard_applies_mnists_constants_to_every_data_set(mnist_dir):
    # The One Simple Trick authors' Normalize([0.1307], [0.3081]) on Fashion-MNIST; digits' 0..16 pixels likewise.
    folder, fake = mnist_dir
    splits = load_dataset("fashion-mnist", data_dir=folder, download=False, normalization="mnist-standard", val_size=0)
    pixels = torch.from_numpy(fake.test_images).double().unsqueeze(1)
    torch.testing.assert_close(splits.test.x.double(), (pixels / 255 - 0.1307) / 0.3081, rtol=0, atol=1e-6)
    unit = load_dataset("digits", seed=2, normalization="unit")
    digits = load_dataset("digits", seed=2, normalization="MNIST-Standard")
    torch.testing.assert_close(digits.train.x, (unit.train.x - 0.1307) / 0.3081, rtol=0, atol=1e-6)
    assert digits.normalization is Normalization.MNIST_STANDARD


def test_bbb_maximum_is_255_over_126(mnist_dir):
    splits = load_fake(mnist_dir, normalization="bbb", val_size=0)
    assert splits.train.x.max().item() == pytest.approx(255 / 126, abs=1e-6)


# ---- validation split and training subset --------------------------------------------------------


def test_default_val_size_is_ten_thousand_for_mnist(mnist_dir):
    with pytest.raises(ValueError, match="val_size=10000 holds out 10000 of the 50 available examples"):
        load_fake(mnist_dir)


@pytest.mark.parametrize(("val_size", "expected"), [(0, 0), (10, 10), (49, 49), (0.1, 5), (0.25, 12), (0.0, 0)])
def test_val_size_counts(mnist_dir, val_size, expected):
    splits = load_fake(mnist_dir, val_size=val_size)
    assert len(splits.val) == expected
    assert len(splits.train) == N_TRAIN - expected
    assert len(splits.test) == 3


def test_split_is_seeded_disjoint_and_complete(mnist_dir):
    first = load_fake(mnist_dir, val_size=20, seed=3)
    again = load_fake(mnist_dir, val_size=20, seed=3)
    other = load_fake(mnist_dir, val_size=20, seed=4)

    train, val = example_ids(first.train), example_ids(first.val)
    assert set(train).isdisjoint(val)
    assert sorted(train + val) == list(range(N_TRAIN))
    assert example_ids(first.test) == [100, 101, 102]  # the official test set, untouched
    assert example_ids(again.val) == val
    assert example_ids(other.val) != val
    # Labels travel with their images.
    _, fake = mnist_dir
    assert first.val.y.tolist() == [int(fake.train_labels[i]) for i in val]


def test_split_does_not_touch_the_global_rng(mnist_dir):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_fake(mnist_dir, val_size=20, train_subset=10)
    assert torch.equal(torch.rand(3), expected)


def test_train_subset_is_a_seeded_subset_and_leaves_val_alone(mnist_dir):
    full = load_fake(mnist_dir, val_size=20, seed=1)
    small = load_fake(mnist_dir, val_size=20, seed=1, train_subset=8)
    again = load_fake(mnist_dir, val_size=20, seed=1, train_subset=8)

    assert len(small.train) == 8
    assert set(example_ids(small.train)) <= set(example_ids(full.train))
    assert example_ids(small.val) == example_ids(full.val)
    assert example_ids(small.train) == example_ids(again.train)
    assert len(load_fake(mnist_dir, val_size=20, train_subset=30).train) == 30  # all that is left


@pytest.mark.parametrize("train_subset", [0, -1, 31, 2.5, True])
def test_bad_train_subset(mnist_dir, train_subset):
    with pytest.raises(ValueError) as error:
        load_fake(mnist_dir, val_size=20, train_subset=train_subset)
    message = str(error.value)
    assert f"got {train_subset!r}" in message
    assert "between 1 and 30" in message


@pytest.mark.parametrize("val_size", [-1, -0.1, 1.0, 1.5, 50, 60, "10", True, math.nan])
def test_bad_val_size(mnist_dir, val_size):
    with pytest.raises(ValueError, match="val_size") as error:
        load_fake(mnist_dir, val_size=val_size)
    assert repr(val_size) in str(error.value)


# ---- digits (scikit-learn's bundled images) ------------------------------------------------------


def test_digits_shapes_and_unit_scale():
    splits = load_dataset("digits")
    assert (len(splits.train), len(splits.val), len(splits.test)) == (1150, 288, 359)
    assert splits.train.x.shape == (1150, 1, 8, 8) and splits.input_shape == (1, 8, 8)
    assert splits.num_classes == 10 and splits.train.y.dtype == torch.int64
    assert splits.train.x.min().item() == 0.0 and splits.train.x.max().item() == 1.0
    # Raw pixels are the integers 0..16, so unit-scaled values are multiples of 1/16.
    assert torch.equal(splits.train.x * 16, (splits.train.x * 16).round())


def test_digits_test_split_is_fixed_whatever_the_seed():
    a, b = load_dataset("digits", seed=0), load_dataset("digits", seed=5)
    assert torch.equal(a.test.x, b.test.x)
    assert not torch.equal(a.val.x, b.val.x)


def test_digits_bbb_maps_16_onto_255_over_126():
    unit, bbb = load_dataset("digits"), load_dataset("digits", normalization="bbb")
    torch.testing.assert_close(bbb.train.x, unit.train.x * (255 / 126))


def test_digits_standard_statistics_come_from_the_training_split():
    unit = load_dataset("digits", seed=2)
    standard = load_dataset("digits", seed=2, normalization="standard")
    train = unit.train.x.double()
    mean, std = train.mean(), train.std()

    torch.testing.assert_close(standard.train.x.double(), (train - mean) / std, rtol=0, atol=1e-5)
    torch.testing.assert_close(standard.test.x.double(), (unit.test.x.double() - mean) / std, rtol=0, atol=1e-5)
    assert abs(standard.train.x.double().mean().item()) < 1e-6
    # A training subset is scaled with the full training split's statistics, exactly like the full run.
    subset = load_dataset("digits", seed=2, normalization="standard", train_subset=100)
    unit_subset = load_dataset("digits", seed=2, train_subset=100)
    torch.testing.assert_close(subset.train.x.double(), (unit_subset.train.x.double() - mean) / std, atol=1e-5, rtol=0)


# ---- moons and circles ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["moons", "circles"])
def test_two_d_sets_shapes_and_metadata(name):
    splits = load_dataset(name)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (640, 160, 200)
    assert splits.train.x.shape == (640, 2) and splits.train.x.dtype == torch.float32
    assert splits.train.y.dtype == torch.int64
    assert set(splits.train.y.tolist()) == {0, 1}
    assert splits.num_classes == 2 and splits.input_shape == (2,) and splits.normalization is None
    everything = torch.cat([splits.train.x, splits.val.x, splits.test.x])
    assert len(torch.unique(everything, dim=0)) == 1000  # one pool, split without overlap


@pytest.mark.parametrize("name", ["moons", "circles"])
def test_two_d_sets_ignore_normalization_and_honour_the_seed(name):
    unit = load_dataset(name, seed=1)
    assert torch.equal(load_dataset(name, seed=1, normalization="bbb").train.x, unit.train.x)
    assert not torch.equal(load_dataset(name, seed=2).train.x, unit.train.x)


def test_n_samples_and_subset_for_two_d_sets():
    splits = load_dataset("moons", n_samples=500, val_size=0.5, train_subset=50)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (50, 200, 100)


@pytest.mark.parametrize("name", ["moons", "circles"])
@pytest.mark.parametrize("count", [np.int64(5), np.int32(5), np.uint8(5)])
def test_a_numpy_integer_val_size_is_a_count_for_two_d_sets(name, count):
    """A NumPy integer was read as a fraction (5 -> 400 of the 80 left after the test part): 100 points are
    20 test, then val_size 5 of the 80 left, as for the Python int 5."""
    splits = load_dataset(name, n_samples=100, val_size=count)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (75, 5, 20)
    assert torch.equal(splits.val.x, load_dataset(name, n_samples=100, val_size=5).val.x)
    with pytest.raises(ValueError, match=r"sizes 0 / 80 \(of 81 asked for\) / 20"):
        load_dataset(name, n_samples=100, val_size=np.int64(81))
    with pytest.raises(ValueError, match="val_size must be an int .* got np.True_ of type bool"):
        load_dataset(name, n_samples=100, val_size=np.bool_(True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"n_samples": 1},
            "moons with n_samples=1 splits into train / validation / test sizes 1 / 0 / 0, leaving the validation and "
            "test parts empty (the test part is 20 % of the points, the validation part 20 % of the rest); pass "
            "n_samples >= 4 or val_size=0 (no validation part)",
        ),
        ({"n_samples": 3}, "sizes 2 / 0 / 1, leaving the validation part empty"),
        ({"n_samples": 2, "val_size": 0}, "sizes 2 / 0 / 0, leaving the test part empty"),
        ({"n_samples": 10, "val_size": 8}, "sizes 0 / 8 / 2, leaving the train part empty"),
        ({"n_samples": 10, "val_size": 9}, "sizes 0 / 8 (of 9 asked for) / 2"),
    ],
)
def test_a_two_d_pool_too_small_for_its_splits_names_the_sizes(kwargs, message):
    """An empty part (the test part of 1 point ended a run in a reshape error after training) is refused in one
    line naming the three sizes and the pool asked for; an empty validation part only where one was asked for."""
    with pytest.raises(ValueError) as info:
        load_dataset("moons", **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)
    splits = load_dataset("moons", n_samples=3, val_size=0)  # no validation part asked for: none is fine
    assert (len(splits.train), len(splits.val), len(splits.test)) == (2, 0, 1)
    splits = load_dataset("moons", n_samples=4)  # the smallest pool the message names
    assert (len(splits.train), len(splits.val), len(splits.test)) == (2, 1, 1)


def test_noiseless_circles_lie_on_radius_one_and_factor():
    splits = load_dataset("circles", noise=0.0, factor=0.3, val_size=0)
    x = torch.cat([splits.train.x, splits.test.x]).double()
    y = torch.cat([splits.train.y, splits.test.y])
    radius = x.norm(dim=1)
    torch.testing.assert_close(radius[y == 0], torch.ones_like(radius[y == 0]), rtol=0, atol=1e-6)
    torch.testing.assert_close(radius[y == 1], torch.full_like(radius[y == 1], 0.3), rtol=0, atol=1e-6)


def test_noiseless_moons_lie_on_their_half_circles():
    splits = load_dataset("moons", noise=0.0, val_size=0)
    x = torch.cat([splits.train.x, splits.test.x]).double()
    y = torch.cat([splits.train.y, splits.test.y])
    upper, lower = x[y == 0], x[y == 1]
    torch.testing.assert_close(upper.norm(dim=1), torch.ones(len(upper), dtype=torch.float64), atol=1e-6, rtol=0)
    assert (upper[:, 1] >= -1e-6).all()
    centre = torch.tensor([1.0, 0.5], dtype=torch.float64)
    torch.testing.assert_close(
        (lower - centre).norm(dim=1), torch.ones(len(lower), dtype=torch.float64), atol=1e-6, rtol=0
    )
    assert (lower[:, 1] <= 0.5 + 1e-6).all()


def test_circle_noise_has_the_requested_scale():
    noise = 0.05
    splits = load_dataset("circles", n_samples=4000, noise=noise, factor=0.5, val_size=0)
    x, y = splits.train.x.double(), splits.train.y
    residual = torch.where(y == 0, x.norm(dim=1) - 1.0, x.norm(dim=1) - 0.5)
    # The radial part of isotropic 2-D Gaussian noise has (to first order) the same standard deviation.
    assert residual.std().item() == pytest.approx(noise, rel=0.1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_samples": 0}, "n_samples"),
        ({"noise": -0.1}, "noise"),
        ({"factor": 1.0}, "factor"),
        ({"factor": -0.5}, "factor"),
    ],
)
def test_bad_generator_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_dataset("circles", **kwargs)


# ---- loaders from splits -------------------------------------------------------------------------


def test_splits_loaders():
    splits = load_dataset("moons")
    train, val, test = splits.loaders(100, seed=3)
    assert all(isinstance(loader, BatchLoader) for loader in (train, val, test))
    assert (len(train.dataset), len(val.dataset), len(test.dataset)) == (640, 160, 200)
    assert (len(train), len(val), len(test)) == (7, 2, 2)
    assert train.shuffle and not val.shuffle and not test.shuffle
    x_val = torch.cat([x for x, _ in val])
    assert torch.equal(x_val, splits.val.x)
    x_train = torch.cat([x for x, _ in train])
    assert not torch.equal(x_train, splits.train.x)
    assert sorted(map(tuple, x_train.tolist())) == sorted(map(tuple, splits.train.x.tolist()))


def test_val_size_zero_gives_an_empty_loader():
    splits = load_dataset("digits", val_size=0)
    _, val, _ = splits.loaders(32)
    assert len(val) == 0 and list(val) == [] and len(val.dataset) == 0


def test_fraction_is_rounded_to_the_nearest_count():
    splits = load_dataset("moons", val_size=0.123)  # of the 800 left after the 200 test points
    assert len(splits.val) == 98  # 98.4
