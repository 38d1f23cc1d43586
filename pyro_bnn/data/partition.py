"""Seeded index partitions: a held-out test or validation part, and a random training subset.

Every draw uses a private generator seeded from ``(seed, stream)`` (``pyro_bnn.data.seeding``), so a split
never depends on, or disturbs, the global RNG. Returned indices are sorted, keeping examples in their original
order within each part.
"""

from __future__ import annotations

import numbers

import torch

from pyro_bnn.data.seeding import STREAM_TEST_SUBSET, STREAM_VAL_SPLIT, seeded_generator


def holdout_count(size: float | None, available: int, *, default: float, name: str = "val_size") -> int:
    """How many of ``available`` examples to hold out.

    Args:
        size: An ``int`` count in ``[0, available)``, a ``float`` fraction in ``[0, 1)`` (rounded to the
            nearest count), or ``None`` for ``default``.
        available: Number of examples to split.
        default: Used when ``size`` is ``None`` (count or fraction, same rules).
        name: The argument's name, for messages.

    Returns:
        The count, at most ``available - 1`` so that at least one example is left to train on.

    Raises:
        ValueError: If ``size`` is not an int or float, is negative, is a fraction outside ``[0, 1)``, or
            leaves no example to train on.
    """
    if size is None:
        size = default
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise ValueError(
            f"{name} must be an int (a count) or a float in [0, 1) (a fraction), got {size!r} "
            f"of type {type(size).__name__}"
        )
    if isinstance(size, numbers.Integral):
        count = int(size)
        if count < 0:
            raise ValueError(f"{name} must be a count >= 0 or a fraction in [0, 1), got {size!r}")
    else:
        if not 0.0 <= float(size) < 1.0:
            raise ValueError(f"{name} as a fraction must lie in [0, 1), got {size!r}")
        count = round(float(size) * available)
    if count >= available:
        raise ValueError(
            f"{name}={size!r} holds out {count} of the {available} available examples, leaving none to train "
            f"on; expected fewer than {available}"
        )
    return count


def _sorted(indices: torch.Tensor) -> torch.Tensor:
    return indices.sort().values


def split_indices(n: int, held_count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draws ``held_count`` of ``range(n)`` uniformly without replacement.

    Args:
        n: Number of examples.
        held_count: How many to hold out, ``0 <= held_count <= n``.
        generator: Source of randomness (advanced by one ``randperm(n)``).

    Returns:
        ``(kept, held)``: sorted int64 index tensors of sizes ``(n - held_count,)`` and ``(held_count,)``,
        disjoint and together covering ``range(n)``.
    """
    permutation = torch.randperm(n, generator=generator)
    return _sorted(permutation[held_count:]), _sorted(permutation[:held_count])


def train_val_indices(
    n: int,
    *,
    val_size: float | None,
    default_val_size: float,
    train_subset: int | None,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Splits an official training set of ``n`` examples into training and validation indices.

    The validation draw comes first from the seeded stream, so the validation set does not depend on
    ``train_subset``: a quick run on a subset is validated on the same examples as the full run.

    Args:
        n: Size of the official training set.
        val_size: Held-out validation size (see ``holdout_count``); ``None`` means ``default_val_size``.
        default_val_size: The data set's default.
        train_subset: Keep only this many training examples (a seeded uniform subset), or ``None`` for all.
        seed: Non-negative integer seed.

    Returns:
        ``(train, val)``: sorted, disjoint int64 index tensors into ``range(n)``.

    Raises:
        ValueError: If ``val_size`` is invalid (see ``holdout_count``) or ``train_subset`` is not an int in
            ``[1, number of training examples left]``.
    """
    val_count = holdout_count(val_size, n, default=default_val_size)
    generator = seeded_generator(seed, STREAM_VAL_SPLIT)
    train, val = split_indices(n, val_count, generator)
    if train_subset is not None:
        available = len(train)
        if (
            isinstance(train_subset, bool)
            or not isinstance(train_subset, numbers.Integral)
            or not 1 <= train_subset <= available
        ):
            raise ValueError(
                f"train_subset must be an int between 1 and {available} (the training examples left after "
                f"holding out {val_count} of {n} for validation), got {train_subset!r}"
            )
        chosen = torch.randperm(available, generator=generator)[: int(train_subset)]
        train = _sorted(train[chosen])
    return train, val


def test_subset_indices(n: int, count: int) -> torch.Tensor:
    """A fixed uniform subset of ``count`` of a test set's ``n`` examples, the same for every run seed.

    Runs that differ only in their seed are scored on the same test examples, so the spread over seeds is the
    spread of training, not of the test draw.

    Returns:
        Sorted int64 indices into ``range(n)``.

    Raises:
        ValueError: ``count`` is not an int in ``[1, n]``.
    """
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or not 1 <= count <= n:
        raise ValueError(f"test_subset must be an int between 1 and {n} (the test examples), got {count!r}")
    generator = seeded_generator(0, STREAM_TEST_SUBSET)
    return torch.randperm(n, generator=generator)[: int(count)].sort().values
