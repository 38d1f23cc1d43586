"""The registered reproductions, one package per paper: a paper is one package (``<paper>/``: ``plan``,
``analysis``, figures, its own ``measures`` or ``runs``, the experiment class in its ``__init__``) and one
:func:`register_experiment` call (the built-in ones below; a paper from another package registers the same way, or
through the ``pyro_bnn.papers`` entry-point group of :mod:`pyro_bnn.plugins`)."""

from __future__ import annotations

import re

from pyro_bnn.reproduce.papers.bayes_by_backprop import BayesByBackprop
from pyro_bnn.reproduce.papers.bbb_fashion import BbbFashion
from pyro_bnn.reproduce.papers.implicit_bnn import ImplicitBnn
from pyro_bnn.reproduce.papers.leaky_calibration import LeakyCalibration
from pyro_bnn.reproduce.papers.posterior_families import PosteriorFamilies
from pyro_bnn.reproduce.papers.priors import Priors
from pyro_bnn.reproduce.planned import Experiment, Profile

EXPERIMENTS: dict[str, Experiment] = {}
"""Experiment name -> experiment (``pyro-bnn reproduce NAME``), in registration order; filled by
:func:`register_experiment` only."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ATTRIBUTES = ("name", "title", "summary", "profiles", "plan", "analyse")


def _check_experiment(experiment: object) -> None:
    """Refuses, in one line, an object that is not an :class:`~pyro_bnn.reproduce.planned.Experiment`."""
    if isinstance(experiment, type):
        raise TypeError(
            f"register_experiment takes an instance of an Experiment, got the class "
            f"{experiment.__module__}.{experiment.__qualname__}; pass {experiment.__qualname__}()"
        )
    missing = [attribute for attribute in _ATTRIBUTES if not hasattr(experiment, attribute)]
    if missing:
        raise TypeError(
            f"register_experiment takes an Experiment ({', '.join(_ATTRIBUTES)}); {experiment!r} lacks "
            f"{', '.join(missing)}"
        )
    name = experiment.name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"an experiment name is letters, digits, '.', '_' and '-' (not first), got {name!r}")
    for attribute in ("plan", "analyse"):
        if not callable(getattr(experiment, attribute)):
            raise TypeError(f"experiment {name!r}: {attribute} is not callable")
    profiles = experiment.profiles
    if not isinstance(profiles, dict) or not profiles or not all(isinstance(p, Profile) for p in profiles.values()):
        raise TypeError(f"experiment {name!r}: profiles must be a non-empty dict of name -> Profile")


def register_experiment(experiment: Experiment, *, replace: bool = False) -> Experiment:
    """Adds a paper's reproduction to the registry (``pyro-bnn reproduce NAME``, ``--list``,
    :func:`~pyro_bnn.reproduce.reproduce`).

    Args:
        experiment: The experiment object (an instance with ``name``, ``title``, ``summary``, ``profiles``,
            ``plan`` and ``analyse``; :class:`~pyro_bnn.reproduce.planned.Experiment`).
        replace: Allow replacing another experiment registered under the same name (registering the same object
            again is always allowed).

    Returns:
        ``experiment``, unchanged.

    Raises:
        ValueError: The name is taken by another experiment and ``replace`` is false, or is not a valid name (one
            line naming it).
        TypeError: ``experiment`` is not an experiment object.
    """
    _check_experiment(experiment)
    existing = EXPERIMENTS.get(experiment.name)
    if existing is not None and existing is not experiment and not replace:
        raise ValueError(f"experiment {experiment.name!r} is already registered; pass replace=True to override it")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def unregister_experiment(name: str) -> None:
    """Removes the experiment called ``name`` (nothing when there is none; tests that register one clean up with
    it)."""
    EXPERIMENTS.pop(name, None)


for _experiment in (
    LeakyCalibration(),
    BayesByBackprop(),
    BbbFashion(),
    ImplicitBnn(),
    Priors(),
    PosteriorFamilies(),
):
    register_experiment(_experiment)
