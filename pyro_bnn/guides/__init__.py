"""Guides: variational families and point-estimate baselines, all Pyro AutoGuides built from the model."""

from pyro_bnn.guides.autonormal import RelativeScaleNormal, WholeDataPlates, whole_data_plates
from pyro_bnn.guides.bbb import BayesByBackprop
from pyro_bnn.guides.capabilities import (
    BatchedLayout,
    BatchedPosterior,
    Capability,
    DrawsPosterior,
    FlatNormalPosterior,
    NormalMixturePosterior,
    ScaleMap,
)
from pyro_bnn.guides.flat import FlatMeanField, FlatSite
from pyro_bnn.guides.flow import MAX_FLOW_WEIGHTS, IAFNormal
from pyro_bnn.guides.init import init_to_network
from pyro_bnn.guides.inspect import mean_posterior_scale, posterior_loc_scale
from pyro_bnn.guides.mixture import EqualMixtureNormal, NodeNoiseMixture
from pyro_bnn.guides.multivariate import MAX_FULL_COVARIANCE_WEIGHTS, FullCovarianceNormal, LowRankNormal
from pyro_bnn.guides.point import MCDropout, PointEstimateGuide
from pyro_bnn.guides.registry import (
    GuideFamily,
    families_with,
    guide_families,
    guide_family,
    register_guide,
    unregister_guide,
)
from pyro_bnn.guides.spec import DEFAULT_GUIDE, GuideKind, GuideSpec, LocInit, parse_guide

__all__ = [
    "DEFAULT_GUIDE",
    "BatchedLayout",
    "BatchedPosterior",
    "BayesByBackprop",
    "Capability",
    "DrawsPosterior",
    "FlatNormalPosterior",
    "GuideFamily",
    "NormalMixturePosterior",
    "ScaleMap",
    "families_with",
    "guide_families",
    "guide_family",
    "register_guide",
    "unregister_guide",
    "FlatMeanField",
    "FlatSite",
    "GuideKind",
    "GuideSpec",
    "LocInit",
    "RelativeScaleNormal",
    "WholeDataPlates",
    "whole_data_plates",
    "MCDropout",
    "PointEstimateGuide",
    "EqualMixtureNormal",
    "NodeNoiseMixture",
    "LowRankNormal",
    "FullCovarianceNormal",
    "IAFNormal",
    "MAX_FULL_COVARIANCE_WEIGHTS",
    "MAX_FLOW_WEIGHTS",
    "init_to_network",
    "mean_posterior_scale",
    "parse_guide",
    "posterior_loc_scale",
]
