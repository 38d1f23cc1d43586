"""Building priors from option strings such as ``"normal:0,1"`` (the CLI's ``--prior``)."""

from __future__ import annotations

from enum import Enum

from pyro_bnn._spec import enum_member, floats, split_spec
from pyro_bnn.priors.base import Prior
from pyro_bnn.priors.families import CauchyPrior, FlatPrior, LaplacePrior, NormalPrior, ScaleMixturePrior
from pyro_bnn.priors.hierarchical import HierarchicalPrior
from pyro_bnn.priors.selection import Select


class PriorKind(str, Enum):
    """Prior families accepted by :func:`parse_prior`."""

    NORMAL = "normal"
    """``normal`` or ``normal:LOC,SCALE`` (default 0,1)."""
    LAPLACE = "laplace"
    """``laplace`` or ``laplace:LOC,SCALE`` (default 0,1)."""
    CAUCHY = "cauchy"
    """``cauchy`` or ``cauchy:LOC,SCALE`` (default 0,1)."""
    FLAT = "flat"
    """``flat``: improper uniform, log density 0."""
    MIXTURE = "mixture"
    """``mixture`` or ``mixture:PI,SIGMA1,SIGMA2`` (default 0.5, 1, e^-6), Bayes by Backprop's scale mixture."""
    HIERARCHICAL = "hierarchical"
    """``hierarchical:FAMILY,HYPERPRIOR,ARGS...``, e.g. ``hierarchical:normal,halfcauchy,1`` or
    ``hierarchical:laplace,inversegamma,2,1`` or ``hierarchical:normal,fixed,0.1``."""


def parse_prior(spec: str, select: Select | None = None) -> Prior:
    """Builds a prior from a string (see :class:`PriorKind` for the forms).

    Raises:
        ValueError: naming the spec and the accepted forms when it cannot be parsed.
    """
    name, args = split_spec(spec, "prior")
    kind = enum_member(PriorKind, name, "prior")
    if kind is PriorKind.FLAT:
        floats(args, (0,), spec, "prior")
        return FlatPrior(select)
    if kind is PriorKind.MIXTURE:
        return ScaleMixturePrior(*floats(args, (0, 3), spec, "prior"), select=select)
    if kind is PriorKind.HIERARCHICAL:
        if len(args) < 3:
            raise ValueError(
                f"prior {spec!r}: expected 'hierarchical:FAMILY,HYPERPRIOR,ARGS...', "
                "e.g. 'hierarchical:normal,halfcauchy,1'"
            )
        hyperparameters = floats(args[2:], (1, 2), spec, "prior")
        return HierarchicalPrior(args[0].lower(), args[1].lower(), hyperparameters, select=select)
    cls = {PriorKind.NORMAL: NormalPrior, PriorKind.LAPLACE: LaplacePrior, PriorKind.CAUCHY: CauchyPrior}[kind]
    return cls(*floats(args, (0, 2), spec, "prior"), select=select)
