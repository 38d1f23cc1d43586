"""The cache cannot be poisoned: what a load naming no folder returns is only ever the published data set.

Tiny fakes play the published sets through the ``publish`` fixture (the MD5 table is swapped for the test); a fake
not published is "unknown content". No test reads the real data sets or the network.
"""

from __future__ import annotations

import gzip
import hashlib
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets

from pyro_bnn.data import DataContentWarning, idx_reading, load_dataset, sources
from pyro_bnn.data import cache as cache_module
from pyro_bnn.data.fingerprints import PUBLISHED_IDX_MD5, describe_content, identify

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def train_pixels(splits) -> torch.Tensor:
    return (splits.train.x * 255).round().to(torch.uint8).squeeze(1)


def is_loaded(splits, fake) -> bool:
    return torch.equal(train_pixels(splits), torch.from_numpy(fake.train_images)) and torch.equal(
        splits.test.y, torch.from_numpy(fake.test_labels).long()
    )


def load(name="mnist", **kwargs):
    return load_dataset(name, val_size=0, download=False, **kwargs)


def load_quietly(name="mnist", **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataContentWarning)  # a published set loads without a warning
        return load(name, **kwargs)


# ---- the two poisoning cases -----------------------------------------------------------------------


def test_named_folder_of_another_known_set_never_becomes_the_plain_load(tmp_path, make_tiny, publish):
    mnist, fashion = make_tiny(seed=1), make_tiny(seed=2)
    publish("MNIST", mnist)
    publish("Fashion-MNIST", fashion)
    mnist_dir, fashion_dir = mnist.write(tmp_path / "mnist"), fashion.write(tmp_path / "fashion")
    assert is_loaded(load_quietly(data_dir=mnist_dir), mnist)  # the published MNIST enters the cache

    with pytest.warns(DataContentWarning) as record:
        named = load(data_dir=fashion_dir)

    assert is_loaded(named, fashion)  # the user named it, so it is what they get
    assert len(record) == 1
    assert str(record[0].message).startswith(f"{fashion_dir} holds Fashion-MNIST, not MNIST: loaded because")
    assert is_loaded(load_quietly(), mnist)  # but a plain load still returns the published MNIST


def test_named_folder_of_unknown_content_is_not_served_without_data_dir(tmp_path, tiny, cache_dir):
    data_dir = tiny.write(tmp_path / "fixture")
    with pytest.warns(DataContentWarning, match="holds unknown IDX content, not the published MNIST"):
        assert is_loaded(load(data_dir=data_dir, cache_dir=cache_dir), tiny)

    assert not (cache_dir / "MNIST").exists()  # the entry plain loads read was not created
    with pytest.raises(FileNotFoundError, match="MNIST was not found"):
        load(cache_dir=cache_dir)


def _truncate_images(folder, fake, write_idx):
    path = folder / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-784]))
    return path, "truncated", "expected"


def _labels_as_images(folder, fake, write_idx):
    path = folder / "t10k-images-idx3-ubyte.gz"
    path.write_bytes((folder / "t10k-labels-idx1-ubyte.gz").read_bytes())
    return path, "magic number 2051 (images file), found 2049 (labels)", "expected"


def _cut_gzip_stream(folder, fake, write_idx):
    path = folder / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-12])
    return path, "not a readable gzip file", "expected a complete gzip stream"


def _one_label_too_many(folder, fake, write_idx):
    path = write_idx(
        folder / "train-labels-idx1-ubyte", np.zeros(len(fake.train_labels) + 1, np.uint8), 2049, compress=True
    )
    return path, "holds 8 labels", "expected one label per image"


def _label_out_of_range(folder, fake, write_idx):
    labels = fake.test_labels.copy()
    labels[0] = 12
    path = write_idx(folder / "t10k-labels-idx1-ubyte", labels, 2049, compress=True)
    return path, "expected labels in 0..9, found values from", "12"


@pytest.mark.parametrize(
    "damage", [_truncate_images, _labels_as_images, _cut_gzip_stream, _one_label_too_many, _label_out_of_range]
)
def test_folder_with_one_bad_file_leaves_the_cache_untouched(
    tmp_path, make_tiny, publish, snapshot, write_idx, leftover_files, damage
):
    published, other = make_tiny(seed=1), make_tiny(seed=2)
    publish("MNIST", published)
    load_quietly(data_dir=published.write(tmp_path / "published"))
    cache = tmp_path / "default-cache"
    before = snapshot(cache)
    # Three good files of other content and one bad one: none of the four may enter the cache.
    folder = other.write(tmp_path / "mixed")
    bad_file, problem, expected = damage(folder, other, write_idx)

    with pytest.raises(ValueError) as error:
        load(data_dir=folder)

    message = str(error.value)
    assert "\n" not in message  # one line
    assert str(bad_file) in message  # the user's file, not a cache copy
    assert str(cache) not in message
    assert problem in message and expected in message
    assert snapshot(cache) == before
    assert leftover_files(tmp_path) == [] and not list(cache.glob(".staging-*"))
    assert is_loaded(load_quietly(), published)


