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


MAX_SEED = 2**32 - 1
"""The largest seed every seeding path takes: ``pyro.set_rng_seed`` (which a run calls with its seed) also seeds
NumPy's legacy global generator, which refuses seeds above ``2**32 - 1`` ("Seed must be between 0 and 2**32 - 1");
``torch.manual_seed`` stops at ``2**64 - 1`` and ``SeedSequence`` has no bound. Checked up front, so that a larger
seed is one line rather than a traceback after the data has loaded."""


def check_seed(seed: int, *, name: str = "seed") -> int:
    """Validates a user seed.

    Args:
        seed: The seed to check.
        name: What the caller calls it, for the error message.

    Returns:
        ``seed`` as a Python ``int``.

    Raises:
        ValueError: If ``seed`` is not an integer in ``[0, MAX_SEED]`` (``SeedSequence`` takes no negative one,
            ``pyro.set_rng_seed`` none above :data:`MAX_SEED`).
    """
    if type(seed) is int and 0 <= seed <= MAX_SEED:  # the common case, without the slower ABC check below
        return seed
    value = non_negative_int(seed, name)
    if value > MAX_SEED:
        raise ValueError(f"{name} must be an int in [0, 2**32 - 1 = {MAX_SEED}] (the seeds Pyro takes), got {value}")
    return value


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
