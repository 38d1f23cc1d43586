"""Fixtures shared by the command tests."""

import pytest

from pyro_bnn.runs import runs


@pytest.fixture
def no_data(monkeypatch):
    """Loading data fails the test: the case had to be refused before."""

    def refuse(*args, **kwargs):
        raise AssertionError("data was loaded although the option could be checked without it")

    monkeypatch.setattr(runs, "load_data", refuse)
