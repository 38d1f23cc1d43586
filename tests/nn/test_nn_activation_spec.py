"""Activation strings: parsing, canonical form, module construction and every error path."""

import math

import pytest
import torch
from torch import nn

from pyro_bnn.nn import (
    DEFAULT_LEAKY_SLOPE,
    Activation,
    ActivationSpec,
    LeakyReLU,
    make_activation,
    parse_activation,
)

# (input string, expected spec, canonical string)
PARSE_CASES = [
    ("relu", ActivationSpec(Activation.RELU), "relu"),
    ("leaky", ActivationSpec(Activation.LEAKY_RELU, 0.01), "leaky:0.01"),
    ("leaky:-0.5", ActivationSpec(Activation.LEAKY_RELU, -0.5), "leaky:-0.5"),
    ("leaky:0.3", ActivationSpec(Activation.LEAKY_RELU, 0.3), "leaky:0.3"),
    ("leaky:1e-3", ActivationSpec(Activation.LEAKY_RELU, 0.001), "leaky:0.001"),
    (" Leaky : -1 ", ActivationSpec(Activation.LEAKY_RELU, -1.0), "leaky:-1.0"),
    ("leaky:0", ActivationSpec(Activation.LEAKY_RELU, 0.0), "leaky:0.0"),
    ("leaky:2.5", ActivationSpec(Activation.LEAKY_RELU, 2.5), "leaky:2.5"),
    ("TANH", ActivationSpec(Activation.TANH), "tanh"),
    ("sigmoid", ActivationSpec(Activation.SIGMOID), "sigmoid"),
    ("abs", ActivationSpec(Activation.ABS), "abs"),
    ("linear", ActivationSpec(Activation.LINEAR), "linear"),
    ("identity", ActivationSpec(Activation.LINEAR), "linear"),
]


@pytest.mark.parametrize(("text", "spec", "canonical"), PARSE_CASES)
def test_parse_and_canonical_form(text, spec, canonical):
    parsed = parse_activation(text)
    assert parsed == spec
    assert str(parsed) == canonical
    assert parse_activation(canonical) == parsed


@pytest.mark.parametrize("slope", [0.1 + 0.2, 1 / 3, -1e-300, 123456789.125, 1e-5, -7.0, 0.01])
def test_slope_round_trips_exactly(slope):
    spec = ActivationSpec(Activation.LEAKY_RELU, slope)
    back = parse_activation(str(spec))
    assert back == spec and back.slope == slope


def test_negative_zero_slope_is_canonicalised():
    assert str(parse_activation("leaky:-0")) == "leaky:0.0"
    assert math.copysign(1, ActivationSpec(Activation.LEAKY_RELU, -0.0).slope) == 1


def test_default_leaky_slope():
    assert DEFAULT_LEAKY_SLOPE == 0.01
    assert parse_activation(Activation.LEAKY_RELU) == ActivationSpec(Activation.LEAKY_RELU, 0.01)
    assert parse_activation(Activation.TANH) == ActivationSpec(Activation.TANH)


def test_enum_values_are_the_cli_names():
    assert [member.value for member in Activation] == ["relu", "leaky", "tanh", "sigmoid", "abs", "linear"]
    assert Activation("leaky") is Activation.LEAKY_RELU and Activation.TANH == "tanh"


def test_spec_passes_through():
    spec = ActivationSpec(Activation.LEAKY_RELU, -0.5)
    assert parse_activation(spec) is spec


X_VALUES = [-2.0, -0.5, 0.0, 1.5]


@pytest.mark.parametrize(
    ("text", "module_type", "expected"),
    [
        ("relu", nn.ReLU, [0.0, 0.0, 0.0, 1.5]),
        ("leaky", LeakyReLU, [-0.02, -0.005, 0.0, 1.5]),
        ("leaky:-0.5", LeakyReLU, [1.0, 0.25, 0.0, 1.5]),
        ("abs", LeakyReLU, [2.0, 0.5, 0.0, 1.5]),
        ("linear", nn.Identity, [-2.0, -0.5, 0.0, 1.5]),
        ("identity", nn.Identity, [-2.0, -0.5, 0.0, 1.5]),
        ("tanh", nn.Tanh, [math.tanh(-2.0), math.tanh(-0.5), 0.0, math.tanh(1.5)]),
        (
            "sigmoid",
            nn.Sigmoid,
            [1 / (1 + math.exp(2.0)), 1 / (1 + math.exp(0.5)), 0.5, 1 / (1 + math.exp(-1.5))],
        ),
    ],
)
def test_make_activation_builds_the_named_function(text, module_type, expected):
    module = make_activation(text)
    assert type(module) is module_type
    x = torch.tensor(X_VALUES)
    torch.testing.assert_close(module(x), torch.tensor(expected))
    assert x.tolist() == X_VALUES  # input left untouched
    assert make_activation(parse_activation(text)) is not module  # fresh module every call