def test_folder_of_valid_files_with_one_bad_file_then_fixed_loads(tmp_path, tiny, write_idx):
    folder = tiny.write(tmp_path / "idx")
    _label_out_of_range(folder, tiny, write_idx)
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz: expected labels in 0..9"):
        load(data_dir=folder)

    tiny.write(folder)  # repaired
    with pytest.warns(DataContentWarning):
        assert is_loaded(load(data_dir=folder), tiny)


# ---- recognising the published sets ---------------------------------------------------------------


def test_the_table_lists_the_published_digests_of_both_sets():
    assert set(PUBLISHED_IDX_MD5) == {"MNIST", "Fashion-MNIST"}
    for title, digests in PUBLISHED_IDX_MD5.items():
        assert sorted(digests) == sorted(IDX_NAMES)
        assert all(len(md5) == 32 and int(md5, 16) >= 0 for md5 in digests.values())
        assert identify(digests) == title
    assert PUBLISHED_IDX_MD5["MNIST"]["train-images-idx3-ubyte"] == "6bbc9ace898e44ae57da46a324031adb"
    assert PUBLISHED_IDX_MD5["Fashion-MNIST"]["train-images-idx3-ubyte"] == "f4a8712d7a061bf5bd6d2ca38dc4d50a"


def test_describe_content(make_tiny, publish):
    mnist = publish("MNIST", make_tiny(seed=1))
    fashion = publish("Fashion-MNIST", make_tiny(seed=2))
    unknown = {name: hashlib.md5(name.encode()).hexdigest() for name in IDX_NAMES}

    assert describe_content("MNIST", mnist) == "the published MNIST"
    assert describe_content("MNIST", fashion) == "Fashion-MNIST, not MNIST"
    assert describe_content("Fashion-MNIST", mnist) == "MNIST, not Fashion-MNIST"
    assert describe_content("MNIST", unknown) == "unknown IDX content, not the published MNIST"
    one_changed = {**mnist, "train-labels-idx1-ubyte": unknown["train-labels-idx1-ubyte"]}
    assert describe_content("MNIST", one_changed) == (
        "unknown IDX content, not the published MNIST (train-labels-idx1-ubyte differs)"
    )
    two_changed = {**one_changed, "t10k-images-idx3-ubyte": fashion["t10k-images-idx3-ubyte"]}
    assert describe_content("MNIST", two_changed).endswith("(train-labels-idx1-ubyte, t10k-images-idx3-ubyte differ)")


def test_published_set_recognised_by_decompressed_content_whatever_the_gzip_bytes(tmp_path, tiny, publish):
    publish("MNIST", tiny)
    folder = tiny.write(tmp_path / "idx")
    for name, content in tiny.contents().items():  # other gzip bytes, same IDX content
        (folder / f"{name}.gz").write_bytes(gzip.compress(content, compresslevel=1, mtime=12345))
    assert is_loaded(load_quietly(data_dir=folder), tiny)
    assert is_loaded(load_quietly(), tiny)


def test_a_modified_file_is_named_in_the_warning(tmp_path, make_tiny, publish, write_idx):
    published = make_tiny(seed=1)
    publish("MNIST", published)
    load_quietly(data_dir=published.write(tmp_path / "published"))
    folder = published.write(tmp_path / "relabelled")
    write_idx(folder / "train-labels-idx1-ubyte", (published.train_labels + 1) % 10, 2049, compress=True)

    with pytest.warns(DataContentWarning) as record:
        load(data_dir=folder)

    assert str(record[0].message) == (
        f"{folder} holds unknown IDX content, not the published MNIST (train-labels-idx1-ubyte differs): "
        f"loaded because data_dir names it; a load that names no folder returns only the published MNIST"
    )
    assert record[0].filename == __file__  # it points at the load_dataset call
    assert is_loaded(load_quietly(), published)


def test_identical_content_in_two_folders_shares_one_entry(tmp_path, tiny, cache_dir):
    with pytest.warns(DataContentWarning):
        load(data_dir=tiny.write(tmp_path / "a"), cache_dir=cache_dir)
        load(data_dir=tiny.write(tmp_path / "b", compress=False), cache_dir=cache_dir)
        load("fashion-mnist", data_dir=tmp_path / "a", cache_dir=cache_dir)

    entries = list((cache_dir / cache_module.CONTENT_DIR).iterdir())
    assert len(entries) == 1
    assert sorted(path.name for path in entries[0].iterdir()) == ["FashionMNIST", "MNIST"]


# ---- the other sources -----------------------------------------------------------------------------


