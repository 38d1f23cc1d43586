"""The range of user seeds (pyro_bnn.data.seeding.check_seed)."""

import numpy as np
import pyro
import pytest
import torch

from pyro_bnn.data.seeding import MAX_SEED, check_seed, derived_seed


def test_the_largest_seed_is_the_largest_every_seeding_path_takes():
    assert MAX_SEED == 2**32 - 1 == 4294967295
    pyro.set_rng_seed(MAX_SEED)  # torch, random and NumPy's legacy generator
    torch.Generator().manual_seed(MAX_SEED)
    assert 0 <= derived_seed(MAX_SEED, 3, MAX_SEED) < 2**64
    with pytest.raises(ValueError, match="Seed must be between 0 and 2\\*\\*32 - 1"):  # the bound is NumPy's
        np.random.seed(MAX_SEED + 1)


@pytest.mark.parametrize("seed", [0, 7, MAX_SEED, np.int64(MAX_SEED)])
def test_seeds_in_range_pass(seed):
    assert check_seed(seed) == int(seed) and type(check_seed(seed)) is int


@pytest.mark.parametrize("seed", [MAX_SEED + 1, 99999999999999999999, np.uint64(2**63)])
def test_a_seed_above_2_to_the_32_is_one_line_naming_it_and_the_range(seed):
    expected = f"data_seed must be an int in [0, 2**32 - 1 = 4294967295] (the seeds Pyro takes), got {int(seed)}"
    with pytest.raises(ValueError) as err:
        check_seed(seed, name="data_seed")
    assert str(err.value) == expected


def test_a_negative_seed_keeps_its_message():
    with pytest.raises(ValueError, match=r"^seed must be an int >= 0, got -1$"):
        check_seed(-1)
