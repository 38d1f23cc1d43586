"""Fixtures shared by the run-engine tests."""

import pytest

from pyro_bnn.runs import RunConfig, runs


@pytest.fixture(scope="session")
def tiny_moons() -> RunConfig:
    """A run of one epoch on moons with a 2-5-5-2 tanh network: seconds, no data files."""
    return RunConfig(
        dataset="moons",
        model="tanh-small",
        activation="tanh",
        guide="autonormal:0.05",
        epochs=1,
        batch_size=64,
        lr=0.02,
        num_samples=4,
        num_val_samples=2,
        device="cpu",
    )


@pytest.fixture
def no_data(monkeypatch):
    """Loading data fails the test: the case had to be refused before."""

    def refuse(*args, **kwargs):
        raise AssertionError("data was loaded although the option could be checked without it")

    monkeypatch.setattr(runs, "load_data", refuse)
