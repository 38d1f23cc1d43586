"""CIFAR-10 and CIFAR-100 through torchvision: 32x32 colour images, 50 000 training and 10 000 test images.

torchvision reads its own folder layout (``cifar-10-batches-py`` / ``cifar-100-python`` under a root) and downloads
it when allowed. The root is ``data_dir`` when given (then nothing is downloaded: the folder must hold the data),
else ``<cache>/torchvision`` (``$PYRO_BNN_CACHE`` or ``~/.cache/pyro_bnn``), where an online user's first load
downloads the archive (about 170 MB each). torchvision checks the files' MD5 sums before it reads them.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from pyro_bnn.data.cache import resolve_cache_dir
from pyro_bnn.data.images import RawImages

CIFAR_CLASSES = {"cifar10": 10, "cifar100": 100}
"""Data set name -> classes."""

CIFAR_IMAGE_SHAPE = (3, 32, 32)

CIFAR_MEAN_STD = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
"""Per-channel (R, G, B) pixel mean and standard deviation of the training images on the [0, 1] scale: the
published constants that ``normalization="standard"`` uses, so a run's inputs do not depend on its split."""


def _dataset_class(name: str):
    from torchvision import datasets

    return datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100


def cifar_root(data_dir: str | os.PathLike[str] | None, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The torchvision root CIFAR is read from: ``data_dir``, else ``<cache>/torchvision``."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    return resolve_cache_dir(cache_dir) / "torchvision"


def load_cifar_images(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> RawImages:
    """CIFAR-10 (``"cifar10"``) or CIFAR-100 (``"cifar100"``, the 100 fine labels) as raw uint8 images.

    Args:
        name: ``"cifar10"`` or ``"cifar100"``.
        data_dir: A torchvision root that holds the data; when given, nothing is downloaded.
        cache_dir: The cache whose ``torchvision`` folder is the root otherwise.
        download: Whether torchvision may download into the cache's root when the data is not there.

    Returns:
        ``train_x (50000, 3, 32, 32)`` and ``test_x (10000, 3, 32, 32)`` uint8, int64 labels, ``max_value`` 255.

    Raises:
        ValueError: ``name`` is not a CIFAR set.
        FileNotFoundError: the data is not in the root and may not or could not be downloaded (one line naming the
            root and the fixes).
    """
    if name not in CIFAR_CLASSES:
        raise ValueError(f"unknown CIFAR set {name!r}; expected one of {', '.join(CIFAR_CLASSES)}")
    root = cifar_root(data_dir, cache_dir)
    fetch = download and data_dir is None
    cls = _dataset_class(name)
    try:
        parts = [cls(str(root), train=train, download=fetch) for train in (True, False)]
    except (RuntimeError, OSError) as err:  # torchvision: "Dataset not found or corrupted"; offline: URLError
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        folder = "cifar-10-batches-py" if name == "cifar10" else "cifar-100-python"
        if data_dir is not None:
            fixes = f"put torchvision's {folder}/ in it, or name no data folder to use the cache (downloaded online)"
        elif fetch:
            fixes = (
                f"go online once (the download goes to {root}), or pass a torchvision root holding {folder}/ "
                f"(train/ensemble: --data-dir ROOT; reproduce/evaluate: --data-dir {name}=ROOT)"
            )
        else:
            fixes = f"allow the download (download=True), or pass a torchvision root holding {folder}/ as data_dir"
        raise FileNotFoundError(f"{name} is not in {root} ({first}); {fixes}") from None
    (train_x, train_y), (test_x, test_y) = (
        (torch.from_numpy(part.data).permute(0, 3, 1, 2).contiguous(), torch.as_tensor(part.targets, dtype=torch.int64))
        for part in parts
    )
    return RawImages(train_x, train_y, test_x, test_y, 255.0, CIFAR_CLASSES[name], CIFAR_MEAN_STD[name])


__all__ = ["CIFAR_CLASSES", "CIFAR_IMAGE_SHAPE", "CIFAR_MEAN_STD", "cifar_root", "load_cifar_images"]
