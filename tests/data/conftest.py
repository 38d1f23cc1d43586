"""Fixtures for the data tests: letting a tiny fake play a published data set, and snapshots of the cache."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from pyro_bnn.data import fingerprints


@pytest.fixture
def publish(monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, str]]:
    """``publish(title, fake)`` lists ``fake``'s files in the MD5 table as the published data set ``title``
    (``"MNIST"`` or ``"Fashion-MNIST"``) for the rest of the test; returns the digests."""

    def make(title: str, fake) -> dict[str, str]:
        digests = {name: hashlib.md5(content).hexdigest() for name, content in fake.contents().items()}
        monkeypatch.setitem(fingerprints.PUBLISHED_IDX_MD5, title, digests)
        return digests

    return make


@pytest.fixture
def snapshot() -> Callable[[Path], dict[str, bytes]]:
    """``snapshot(folder)``: every file under ``folder`` (relative path -> bytes), ``{}`` if it does not exist."""

    def take(folder: Path) -> dict[str, bytes]:
        if not folder.exists():
            return {}
        return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}

    return take


@pytest.fixture
def entry_raw_dir() -> Callable[[Path, str], Path]:
    """``entry_raw_dir(cache, folder)``: the one raw folder of torchvision class ``folder`` anywhere in the cache
    (the published entry or a content-keyed one)."""

    def find(cache: Path, folder: str) -> Path:
        found = sorted(path for path in cache.rglob(f"{folder}/raw") if path.is_dir())
        assert len(found) == 1, f"expected one {folder}/raw under {cache}, found {found}"
        return found[0]

    return find
