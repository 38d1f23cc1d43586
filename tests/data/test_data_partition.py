"""Seeded partitions and derived seeds (``pyro_bnn.data.partition``, ``pyro_bnn.data.seeding``)."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn.data.partition import holdout_count, split_indices, train_val_indices
from pyro_bnn.data.seeding import derived_seed, seeded_generator


@pytest.mark.parametrize(
    ("size", "available", "expected"),
    [(None, 100, 20), (0, 100, 0), (99, 100, 99), (0.5, 101, 50), (0.994, 100, 99), (0.004, 100, 0)],
)
def test_holdout_count(size, available, expected):
    assert holdout_count(size, available, default=0.2) == expected


def test_holdout_count_must_leave_a_training_example():
    with pytest.raises(ValueError, match="val_size=0.9 holds out 1 of the 1 available examples"):
        holdout_count(0.9, 1, default=0)


def test_split_indices_are_sorted_disjoint_and_complete():
    kept, held = split_indices(30, 12, seeded_generator(0))
    assert len(held) == 12 and len(kept) == 18
    assert torch.equal(torch.cat([kept, held]).sort().values, torch.arange(30))
    assert torch.equal(kept, kept.sort().values) and torch.equal(held, held.sort().values)
    assert kept.dtype == held.dtype == torch.int64


def test_train_val_indices_are_uniform_over_seeds():
    # Each example should land in validation about val/n of the time across seeds: a biased split (always the
    # first or last examples) fails this.
    counts = torch.zeros(20)
    for seed in range(400):
        _, val = train_val_indices(20, val_size=5, default_val_size=0, train_subset=None, seed=seed)
        counts[val] += 1
    assert counts.min().item() > 60 and counts.max().item() < 140  # expected 100 each, sd ~8.7


def test_derived_seeds_keep_streams_apart():
    assert derived_seed(0, 1) != derived_seed(1, 0)
    assert derived_seed(5, 2, 3) == derived_seed(5, 2, 3)
    assert 0 <= derived_seed(5, bits=32) < 2**32
    with pytest.raises(ValueError, match="seed must be an int >= 0, got -1"):
        derived_seed(-1)


def test_train_subset_is_uniform_within_the_training_split():
    # Every training example should be kept about subset/train of the time: taking the first examples, or any
    # fixed part, fails this.
    counts = torch.zeros(30)
    for seed in range(200):
        full, _ = train_val_indices(40, val_size=10, default_val_size=0, train_subset=None, seed=seed)
        subset, _ = train_val_indices(40, val_size=10, default_val_size=0, train_subset=10, seed=seed)
        positions = torch.searchsorted(full, subset)
        assert torch.equal(full[positions], subset)  # a subset of that seed's training split
        counts[positions] += 1
    assert counts.min().item() > 35 and counts.max().item() < 100  # expected 66.7 each, sd ~6.7
