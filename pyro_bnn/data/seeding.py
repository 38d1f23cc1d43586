"""Independent random streams derived from one user seed, kept apart from every global RNG.

A split, a shuffle order and a noise draw each get their own ``torch.Generator`` seeded from ``(seed,
*stream)`` through NumPy's ``SeedSequence``. Mixing the tuple (rather than adding ``seed + epoch``) keeps
``(seed=0, epoch=1)`` and ``(seed=1, epoch=0)`` apart, and a generator private to each use means that neither
a model's initialisation nor another split changes the draw: a resumed run sees the same data.
"""

from __future__ import annotations

import numpy as np
import torch

from pyro_bnn.checks import non_negative_int

# Stream labels: fixed, so that a given seed keeps meaning the same split across releases.
STREAM_TEST_HOLDOUT = 1
STREAM_VAL_SPLIT = 2
STREAM_SHUFFLE = 3
STREAM_SYNTHETIC = 4
STREAM_TEST_SUBSET = 5


def check_seed(seed: int, *, name: str = "seed") -> int:
    """Validates a user seed.

    Args:
        seed: The seed to check.
        name: What the caller calls it, for the error message.

    Returns:
        ``seed`` as a Python ``int``.

    Raises:
        ValueError: If ``seed`` is not a non-negative integer (``SeedSequence`` takes only those).
    """
    if type(seed) is int and seed >= 0:  # the common case, without the slower ABC check below
        return seed
    return non_negative_int(seed, name)


def derived_seed(seed: int, *stream: int, bits: int = 64) -> int:
    """A seed for one stream, drawn from ``(seed, *stream)``.

    Args:
        seed: The user's seed (non-negative integer).
        *stream: Non-negative integers naming the stream, e.g. ``(STREAM_SHUFFLE, epoch)``.
        bits: 64 for ``torch.Generator``, 32 for scikit-learn's ``random_state``.

    Returns:
        A non-negative ``int`` below ``2**bits``.

    Raises:
        ValueError: If ``seed`` or a stream entry is not a non-negative integer, or ``bits`` is not 32 or 64.
    """
    entropy = [check_seed(seed)] + [check_seed(s, name="stream") for s in stream]
    if bits not in (32, 64):
        raise ValueError(f"bits must be 32 or 64, got {bits!r}")
    dtype = np.uint64 if bits == 64 else np.uint32
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=dtype)[0])


def seeded_generator(seed: int, *stream: int) -> torch.Generator:
    """A fresh CPU ``torch.Generator`` for the stream ``(seed, *stream)``.

    Args:
        seed: The user's seed (non-negative integer).
        *stream: Non-negative integers naming the stream.

    Returns:
        A ``torch.Generator`` on the CPU, independent of ``torch``'s global RNG.
    """
    return torch.Generator().manual_seed(derived_seed(seed, *stream))
