"""What a worker process inherits from the grid that spawned it: the registrations made outside pyro_bnn's modules.

A pool worker (a spawned interpreter) or a Ray task imports pyro_bnn afresh, so the built-in guides, objectives,
papers' measurements and runners register there as they did in the parent. What the parent registered from
elsewhere (a plugin loaded by the command line, a notebook, a test) exists only in the parent: the grid hands it
over with each group of runs (:func:`parent_registries`), and the worker registers what it lacks before it runs
them (:func:`adopt_registries`). Functions travel by module and name, so they must be importable in the worker (a
plugin's module is; a lambda is not, and fails when the group is sent).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pyro_bnn.guides.registry import GuideFamily, guide_families, register_guide
from pyro_bnn.guides.spec import BUILT_IN_GUIDES
from pyro_bnn.infer.objective_registry import ObjectiveEntry, objective_entries, objective_entry, register_objective
from pyro_bnn.reproduce.measures import adopt_measures, registered_measures
from pyro_bnn.reproduce.runners import RUNNERS, Runner, registered_runners


class Registries(NamedTuple):
    """The registrations a worker takes from its parent."""

    measures: dict[str, Any]
    runners: dict[str, Runner]
    guides: tuple[GuideFamily, ...] = ()
    """Guide families registered from outside pyro_bnn (a built-in one registers in the worker on import)."""
    objectives: tuple[ObjectiveEntry, ...] = ()
    """Every registered objective (the worker registers those it lacks)."""


def parent_registries() -> Registries:
    """This process's measurements, runners and objectives, and its guide families other than the built-in ones
    (:data:`~pyro_bnn.guides.spec.BUILT_IN_GUIDES`, some of which hold lambdas that cannot travel)."""
    return Registries(
        registered_measures(),
        registered_runners(),
        tuple(family for family in guide_families() if family.name not in BUILT_IN_GUIDES),
        objective_entries(),
    )


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
