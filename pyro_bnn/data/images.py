"""Official train and test parts of the image data sets as raw pixels: MNIST, Fashion-MNIST, sklearn digits.

Splitting off validation data and normalising happen later (``pyro_bnn.data.datasets``), the same way for all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from pyro_bnn.data.cache import torchvision_raw_dir
from pyro_bnn.data.partition import split_indices
from pyro_bnn.data.seeding import STREAM_TEST_HOLDOUT, seeded_generator
from pyro_bnn.data.sources import IdxDatasetSpec, locate_idx_dataset

MNIST_MEAN_STD = (0.1307, 0.3081)
"""Pixel mean and standard deviation of the MNIST training set on the [0, 1] scale (the usual constants)."""

FASHION_MNIST_MEAN_STD = (0.2860, 0.3530)
"""Pixel mean and standard deviation of the Fashion-MNIST training set on the [0, 1] scale."""

DIGITS_TEST_FRACTION = 0.2
"""Share of scikit-learn's 1797 digits held out as the test set (359 images), as it has no official one."""

DIGITS_TEST_SEED = 0
"""Fixed seed of the digits test split: independent of the user's seed, so that every run is evaluated on the
same images, as with MNIST's official test set; the user's seed varies only the train/validation split."""

DIGITS_MAX_VALUE = 16.0
"""Digits pixels are counts of set bits in 4x4 blocks of a 32x32 bitmap, 0..16."""


@dataclass(frozen=True, eq=False)
class RawImages:
    """An image data set's official training and test parts, before any split or normalisation.

    Attributes:
        train_x: ``(N, C, H, W)`` uint8 raw pixels of the official training set.
        train_y: ``(N,)`` int64 labels.
        test_x: ``(M, C, H, W)`` uint8 raw pixels of the test set.
        test_y: ``(M,)`` int64 labels.
        max_value: Brightest possible pixel value (255 or 16).
        num_classes: Number of classes.
        mean_std: Known pixel mean and std on the [0, 1] scale (numbers, or tuples with one per channel), or
            ``None`` to compute them from the training split.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    max_value: float
    num_classes: int
    mean_std: tuple[float, float] | tuple[tuple[float, ...], tuple[float, ...]] | None


def load_idx_images(
    spec: IdxDatasetSpec,
    mean_std: tuple[float, float],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> RawImages:
    """Loads MNIST or Fashion-MNIST with ``torchvision.datasets`` from where ``locate_idx_dataset`` finds it.

    Args:
        spec: ``sources.MNIST_SPEC`` or ``sources.FASHION_MNIST_SPEC``.
        mean_std: The data set's pixel mean and std on the [0, 1] scale.
        data_dir: Explicit data folder (see ``locate_idx_dataset``).
        cache_dir: Cache folder (see ``pyro_bnn.data.cache.resolve_cache_dir``).
        download: Whether torchvision may download the data as a last resort.

    Returns:
        The official parts: 60 000 training and 10 000 test images of ``(1, 28, 28)`` for the real data sets.

    Raises:
        FileNotFoundError: If the data set cannot be found (see ``locate_idx_dataset``).
        ValueError: If a file is not valid IDX, counts disagree, or a label lies outside ``0 .. 9``.
    """
    import torchvision.datasets

    root = locate_idx_dataset(spec, data_dir=data_dir, cache_dir=cache_dir, download=download)
    dataset_class = getattr(torchvision.datasets, spec.folder)
    parts = []
    for train, prefix in ((True, "train"), (False, "t10k")):
        dataset = dataset_class(root=str(root), train=train, download=False)
        labels = dataset.targets.to(torch.int64)
        if len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < spec.num_classes:
            labels_path = torchvision_raw_dir(root, spec.folder) / f"{prefix}-labels-idx1-ubyte"
            raise ValueError(
                f"{labels_path}: expected labels in 0..{spec.num_classes - 1}, found values from "
                f"{int(labels.min())} to {int(labels.max())}"
            )
        parts.append((dataset.data.unsqueeze(1), labels))
    (train_x, train_y), (test_x, test_y) = parts
    return RawImages(train_x, train_y, test_x, test_y, 255.0, spec.num_classes, mean_std)


def load_digits_images() -> RawImages:
    """scikit-learn's bundled 8x8 digits (no download), split into a fixed training and test part.

    Returns:
        1438 training and 359 test images of ``(1, 8, 8)``, pixel values 0..16, ten classes. The test part is
        a fixed 20 % (``DIGITS_TEST_FRACTION``, ``DIGITS_TEST_SEED``).
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    # The pixel values are small integers stored as float64; uint8 holds them exactly, like MNIST's.
    images = torch.from_numpy(bunch.images).to(torch.uint8).unsqueeze(1)
    labels = torch.from_numpy(bunch.target).to(torch.int64)
    n = len(labels)
    train, test = split_indices(
        n, round(DIGITS_TEST_FRACTION * n), seeded_generator(DIGITS_TEST_SEED, STREAM_TEST_HOLDOUT)
    )
    return RawImages(images[train], labels[train], images[test], labels[test], DIGITS_MAX_VALUE, 10, None)
