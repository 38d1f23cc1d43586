"""Activation functions and their string specs for the model zoo, and the network modes of passes that do not train."""

from pyro_bnn.nn.activations import (
    DEFAULT_LEAKY_SLOPE,
    Activation,
    ActivationLike,
    ActivationSpec,
    make_activation,
    parse_activation,
)
from pyro_bnn.nn.leaky_relu import LeakyReLU
from pyro_bnn.nn.modes import (
    BATCH_NORM_TYPES,
    DROPOUT_TYPES,
    has_batch_norm,
    has_running_statistics,
    keeps_state,
    network_mode,
    preserved_state,
)

__all__ = [
    "DEFAULT_LEAKY_SLOPE",
    "BATCH_NORM_TYPES",
    "DROPOUT_TYPES",
    "Activation",
    "ActivationLike",
    "ActivationSpec",
    "LeakyReLU",
    "has_batch_norm",
    "has_running_statistics",
    "keeps_state",
    "make_activation",
    "network_mode",
    "parse_activation",
    "preserved_state",
]
