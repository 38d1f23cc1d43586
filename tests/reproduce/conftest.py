"""Fixtures of the reproduction tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def tiny_image_sets(tmp_path, make_tiny):
    """MNIST and Fashion-MNIST stand-ins with 1 600 training and 1 000 test images: the quick profiles'
    sizes of ``bayes-by-backprop`` and ``bbb-fashion``, and more than ``implicit-bnn``'s."""
    return {
        name: str(make_tiny(1_600, 1_000, seed=seed).write(tmp_path / name))
        for seed, name in enumerate(("mnist", "fashion-mnist"))
    }
