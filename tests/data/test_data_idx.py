"""IDX parsing and validation (``pyro_bnn.data.idx``) on hand-written files."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

from pyro_bnn.data import load_dataset
from pyro_bnn.data.idx import IdxHeader, IdxKind, copy_idx, scan_idx, validate_idx
from pyro_bnn.data.idx_layout import MNIST_SPEC, _check_facts

IMAGES = 2051
LABELS = 2049


@pytest.fixture
def images() -> np.ndarray:
    return np.arange(5 * 28 * 28, dtype=np.int64).reshape(5, 28, 28).astype(np.uint8)


@pytest.mark.parametrize("compress", [False, True])
def test_validate_accepts_a_well_formed_file(tmp_path, write_idx, images, compress):
    path = write_idx(tmp_path / "train-images-idx3-ubyte", images, IMAGES, compress=compress)

    header = validate_idx(path, IdxKind.IMAGES, (28, 28))

    assert header == IdxHeader(IdxKind.IMAGES, (5, 28, 28))
    assert header.count == 5
    assert header.total_bytes == 16 + 5 * 28 * 28


def test_header_bytes_round_trip():
    header = IdxHeader(IdxKind.LABELS, (60000,))
    assert header.to_bytes() == bytes([0, 0, 8, 1, 0, 0, 0xEA, 0x60])
    assert IdxKind.IMAGES.ndim == 3 and IdxKind.LABELS.ndim == 1


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_file_names_file_expected_and_found_lengths(tmp_path, write_idx, images, compress):
    path = tmp_path / "train-images-idx3-ubyte"
    full = write_idx(path, images, IMAGES, compress=False).read_bytes()
    cut = full[:-100]
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(cut))
    else:
        path.write_bytes(cut)

    with pytest.raises(ValueError) as error:
        validate_idx(path, IdxKind.IMAGES, (28, 28))

    message = str(error.value)
    assert str(path) in message
    assert "truncated" in message
    assert f"{len(full)} bytes" in message  # expected
    assert f"found {len(cut)} bytes" in message


def test_trailing_bytes_are_rejected(tmp_path, write_idx, images):
    path = write_idx(tmp_path / "x-idx3-ubyte", images, IMAGES)
    path.write_bytes(path.read_bytes() + b"\0\0\0")
    with pytest.raises(ValueError, match="trailing bytes"):
        validate_idx(path, IdxKind.IMAGES)


def test_cut_gzip_stream_is_reported_as_unreadable(tmp_path, write_idx, images):
    path = write_idx(tmp_path / "train-images-idx3-ubyte", images, IMAGES, compress=True)
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(ValueError, match="not a readable gzip file") as error:
        validate_idx(path, IdxKind.IMAGES)
    assert str(path) in str(error.value)


def test_labels_file_passed_as_images_names_both_magic_numbers(tmp_path, write_idx):
    path = write_idx(tmp_path / "labels", np.arange(5, dtype=np.uint8), LABELS)
    with pytest.raises(ValueError) as error:
        validate_idx(path, IdxKind.IMAGES)
    message = str(error.value)
    assert str(path) in message
    assert "expected the IDX magic number 2051 (images file), found 2049 (labels)" in message


def test_unknown_magic_number(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes((1234).to_bytes(4, "big") + bytes(20))
    with pytest.raises(ValueError, match="expected the IDX magic number 2049 .*found 1234"):
        validate_idx(path, IdxKind.LABELS)


def test_file_shorter_than_a_header(tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"\0\0\x08")
    with pytest.raises(ValueError, match="truncated IDX file: expected a 4-byte magic number, found only 3"):
        validate_idx(path, IdxKind.LABELS)


def test_wrong_image_dimensions(tmp_path, write_idx):
    path = write_idx(tmp_path / "images", np.zeros((2, 27, 28), np.uint8), IMAGES)
    with pytest.raises(ValueError, match=r"expected images of shape \(N, 28, 28\), found shape \(2, 27, 28\)"):
        validate_idx(path, IdxKind.IMAGES, (28, 28))


def test_copy_decompresses_exactly_and_leaves_no_temporary_file(tmp_path, write_idx, images, leftover_files):
    source = write_idx(tmp_path / "src" / "train-images-idx3-ubyte", images, IMAGES, compress=True)
    destination = tmp_path / "cache" / "MNIST" / "raw" / "train-images-idx3-ubyte"

    header = copy_idx(source, destination, IdxKind.IMAGES, (28, 28))

    assert destination.read_bytes() == gzip.decompress(source.read_bytes())
    assert header.shape == (5, 28, 28)
    assert [p.name for p in destination.parent.iterdir()] == [destination.name]
    assert leftover_files(tmp_path) == []


def test_failed_copy_writes_nothing_under_the_final_name(tmp_path, write_idx, images, leftover_files):
    source = write_idx(tmp_path / "src" / "train-images-idx3-ubyte", images, IMAGES)
    source.write_bytes(source.read_bytes()[:-1])
    destination = tmp_path / "cache" / "train-images-idx3-ubyte"

    with pytest.raises(ValueError, match="truncated"):
        copy_idx(source, destination, IdxKind.IMAGES)

    assert not destination.exists()
    assert list(destination.parent.iterdir()) == []
    assert leftover_files(tmp_path) == []


@pytest.mark.parametrize("compress", [False, True])
def test_scan_hashes_the_decompressed_file_and_copies_it_in_one_pass(tmp_path, write_idx, images, compress):
    path = write_idx(tmp_path / "train-images-idx3-ubyte", images, IMAGES, compress=compress)
    content = gzip.decompress(path.read_bytes()) if compress else path.read_bytes()
    copy = tmp_path / "copy"

    with open(copy, "wb") as sink:
        facts = scan_idx(path, IdxKind.IMAGES, (28, 28), sink)

    assert facts.md5 == hashlib.md5(content).hexdigest()  # the same whatever the gzip bytes
    assert facts.header == IdxHeader(IdxKind.IMAGES, (5, 28, 28))
    assert facts.value_range is None
    assert copy.read_bytes() == content


def test_scan_reports_the_range_of_label_values(tmp_path, write_idx):
    path = write_idx(tmp_path / "labels", np.array([3, 7, 2, 9], np.uint8), LABELS, compress=True)
    assert scan_idx(path, IdxKind.LABELS).value_range == (2, 9)
    empty = write_idx(tmp_path / "empty", np.zeros(0, np.uint8), LABELS)
    assert scan_idx(empty, IdxKind.LABELS).value_range is None


@pytest.mark.parametrize("kind, shape, noun", [(IdxKind.IMAGES, (0, 28, 28), "image"), (IdxKind.LABELS, (0,), "label")])
def test_a_data_set_file_of_no_examples_is_refused_in_one_line(tmp_path, write_idx, kind, shape, noun):
    """An empty IDX file is well formed (scan_idx reads it), but no file of a data set may be empty: checked on the
    facts, so that facts a stamp remembers from before the check are refused too."""
    path = write_idx(tmp_path / "t10k", np.zeros(shape, np.uint8), int(kind), compress=True)
    facts = scan_idx(path, kind)
    assert facts.header.count == 0
    with pytest.raises(ValueError) as error:
        _check_facts(MNIST_SPEC, path, kind, facts)
    assert str(error.value) == f"{path}: expected at least one {noun}, found 0"


@pytest.mark.filterwarnings("ignore::pyro_bnn.data.DataContentWarning")
def test_a_data_set_whose_test_files_are_empty_is_refused_naming_the_file(tmp_path, make_tiny):
    folder = make_tiny(n_train=5, n_test=0).write(tmp_path / "mnist", compress=False)
    with pytest.raises(ValueError) as error:
        load_dataset("mnist", data_dir=folder, download=False)
    assert str(error.value) == f"{folder / 't10k-images-idx3-ubyte'}: expected at least one image, found 0"
