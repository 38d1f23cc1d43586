"""Fixtures of the reproduction tests."""

from __future__ import annotations

import dataclasses

import pytest


@pytest.fixture
def tiny_image_sets(tmp_path, make_tiny):
    """MNIST and Fashion-MNIST stand-ins with 1 600 training and 1 000 test images: the quick profiles'
    sizes of ``bayes-by-backprop`` and ``bbb-fashion``, and more than ``implicit-bnn``'s."""
    return {
        name: str(make_tiny(1_600, 1_000, seed=seed).write(tmp_path / name))
        for seed, name in enumerate(("mnist", "fashion-mnist"))
    }


@pytest.fixture
def read_by():
    """``read_by(name, sets)``: the entries of ``sets`` that experiment ``name``'s quick grid reads (a data folder
    for a set it does not read is refused, as a typo would be)."""
    from pyro_bnn.reproduce.api import get_experiment, grid_datasets

    def only(name: str, sets: dict[str, str], profile: str = "quick") -> dict[str, str]:
        experiment = get_experiment(name)
        read = grid_datasets(experiment, experiment.profiles[profile])
        return {key: value for key, value in sets.items() if key in read}

    return only


@pytest.fixture
def resized_profile(monkeypatch):
    """``resized_profile(profiles, name, **sizes)``: profile ``name`` of an experiment's ``profiles`` with the size
    settings ``sizes`` replaced, for this test only. An end-to-end test runs the whole plan and analysis of a profile
    at sizes smaller than the profile's own (which ``test_profiles_change_sizes_only``-style tests check apart): the
    same runs, code paths and report, in seconds rather than minutes. Only settings the profile has may change."""

    def resize(profiles: dict, name: str = "quick", **sizes):
        profile = profiles[name]
        unknown = set(sizes) - set(profile.settings)
        assert not unknown, f"not a setting of profile {name!r}: {sorted(unknown)}"
        resized = dataclasses.replace(profile, settings={**profile.settings, **sizes})
        monkeypatch.setitem(profiles, name, resized)
        return resized

    return resize


CLEAN_CODE = "pyro_bnn test-suite at 0000000"
"""What this suite's in-process runs name as their code: a clean commit, so that a developer's uncommitted changes
do not make every report built here count none of its runs (a run from an uncommitted tree counts in no report;
``tests/reproduce/test_code_state.py`` tests that rule itself)."""


@pytest.fixture(autouse=True)
def clean_code_version():
    from pyro_bnn.reproduce import records

    records.inherit_code_version(CLEAN_CODE)
    yield
    records.inherit_code_version("")
