"""Finding MNIST / Fashion-MNIST: data_dir, $PYRO_BNN_DATA, the Debian path, the cache, the download, errors.

Every test works on tiny IDX files written into ``tmp_path``; the conftest isolates the real machine. A tiny fake
is unknown content (loaded with a ``DataContentWarning`` when named) unless a test ``publish``es it; what the
cache may and may not serve is tested in ``test_data_cache.py``.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets

from pyro_bnn.data import cache as cache_module
from pyro_bnn.data import idx_reading, load_dataset, sources
from pyro_bnn.data.cache import resolve_cache_dir

pytestmark = pytest.mark.filterwarnings("ignore::pyro_bnn.data.DataContentWarning")

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def expected_images(images: np.ndarray) -> torch.Tensor:
    """``(N, 1, 28, 28)`` float32 unit-normalised pixels, the way a user would compute them by hand."""
    return torch.from_numpy(images.astype(np.float32) / np.float32(255.0)).unsqueeze(1)


def assert_loaded_exactly(splits, tiny) -> None:
    assert splits.train.x.shape == (7, 1, 28, 28) and splits.test.x.shape == (3, 1, 28, 28)
    assert splits.train.x.dtype == torch.float32 and splits.train.y.dtype == torch.int64
    assert torch.equal(splits.train.x, expected_images(tiny.train_images))
    assert torch.equal(splits.train.y, torch.from_numpy(tiny.train_labels).long())
    assert torch.equal(splits.test.x, expected_images(tiny.test_images))
    assert torch.equal(splits.test.y, torch.from_numpy(tiny.test_labels).long())
    assert len(splits.val) == 0 and splits.val.x.shape == (0, 1, 28, 28)
    assert splits.input_shape == (1, 28, 28) and splits.num_classes == 10


@pytest.mark.parametrize("compress", [True, False], ids=["gzip", "uncompressed"])
def test_idx_folder_round_trip(tmp_path, cache_dir, tiny, compress):
    data_dir = tiny.write(tmp_path / "idx", compress=compress)

    splits = load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)


def test_conversion_writes_torchvisions_raw_layout(tmp_path, cache_dir, tiny, leftover_files, publish):
    publish("Fashion-MNIST", tiny)  # only the published set lands in the entry that plain loads read
    data_dir = tiny.write(tmp_path / "idx", compress=True)

    load_dataset("fashion-mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)

    raw = cache_dir / "FashionMNIST" / "raw"
    contents = tiny.contents()
    for name in IDX_NAMES:
        assert (raw / name).read_bytes() == contents[name]  # uncompressed, byte for byte
    assert sorted(p.name for p in raw.iterdir() if not p.name.startswith(".")) == sorted(IDX_NAMES)
    assert leftover_files(tmp_path) == []
    # torchvision itself reads the converted layout.
    dataset = torchvision.datasets.FashionMNIST(root=str(cache_dir), train=True, download=False)
    assert torch.equal(dataset.data, torch.from_numpy(tiny.train_images))


@pytest.mark.parametrize("published", [True, False], ids=["published", "unknown-content"])
def test_second_load_reuses_the_cache(tmp_path, cache_dir, tiny, monkeypatch, publish, entry_raw_dir, published):
    if published:
        publish("MNIST", tiny)
    data_dir = tiny.write(tmp_path / "idx", compress=True)
    load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)
    raw = entry_raw_dir(cache_dir, "MNIST")
    inodes = {name: (raw / name).stat().st_ino for name in IDX_NAMES}

    def no_read(*args, **kwargs):
        raise AssertionError("no file should be decompressed or hashed again: the stamps hold")

    # Every full read (decompression, hashing, copying) goes through scan_idx.
    monkeypatch.setattr(cache_module, "scan_idx", no_read)
    monkeypatch.setattr(idx_reading, "scan_idx", no_read)
    splits = load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)
    assert {name: (raw / name).stat().st_ino for name in IDX_NAMES} == inodes


def test_changed_source_is_converted_again(tmp_path, cache_dir, tiny, make_tiny):
    data_dir = tiny.write(tmp_path / "idx", compress=True)
    load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)

    other = make_tiny(seed=1)
    other.write(data_dir, compress=True)
    splits = load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)

    assert torch.equal(splits.train.x, expected_images(other.train_images))


def test_damaged_cache_file_is_rebuilt_from_its_source(tmp_path, cache_dir, tiny, entry_raw_dir):
    data_dir = tiny.write(tmp_path / "idx", compress=True)
    load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)
    cached = entry_raw_dir(cache_dir, "MNIST") / "train-images-idx3-ubyte"
    cached.write_bytes(cached.read_bytes()[:100])
    os.utime(cached)

    splits = load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)


def test_torchvision_root_is_used_in_place(tmp_path, cache_dir, tiny):
    root = tmp_path / "tv"
    tiny.write(root / "MNIST" / "raw", compress=False)

    splits = load_dataset("mnist", data_dir=root, cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)
    # No copy is made; the cache only remembers the files' digests.
    assert [path.parent.name for path in cache_dir.rglob("*") if path.is_file()] == [".digests"] * 4


def test_torchvision_root_with_only_gzip_files_is_converted(tmp_path, cache_dir, tiny, entry_raw_dir):
    root = tmp_path / "tv"
    tiny.write(root / "FashionMNIST" / "raw", compress=True)

    splits = load_dataset("fmnist", data_dir=root, cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)
    assert (entry_raw_dir(cache_dir, "FashionMNIST") / "train-images-idx3-ubyte").is_file()


def test_environment_variable_is_used_without_data_dir(tmp_path, cache_dir, tiny, monkeypatch):
    monkeypatch.setenv("PYRO_BNN_DATA", str(tiny.write(tmp_path / "env", compress=True)))

    splits = load_dataset("mnist", cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)


def test_debian_path_serves_fashion_mnist(tmp_path, cache_dir, tiny, debian_dir, monkeypatch, publish):
    publish("Fashion-MNIST", tiny)
    tiny.write(debian_dir, compress=True)
    # $PYRO_BNN_DATA holding something else is a miss, not an error: the next source is tried.
    monkeypatch.setenv("PYRO_BNN_DATA", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()

    splits = load_dataset("fashion-mnist", cache_dir=cache_dir, val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)
    assert splits.name == "fashion-mnist"
    assert (cache_dir / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte").is_file()


def test_cache_serves_later_loads_without_any_source(tmp_path, tiny, publish):
    publish("MNIST", tiny)  # unknown content is never served this way: see test_data_cache.py
    data_dir = tiny.write(tmp_path / "idx", compress=True)
    load_dataset("mnist", data_dir=data_dir, val_size=0, download=False)  # into the default cache
    assert (tmp_path / "default-cache" / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()

    splits = load_dataset("mnist", val_size=0, download=False)

    assert_loaded_exactly(splits, tiny)


def test_successful_download_lands_in_the_cache(cache_dir, tiny, monkeypatch, leftover_files, publish):
    publish("MNIST", tiny)

    def fake_download(self):  # what torchvision's download leaves behind: the uncompressed raw files
        tiny.write(Path(self.raw_folder), compress=False)

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", fake_download)

    splits = load_dataset("mnist", cache_dir=cache_dir, val_size=0)

    assert_loaded_exactly(splits, tiny)
    raw = cache_dir / "MNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir() if not p.name.startswith(".")) == sorted(IDX_NAMES)
    assert sorted(p.name for p in raw.iterdir() if p.name.startswith(".")) == sorted(f".{n}.md5" for n in IDX_NAMES)
    assert leftover_files(cache_dir) == []
    assert [p.name for p in cache_dir.iterdir()] == ["MNIST"]  # the staging folder is gone


def test_missing_file_in_explicit_data_dir_is_named(tmp_path, cache_dir, tiny, debian_dir):
    tiny.write(debian_dir, compress=True)  # available elsewhere, but an explicit data_dir is the only source
    data_dir = tiny.write(tmp_path / "idx", compress=True, skip=("t10k-labels-idx1-ubyte",))

    with pytest.raises(FileNotFoundError) as error:
        load_dataset("fashion-mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0)

    message = str(error.value)
    assert str(data_dir / "t10k-labels-idx1-ubyte") in message
    assert "train-images" not in message.split("missing")[1].split("(")[0]
    assert "no other source was tried" in message


def test_nonexistent_data_dir(tmp_path, cache_dir):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset("mnist", data_dir=tmp_path / "nowhere", cache_dir=cache_dir)


def test_nothing_found_lists_every_place_and_the_fixes(debian_dir, cache_dir):
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("fashion-mnist", cache_dir=cache_dir, download=False)

    message = str(error.value)
    assert "Fashion-MNIST was not found" in message
    assert "data_dir argument (--data-dir): not given" in message
    assert "$PYRO_BNN_DATA: not set" in message
    assert f"{debian_dir} (Debian package dataset-fashion-mnist): does not exist" in message
    assert str(cache_dir / "FashionMNIST" / "raw") in message
    assert "not tried because download=False" in message
    assert "sudo apt-get install dataset-fashion-mnist" in message
    assert "--data-dir" in message and "PYRO_BNN_DATA=DIR" in message
    assert "go online" in message


def test_failed_download_is_reported_with_its_error(cache_dir, tmp_path, monkeypatch, leftover_files):
    monkeypatch.setenv("PYRO_BNN_DATA", str(tmp_path / "missing-env-dir"))

    with pytest.raises(FileNotFoundError) as error:
        load_dataset("mnist", cache_dir=cache_dir, download=True)

    message = str(error.value)
    assert f"$PYRO_BNN_DATA={tmp_path / 'missing-env-dir'}: " in message
    assert "failed with NetworkDisabled: the data tests never use the network" in message
    assert "apt-get" not in message  # MNIST has no Debian package
    assert leftover_files(cache_dir) == []
    assert not (cache_dir / "MNIST" / "raw").exists()


def test_truncated_file_in_data_dir_is_a_value_error(tmp_path, cache_dir, tiny, leftover_files):
    data_dir = tiny.write(tmp_path / "idx", compress=True)
    path = data_dir / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-784]))

    with pytest.raises(ValueError) as error:
        load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0)

    message = str(error.value)
    assert str(path) in message and "truncated" in message
    assert f"{16 + 7 * 784} bytes" in message and f"found {16 + 6 * 784} bytes" in message
    assert not (cache_dir / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()
    assert leftover_files(tmp_path) == []


def test_wrong_magic_in_data_dir(tmp_path, cache_dir, tiny):
    data_dir = tiny.write(tmp_path / "idx", compress=False)
    # A labels file stored under the images' name.
    (data_dir / "t10k-images-idx3-ubyte").write_bytes((data_dir / "t10k-labels-idx1-ubyte").read_bytes())

    with pytest.raises(ValueError, match="magic number 2051 .* found 2049") as error:
        load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0)
    assert "t10k-images-idx3-ubyte" in str(error.value)


def test_image_label_count_mismatch(tmp_path, cache_dir, tiny, write_idx):
    data_dir = tiny.write(tmp_path / "idx", compress=True)
    write_idx(data_dir / "train-labels-idx1-ubyte", np.zeros(8, np.uint8), 2049, compress=True)

    with pytest.raises(ValueError) as error:
        load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0)

    message = str(error.value)
    assert "holds 7 images" in message and "holds 8 labels" in message
    assert "train-images-idx3-ubyte" in message and "train-labels-idx1-ubyte" in message


def test_label_out_of_range(tmp_path, cache_dir, tiny):
    tiny.train_labels[3] = 10
    data_dir = tiny.write(tmp_path / "idx", compress=True)

    with pytest.raises(ValueError, match=r"expected labels in 0..9, found values from 1 to 10"):
        load_dataset("mnist", data_dir=data_dir, cache_dir=cache_dir, val_size=0)


def test_corrupt_cache_file_says_it_is_a_cache_file(cache_dir, tiny):
    raw = tiny.write(cache_dir / "MNIST" / "raw", compress=False)
    (raw / "t10k-images-idx3-ubyte").write_bytes((raw / "t10k-images-idx3-ubyte").read_bytes()[:-5])

    with pytest.raises(ValueError, match="truncated.*this is a cache file: delete it"):
        load_dataset("mnist", cache_dir=cache_dir, val_size=0, download=False)


def test_cache_dir_resolution(tmp_path, monkeypatch):
    assert resolve_cache_dir(tmp_path / "explicit") == tmp_path / "explicit"
    assert resolve_cache_dir() == tmp_path / "default-cache"  # $PYRO_BNN_CACHE, set by the conftest
    monkeypatch.delenv("PYRO_BNN_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_cache_dir() == tmp_path / "home" / ".cache" / "pyro_bnn"


def test_debian_path_constant_is_the_package_location(monkeypatch):
    monkeypatch.undo()  # look at the module's own value, not the conftest's patch
    assert Path("/usr/share/datasets/fashion-mnist") == sources.DEBIAN_FASHION_MNIST_DIR
