"""What a worker process inherits from the grid that spawned it: the registrations its runs use.

A pool worker (a spawned interpreter) or a Ray task imports pyro_bnn afresh, so the built-in guides, objectives,
papers' measurements and runners register there as they did in the parent. What the parent registered from
elsewhere (a plugin loaded by the command line, a notebook, a test) exists only in the parent: the grid hands over
those its runs name (their guide, objective, measurements and runner: :func:`parent_registries`) with each group of
runs, and the worker registers what it lacks before it runs them (:func:`adopt_registries`). Functions travel by
module and name, so a registration a run uses must be importable in the worker (a plugin's module-level function or
class is; a lambda is not, and the grid is refused before it starts); one that no run uses stays behind.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from pyro_bnn.guides.registry import GuideFamily, guide_families, register_guide
from pyro_bnn.guides.spec import BUILT_IN_GUIDES, parse_guide
from pyro_bnn.infer.objective_registry import ObjectiveEntry, objective_entry, register_objective
from pyro_bnn.reproduce.measures import adopt_measures, registered_measures
from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.reproduce.record_files import one_line
from pyro_bnn.reproduce.runners import RUNNERS, Runner, registered_runners


class Registries(NamedTuple):
    """The registrations a worker takes from its parent: those the runs it is sent use."""

    measures: dict[str, Any]
    runners: dict[str, Runner]
    guides: tuple[GuideFamily, ...] = ()
    """Guide families registered from outside pyro_bnn (a built-in one registers in the worker on import)."""
    objectives: tuple[ObjectiveEntry, ...] = ()
    """The objectives the runs train with (the worker registers those it lacks)."""


def _with_members(specs: Iterable[RunSpec]) -> Iterator[RunSpec]:
    for spec in specs:
        yield spec
        yield from _with_members(spec.members)


def _sendable(kind: str, name: str, registration: object) -> None:
    """Raises ValueError naming the registration when it cannot travel to a worker (a lambda, a local function, a
    function of a module that does not import): otherwise every run of the grid would fail on it."""
    try:
        pickle.dumps(registration)
    except Exception as err:  # pickle raises PicklingError, AttributeError or TypeError alike
        raise ValueError(
            f"the grid's runs use the {kind} {name!r}, which cannot be sent to a worker process ({one_line(err)}); "
            "register it from an importable module, defined at module level (not a lambda or a local function), "
            "or run the grid in this process (--workers 1)"
        ) from None


def parent_registries(specs: Iterable[RunSpec]) -> Registries:
    """The registrations of this process that ``specs`` (and their members) use: their measurements, runners and
    objectives, and their guide families other than the built-in ones
    (:data:`~pyro_bnn.guides.spec.BUILT_IN_GUIDES`, some of which hold lambdas that cannot travel). What no run uses
    stays behind, so a registration that could not travel (a notebook's lambda) fails no grid that does not use it.

    Raises:
        ValueError: A registration the runs use cannot be sent to another process (one line naming it).
    """
    measures_now, runners_now = registered_measures(), registered_runners()
    measures: dict[str, Any] = {}
    runners: dict[str, Runner] = {}
    guides: dict[str, GuideFamily] = {}
    objectives: dict[str, ObjectiveEntry] = {}
    for spec in _with_members(specs):
        for measure in spec.measures:
            name = measure.split(":", 1)[0]
            if name in measures_now:
                measures[name] = measures_now[name]
        if spec.runner in runners_now:  # else "package.module:function", which the worker imports itself
            runners[spec.runner] = runners_now[spec.runner]
        if spec.config.guide is not None:
            family = parse_guide(spec.config.guide).family
            if family.name not in BUILT_IN_GUIDES:
                guides[family.name] = family
        try:
            entry = objective_entry(spec.config.elbo)
        except ValueError:  # no longer registered: the worker refuses the run naming it
            continue
        objectives[entry.name] = entry
    for kind, chosen in (("measurement", measures), ("runner", runners), ("guide", guides), ("objective", objectives)):
        for name, registration in chosen.items():
            _sendable(kind, name, registration)
    return Registries(measures, runners, tuple(guides.values()), tuple(objectives.values()))


def adopt_registries(
    measures: dict[str, Any],
    runners: dict[str, Runner],
    guides: tuple[GuideFamily, ...] = (),
    objectives: tuple[ObjectiveEntry, ...] = (),
) -> None:
    """Registers, in a worker process, what its parent had registered and it lacks."""
    adopt_measures(measures)
    for name, function in runners.items():
        RUNNERS.setdefault(name, function)
    known = {family.name for family in guide_families()}
    for family in guides:
        if family.name not in known:
            register_guide(family)
    for entry in objectives:
        try:
            objective_entry(entry.name)
        except ValueError:
            register_objective(
                entry.name,
                options=entry.options,
                requires=entry.requires,
                excludes=entry.excludes,
                doc=entry.doc,
                batched=entry.batched,
            )(entry.factory)
