"""``data_noise`` and ``data_samples``: the moons / circles generator's options in a run config (the priors
experiment's 700 / 300 split at a chosen noise), refused for other data sets."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pyro_bnn.data import load_dataset
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import load_data

BASE = RunConfig(dataset="circles", model="tanh-small", val_size=300, seed=2)


def test_the_options_reach_the_generator_and_leave_the_default_data_alone():
    data = load_data(dataclasses.replace(BASE, data_noise=0.35, data_samples=1250).validate())
    assert (len(data.train), len(data.val), len(data.test)) == (700, 300, 250)
    expected = load_dataset("circles", val_size=300, seed=2, noise=0.35, n_samples=1250)
    assert torch.equal(data.train.x, expected.train.x) and torch.equal(data.test.y, expected.test.y)
    default = load_data(BASE.validate())
    assert torch.equal(default.train.x, load_dataset("circles", val_size=300, seed=2).train.x)
    noisier = load_data(dataclasses.replace(BASE, data_noise=0.6, data_samples=1250).validate())
    assert not torch.equal(noisier.train.x, data.train.x)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"dataset": "fashion-mnist", "model": "3fc", "data_noise": 0.3},
            "data_noise=0.3 applies to moons and circles",
        ),
        ({"dataset": "cubic", "model": "mlp:4", "data_samples": 10}, "data_samples=10 applies to moons and circles"),
        ({"data_noise": -0.1}, "data_noise must be a finite number >= 0, got -0.1"),
        ({"data_noise": float("nan")}, "data_noise must be a finite number >= 0"),
        ({"data_samples": 0}, "data_samples must be None or an int >= 1, got 0"),
    ],
)
def test_bad_generator_options_fail_in_one_line(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(BASE, **change).validate()
