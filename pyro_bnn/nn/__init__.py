"""Activation functions and their string specs for the model zoo."""

from pyro_bnn.nn.activations import (
    DEFAULT_LEAKY_SLOPE,
    Activation,
    ActivationLike,
    ActivationSpec,
    make_activation,
    parse_activation,
)
from pyro_bnn.nn.leaky_relu import LeakyReLU

__all__ = [
    "DEFAULT_LEAKY_SLOPE",
    "Activation",
    "ActivationLike",
    "ActivationSpec",
    "LeakyReLU",
    "make_activation",
    "parse_activation",
]