def test_debian_path_with_other_content_is_a_miss(tiny, debian_dir, cache_dir):
    tiny.write(debian_dir)

    with pytest.raises(FileNotFoundError) as error:
        load("fashion-mnist", cache_dir=cache_dir)

    assert f"{debian_dir} (Debian package dataset-fashion-mnist): holds unknown IDX content, not the published " in (
        str(error.value)
    )
    assert not (cache_dir / "FashionMNIST").exists()
    assert not (cache_dir / cache_module.CONTENT_DIR).exists()


def test_environment_folder_of_another_known_set_is_a_miss(tmp_path, make_tiny, publish, monkeypatch, cache_dir):
    fashion = make_tiny(seed=2)
    publish("Fashion-MNIST", fashion)
    monkeypatch.setenv("PYRO_BNN_DATA", str(fashion.write(tmp_path / "env")))

    with pytest.raises(FileNotFoundError) as error:
        load(cache_dir=cache_dir)

    assert f"$PYRO_BNN_DATA={tmp_path / 'env'}: holds Fashion-MNIST, not MNIST" in str(error.value)
    assert is_loaded(load_quietly("fashion-mnist", cache_dir=cache_dir), fashion)  # what it is there for


def test_environment_folder_of_unknown_content_is_used_with_a_warning(tmp_path, tiny, monkeypatch, cache_dir):
    monkeypatch.setenv("PYRO_BNN_DATA", str(tiny.write(tmp_path / "env")))
    with pytest.warns(DataContentWarning, match=r"unknown IDX content.*because \$PYRO_BNN_DATA names it"):
        assert is_loaded(load(cache_dir=cache_dir), tiny)
    monkeypatch.delenv("PYRO_BNN_DATA")
    with pytest.raises(FileNotFoundError):
        load(cache_dir=cache_dir)


def test_poisoned_cache_from_an_older_version_is_never_served(tiny, make_tiny, publish, cache_dir, monkeypatch):
    # What the old code left after load_dataset("mnist", data_dir=<a fixture>): the fixture in the plain entry.
    raw = tiny.write(cache_dir / "MNIST" / "raw", compress=False)
    (raw / ".train-images-idx3-ubyte.source").write_text("{}")

    with pytest.raises(FileNotFoundError) as error:
        load(cache_dir=cache_dir)
    assert f"{raw} holds unknown IDX content, not the published MNIST, so it is not used" in str(error.value)

    published = make_tiny(seed=3)
    publish("MNIST", published)

    def fake_download(self):  # what torchvision's download leaves behind: the uncompressed raw files
        published.write(Path(self.raw_folder), compress=False)

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", fake_download)
    splits = load_dataset("mnist", cache_dir=cache_dir, val_size=0, download=True)

    assert is_loaded(splits, published)  # the download replaced the poisoned files
    assert (raw / "train-images-idx3-ubyte").read_bytes() == published.contents()["train-images-idx3-ubyte"]
    assert not (raw / ".train-images-idx3-ubyte.source").exists()


def test_download_of_other_content_does_not_enter_the_cache(tiny, cache_dir, monkeypatch, leftover_files):
    def fake_download(self):
        tiny.write(Path(self.raw_folder), compress=False)

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", fake_download)
    with pytest.raises(FileNotFoundError, match="failed with ValueError: the download in .* holds unknown IDX"):
        load_dataset("mnist", cache_dir=cache_dir, val_size=0, download=True)
    assert not (cache_dir / "MNIST").exists()
    assert leftover_files(cache_dir) == []


# ---- reloading stays cheap -------------------------------------------------------------------------


def test_plain_loads_read_the_files_once(tiny, publish, debian_dir, cache_dir, monkeypatch):
    publish("Fashion-MNIST", tiny)
    tiny.write(debian_dir)
    assert is_loaded(load_quietly("fashion-mnist", cache_dir=cache_dir), tiny)  # converted from the Debian path

    def no_read(*args, **kwargs):
        raise AssertionError("no file should be decompressed or hashed again: the stamps hold")

    monkeypatch.setattr(cache_module, "scan_idx", no_read)
    monkeypatch.setattr(idx_reading, "scan_idx", no_read)
    assert is_loaded(load_quietly("fashion-mnist", cache_dir=cache_dir), tiny)  # Debian path, remembered
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST_DIR", debian_dir.parent / "gone")
    assert is_loaded(load_quietly("fashion-mnist", cache_dir=cache_dir), tiny)  # the cache, stamped


def test_a_changed_cache_file_is_read_again(tiny, make_tiny, publish, tmp_path, cache_dir):
    publish("MNIST", tiny)
    load_quietly(data_dir=tiny.write(tmp_path / "idx"), cache_dir=cache_dir)
    cached = cache_dir / "MNIST" / "raw" / "train-images-idx3-ubyte"
    # Same size, other pixels: the stamp no longer matches, so the digest is taken again and the file refused.
    cached.write_bytes(make_tiny(seed=9).contents()["train-images-idx3-ubyte"])

    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte differs"):
        load(cache_dir=cache_dir)
