"""The published MNIST-style data sets, known by the MD5 of their decompressed IDX files.

Digests are taken of the *decompressed* files because the gzip bytes differ between distributions of the same
data: Debian's ``dataset-fashion-mnist`` ``.gz`` files, for one, do not match the MD5s torchvision publishes for
its downloads, while the IDX bytes inside are identical. The cache serves a load that names no folder only from
files whose digests are listed here, so a folder of other content can be loaded when named but never becomes what
a plain ``load_dataset("mnist")`` returns.

Tests swap in tiny fixtures with ``monkeypatch.setitem(PUBLISHED_IDX_MD5, "MNIST", {...})``; the table is read at
call time.
"""

from __future__ import annotations

from collections.abc import Mapping

PUBLISHED_IDX_MD5: dict[str, dict[str, str]] = {
    "MNIST": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    },
    "Fashion-MNIST": {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    },
}
"""MD5 (hex) of each decompressed IDX file of each published data set, keyed by the data set's title (as in
``IdxDatasetSpec.title``) and then by the standard file name. Checked against Debian's Fashion-MNIST package and an
MNIST copy whose gzip files carry their own SHA-256 sums."""


def identify(digests: Mapping[str, str]) -> str | None:
    """The published data set whose every file has these digests.

    Args:
        digests: MD5 of each decompressed file, keyed by standard file name.

    Returns:
        The data set's title (a key of ``PUBLISHED_IDX_MD5``), or ``None`` if no set matches in full.
    """
    for title, published in PUBLISHED_IDX_MD5.items():
        if published and all(digests.get(name) == md5 for name, md5 in published.items()):
            return title
    return None


def is_published(title: str, digests: Mapping[str, str]) -> bool:
    """Whether ``digests`` are exactly those of the published data set ``title``."""
    published = PUBLISHED_IDX_MD5.get(title)
    return bool(published) and all(digests.get(name) == md5 for name, md5 in published.items())


def describe_content(title: str, digests: Mapping[str, str]) -> str:
    """What a set of files holds, relative to the data set ``title`` that was asked for, for messages.

    Args:
        title: The data set asked for, e.g. ``"MNIST"``.
        digests: MD5 of each decompressed file, keyed by standard file name.

    Returns:
        ``"the published MNIST"``, ``"Fashion-MNIST, not MNIST"``, or ``"unknown IDX content, not the published
        MNIST"`` (followed by the names of the files that differ when only some do).
    """
    if is_published(title, digests):
        return f"the published {title}"
    other = identify(digests)
    if other is not None:
        return f"{other}, not {title}"
    text = f"unknown IDX content, not the published {title}"
    published = PUBLISHED_IDX_MD5.get(title, {})
    differing = [name for name, md5 in published.items() if digests.get(name) != md5]
    if published and len(differing) < len(published):
        text += f" ({', '.join(differing)} {'differs' if len(differing) == 1 else 'differ'})"
    return text
