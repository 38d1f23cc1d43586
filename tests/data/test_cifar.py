"""CIFAR-10/100 through torchvision: the layout and splits the loader makes of torchvision's arrays (a stand-in for
its dataset class, since the real files cannot be downloaded here), and a one-line error when they are missing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyro_bnn.data import cifar, load_dataset
from pyro_bnn.data.datasets import dataset_shape


class _FakeCifar:
    """torchvision's CIFAR10 / CIFAR100 interface: ``data (N, 32, 32, 3)`` uint8 and ``targets`` ints."""

    classes = 10
    calls: list[tuple[str, bool, bool]] = []

    def __init__(self, root: str, train: bool, download: bool) -> None:
        _FakeCifar.calls.append((root, train, download))
        rng = np.random.default_rng(0 if train else 1)
        n = 6_000 if train else 500
        self.data = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        self.data[:, 0, 0, 0] = np.arange(n) % 256  # a marker per image; its label is the marker mod 10
        self.targets = list(np.arange(n) % 256 % self.classes)


@pytest.fixture
def fake_cifar(monkeypatch):
    _FakeCifar.calls = []
    monkeypatch.setattr(cifar, "_dataset_class", lambda name: _FakeCifar)
    return _FakeCifar


def test_cifar_is_channels_first_with_a_5000_image_validation_split(tmp_path, fake_cifar):
    data = load_dataset("cifar10", data_dir=tmp_path, normalization="unit", seed=3)
    assert (len(data.train), len(data.val), len(data.test)) == (1_000, 5_000, 500)
    assert data.train.x.shape[1:] == (3, 32, 32) == dataset_shape("cifar10").input_shape
    assert data.num_classes == 10 and data.train.x.dtype == torch.float32
    raw = fake_cifar(str(tmp_path), True, False)
    # image i of the data set, moved to channels first and scaled to [0, 1]
    first = data.test.x[7]
    expected = torch.from_numpy(fake_cifar(str(tmp_path), False, False).data[7]).permute(2, 0, 1).float() / 255
    torch.testing.assert_close(first, expected)
    # every image keeps its own label through the split and the subset
    for split in (data.train, data.val, data.test):
        markers = (split.x[:, 0, 0, 0] * 255).round().long()
        assert torch.equal(split.y, markers % 10)
    assert len(raw.targets) == 6_000
    # a data_dir is read as it is: nothing is downloaded into it
    assert all(call[0] == str(tmp_path) and call[2] is False for call in fake_cifar.calls)
    # standardised per channel with the published constants, whatever the split
    standard = load_dataset("cifar10", data_dir=tmp_path, normalization="standard", seed=3)
    means, stds = (torch.tensor(v).view(3, 1, 1) for v in cifar.CIFAR_MEAN_STD["cifar10"])
    torch.testing.assert_close(standard.test.x[7], (expected - means) / stds)


def test_without_data_dir_the_cache_root_is_used_and_may_download(tmp_path, fake_cifar):
    load_dataset("cifar100", cache_dir=tmp_path, val_size=100)
    assert {call[0] for call in fake_cifar.calls} == {str(tmp_path / "torchvision")}
    assert all(call[2] is True for call in fake_cifar.calls)
    assert dataset_shape("cifar100").num_classes == 100


def test_missing_cifar_is_one_line_naming_the_root_and_the_fixes(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("cifar10", data_dir=tmp_path / "empty")
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "empty") in message and "cifar-10-batches-py/" in message
