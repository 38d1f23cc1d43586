"""Weight priors. A prior picks the random parameters of a network and gives each a prior distribution."""

from pyro_bnn.priors.base import ParameterSite, Prior
from pyro_bnn.priors.families import CauchyPrior, FlatPrior, LaplacePrior, NormalPrior, ScaleMixturePrior
from pyro_bnn.priors.hierarchical import HierarchicalPrior, Hyperprior, WeightFamily
from pyro_bnn.priors.mixture import ScaleMixtureNormal, scale_mixture_log_density
from pyro_bnn.priors.selection import (
    Select,
    all_of,
    any_of,
    every_parameter,
    module_types,
    name_matches,
    negate,
    nothing,
    weights_only,
)
from pyro_bnn.priors.spec import PriorKind, parse_prior

__all__ = [
    "CauchyPrior",
    "FlatPrior",
    "HierarchicalPrior",
    "Hyperprior",
    "LaplacePrior",
    "NormalPrior",
    "ParameterSite",
    "Prior",
    "PriorKind",
    "ScaleMixtureNormal",
    "ScaleMixturePrior",
    "Select",
    "WeightFamily",
    "all_of",
    "any_of",
    "every_parameter",
    "module_types",
    "name_matches",
    "negate",
    "nothing",
    "parse_prior",
    "scale_mixture_log_density",
    "weights_only",
]
