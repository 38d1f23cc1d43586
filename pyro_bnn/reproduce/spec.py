"""Deprecated: the planned runs' module is :mod:`pyro_bnn.reproduce.planned` (renamed from ``spec``, a word that
elsewhere in pyro_bnn means the text form of a component, e.g. ``"flat:rel=1"``). This shim re-exports its names
and warns once per process; import them from :mod:`pyro_bnn.reproduce.planned`."""

import warnings

from pyro_bnn.reproduce.planned import (
    IGNORED_IN_RUN_ID,
    PLANNED_VI_GUIDE,
    RUN_ID_BASE,
    Analysis,
    Experiment,
    Headline,
    Profile,
    RunRecord,
    RunSpec,
    Section,
    Status,
    Verdict,
    run_tags,
)

__all__ = [
    "IGNORED_IN_RUN_ID",
    "PLANNED_VI_GUIDE",
    "RUN_ID_BASE",
    "Analysis",
    "Experiment",
    "Headline",
    "Profile",
    "RunRecord",
    "RunSpec",
    "Section",
    "Status",
    "Verdict",
    "run_tags",
]

warnings.warn(
    "pyro_bnn.reproduce.spec is renamed pyro_bnn.reproduce.planned; import RunSpec and the rest from there",
    DeprecationWarning,
    stacklevel=2,
)