def test_abs_is_leaky_with_slope_minus_one():
    assert make_activation("abs").slope == -1.0


def test_make_activation_from_enum_and_spec():
    assert make_activation(Activation.LEAKY_RELU).slope == DEFAULT_LEAKY_SLOPE
    assert type(make_activation(Activation.SIGMOID)) is nn.Sigmoid
    assert make_activation(ActivationSpec(Activation.LEAKY_RELU, -0.5)).slope == -0.5


def test_module_instance_is_copied_per_call():
    prelu = nn.PReLU()
    first, second = make_activation(prelu), make_activation(prelu)
    assert isinstance(first, nn.PReLU) and first is not prelu and first is not second
    assert first.weight is not second.weight and first.weight is not prelu.weight
    torch.testing.assert_close(first.weight, prelu.weight)


def test_zero_argument_callable_is_called_per_layer():
    first, second = make_activation(nn.ELU), make_activation(lambda: nn.Softplus(beta=2.0))
    assert isinstance(first, nn.ELU) and isinstance(second, nn.Softplus) and second.beta == 2.0
    assert make_activation(nn.ELU) is not first


@pytest.mark.parametrize("spec", [nn.ReLU(inplace=True), lambda: nn.ReLU(inplace=True), nn.LeakyReLU(inplace=True)])
def test_inplace_modules_are_rejected(spec):
    with pytest.raises(ValueError, match="inplace"):
        make_activation(spec)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "swish",
        "relu:0.5",
        "abs:1",
        "tanh:",
        "leaky:",
        "leaky:abc",
        "leaky:0.5:1",
        "leaky:nan",
        "leaky:inf",
        "leaky:-inf",
        "leakyrelu",
    ],
)
def test_bad_strings_raise_naming_value_and_what_was_expected(text):
    with pytest.raises(ValueError) as info:
        parse_activation(text)
    message = str(info.value)
    assert repr(text) in message and "\n" not in message
    assert any(word in message for word in ("expected", "non-empty", "takes no arguments"))
    with pytest.raises(ValueError):
        make_activation(text)


@pytest.mark.parametrize("text", ["swish", "leakyrelu", "Swish:2"])
def test_unknown_names_list_every_accepted_form(text):
    with pytest.raises(ValueError) as info:
        parse_activation(text)
    message = str(info.value)
    assert "leaky[:SLOPE]" in message and "relu" in message and "linear (or identity)" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("leaky:nan", "activation 'leaky:nan': slope must be finite, got 'nan'; expected leaky:SLOPE"),
        ("leaky:abc", "slope must be a finite number, got 'abc'"),
        ("leaky:", "slope must be a finite number, got ''"),
        ("tanh:", "activation 'tanh' takes no arguments after ':', got 'tanh:'"),
        ("relu:0.5", "activation 'relu' takes no arguments after ':', got 'relu:0.5'"),
    ],
)
def test_bad_strings_say_what_is_wrong(text, message):
    with pytest.raises(ValueError) as info:
        parse_activation(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kind", "slope", "match"),
    [
        (Activation.RELU, 0.5, "takes no slope"),
        (Activation.LEAKY_RELU, None, "needs a slope"),
        (Activation.LEAKY_RELU, math.nan, "nan"),
        ("bogus", None, "bogus"),
    ],
)
def test_invalid_spec_raises(kind, slope, match):
    with pytest.raises(ValueError, match=match):
        ActivationSpec(kind, slope)


@pytest.mark.parametrize("spec", [3, 0.5, None, ["relu"]])
def test_wrong_types_raise_type_error(spec):
    with pytest.raises(TypeError):
        make_activation(spec)
    with pytest.raises(TypeError):
        parse_activation(spec)


def test_factory_returning_non_module_raises():
    with pytest.raises(TypeError, match="not an nn.Module"):
        make_activation(lambda: torch.relu)
