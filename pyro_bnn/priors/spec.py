"""Building priors from option strings such as ``"normal:0,1"`` (the CLI's ``--prior``)."""

from __future__ import annotations

import math
from enum import Enum

from pyro_bnn.priors.base import Prior
from pyro_bnn.priors.families import CauchyPrior, FlatPrior, LaplacePrior, NormalPrior, ScaleMixturePrior
from pyro_bnn.priors.hierarchical import _ARITY, HierarchicalPrior, Hyperprior, WeightFamily
from pyro_bnn.priors.selection import Select
from pyro_bnn.spec import Arg, Choice, Family, Form, Interval, ParsedSpec, Positive, Real


class PriorKind(str, Enum):
    """Prior families accepted by :func:`parse_prior` (their grammar: :data:`PRIOR_FAMILY`)."""

    NORMAL = "normal"
    """Every weight ~ Normal(LOC, SCALE^2)."""
    LAPLACE = "laplace"
    """Every weight ~ Laplace(LOC, SCALE). The Bayesian counterpart of L1 regularisation."""
    CAUCHY = "cauchy"
    """Every weight ~ Cauchy(LOC, SCALE), heavy-tailed."""
    FLAT = "flat"
    """Improper uniform, log density 0. MAP under it is maximum likelihood."""
    MIXTURE = "mixture"
    """PI N(0, SIGMA1^2) + (1 - PI) N(0, SIGMA2^2), Bayes by Backprop's scale mixture."""
    HIERARCHICAL = "hierarchical"
    """Weights ~ FAMILY(0, s), one scale s per layer drawn from HYPERPRIOR(H1[,H2]). The hyperprior's arguments:
    its scale H1 (halfnormal, halfcauchy), the concentration H1 and rate H2 of s^2 (inversegamma), or s = H1 itself
    (fixed)."""


_SCALE = Positive(float32=True)
_LOC_SCALE = (Arg("loc", Real(float32=True), 0.0), Arg("scale", _SCALE, 1.0))


def _check_hyperparameters(parsed: ParsedSpec) -> None:
    hyperprior = parsed["hyperprior"]
    given = 1 + ("hyperparameter 2" in parsed.given)
    if given != _ARITY[hyperprior]:
        raise ValueError(f"hyperprior {hyperprior.value!r} takes {_ARITY[hyperprior]} argument(s), got {given}")


PRIOR_FAMILY = Family(
    "prior",
    [
        Form(PriorKind.NORMAL, _LOC_SCALE, example="normal:0,1"),
        Form(PriorKind.LAPLACE, _LOC_SCALE, example="laplace:0,0.5"),
        Form(PriorKind.CAUCHY, _LOC_SCALE, example="cauchy:0,0.1"),
        Form(PriorKind.FLAT),
        Form(
            PriorKind.MIXTURE,
            (
                Arg("pi", Interval(0.0, 1.0, closed="neither", float32=True), 0.5),
                Arg("sigma1", _SCALE, 1.0),
                Arg("sigma2", _SCALE, math.exp(-6)),
            ),
            example="mixture:0.5,1,0.0025",
        ),
        Form(
            PriorKind.HIERARCHICAL,
            (
                Arg("family", Choice(WeightFamily, "weight family"), metavar="FAMILY"),
                Arg("hyperprior", Choice(Hyperprior, "hyperprior"), metavar="HYPERPRIOR"),
                Arg("hyperparameter 1", _SCALE, metavar="H1"),
                Arg("hyperparameter 2", _SCALE, None, metavar="H2"),
            ),
            check=_check_hyperparameters,
            example="hierarchical:normal,halfcauchy,1",
        ),
    ],
    enum=PriorKind,
    example="normal:0,1",
)
"""The ``--prior`` grammar. Scales must be positive numbers that float32 holds (``mixture:0.5,1,1e-300`` is refused:
its sigma2 would become 0)."""


def parse_prior(spec: str, select: Select | None = None) -> Prior:
    """Builds a prior from a string (forms: :data:`PRIOR_FAMILY`; ``pyro-bnn list`` shows them).

    Raises:
        ValueError: One line naming the spec and what was expected when it cannot be parsed.
    """
    parsed = PRIOR_FAMILY.parse(spec)
    kind = parsed.kind
    if kind is PriorKind.FLAT:
        return FlatPrior(select)
    if kind is PriorKind.MIXTURE:
        return ScaleMixturePrior(parsed["pi"], parsed["sigma1"], parsed["sigma2"], select=select)
    if kind is PriorKind.HIERARCHICAL:
        hyperparameters = [parsed["hyperparameter 1"]]
        if parsed["hyperparameter 2"] is not None:
            hyperparameters.append(parsed["hyperparameter 2"])
        return HierarchicalPrior(parsed["family"], parsed["hyperprior"], hyperparameters, select=select)
    cls = {PriorKind.NORMAL: NormalPrior, PriorKind.LAPLACE: LaplacePrior, PriorKind.CAUCHY: CauchyPrior}[kind]
    return cls(parsed["loc"], parsed["scale"], select=select)
