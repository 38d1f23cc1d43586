"""The model registry: lookup, options, model strings (``mlp:256,256``), user registration and its errors."""

import pytest
import torch
from torch import nn

from pyro_bnn.models import (
    DEFAULT_MLP_WIDTHS,
    MLP,
    ModelArguments,
    ModelSpec,
    ThreeFC,
    available_models,
    build_model,
    default_activation,
    model_usage,
    parse_model_spec,
    register_model,
)
from pyro_bnn.models import registry as registry_module
from pyro_bnn.runs.config import RunConfig

ZOO = ["3fc", "bbb-mlp", "conv", "lenet", "mlp", "tanh-cnn", "tanh-small"]


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, so user registrations in a test do not leak into others."""
    monkeypatch.setattr(registry_module, "_REGISTRY", dict(registry_module._REGISTRY))
    monkeypatch.setattr(registry_module, "_ARGUMENTS", dict(registry_module._ARGUMENTS))
    return registry_module._REGISTRY


def test_available_models_lists_the_zoo_sorted():
    names = available_models()
    assert names == sorted(names)
    assert set(ZOO) <= set(names)


def test_names_are_case_insensitive():
    net = build_model(" 3FC ", input_shape=(2,), num_classes=3, width=4)
    assert isinstance(net, ThreeFC) and net.num_classes == 3


def test_unknown_name_lists_known_names():
    with pytest.raises(ValueError, match="resnet") as info:
        build_model("resnet", input_shape=(1, 28, 28), num_classes=10)
    assert all(name in str(info.value) for name in ZOO)


def test_unknown_option_names_it_and_lists_the_accepted_ones():
    with pytest.raises(TypeError, match="hidden") as info:
        build_model("bbb-mlp", input_shape=(2,), num_classes=2, hidden=400)
    assert "width" in str(info.value)
    with pytest.raises(TypeError, match="options are: none"):
        build_model("tanh-cnn", input_shape=(1, 28, 28), num_classes=10, width=3)


def test_activation_none_means_the_model_default():
    tanh_net = build_model("tanh-small", input_shape=(2,), num_classes=2, activation=None)
    assert isinstance(tanh_net.act1, nn.Tanh)
    relu_net = build_model("tanh-small", input_shape=(2,), num_classes=2, activation="relu")
    assert isinstance(relu_net.act1, nn.ReLU)


@pytest.mark.parametrize("name", available_models())
def test_default_activation_names_what_activation_none_builds(name):
    """RunConfig fills in default_activation(model): it must be the activation the model builds when given None."""
    shape = (2,) if name in ("3fc", "bbb-mlp", "mlp", "tanh-small") else (3, 32, 32)
    with torch.device("meta"):
        own = build_model(name, input_shape=shape, num_classes=2, activation=None)
        named = build_model(name, input_shape=shape, num_classes=2, activation=default_activation(name))
    kinds = lambda net: [type(m).__name__ for m in net.modules()]  # noqa: E731
    assert kinds(own) == kinds(named)
    assert default_activation(name) == ("tanh" if name in ("tanh-small", "tanh-cnn") else "relu")


def test_default_activation_reads_a_factorys_attribute_and_else_is_relu(registry):
    @register_model("toy-tanh")
    def toy(*, input_shape, num_classes, activation=None, dropout=0.0):
        return MLP(input_shape, num_classes, (3,), activation=activation or "tanh")

    assert default_activation("toy-tanh") == "relu"  # undeclared: ReLU, what a run trained before
    toy.default_activation = "tanh"
    assert default_activation("TOY-tanh") == "tanh" and default_activation("mlp:4,4") == "relu"
    toy.default_activation = 3
    with pytest.raises(ValueError, match=r"^model 'toy-tanh': its default_activation must be an activation string"):
        default_activation("toy-tanh")
    with pytest.raises(ValueError, match=r"^model 'toy-tanh': its default_activation must be an activation string"):
        RunConfig(dataset="moons", model="toy-tanh")  # the config says so too, not a TypeError about None
    with pytest.raises(ValueError, match="unknown model"):
        default_activation("nope")


def test_register_a_user_factory(registry):
    calls = []

    @register_model("My-Net")
    def my_net(*, input_shape, num_classes, activation=None, dropout=0.0, width=3):
        calls.append((input_shape, num_classes, activation, dropout, width))
        return ThreeFC(input_shape, num_classes, activation=activation, dropout=dropout, width=width)

    assert "my-net" in available_models()
    net = build_model("my-net", input_shape=(2,), num_classes=4, activation="tanh", dropout=0.1, width=5)
    assert calls == [((2,), 4, "tanh", 0.1, 5)]
    assert net(torch.randn(3, 2)).shape == (3, 4)
    with pytest.raises(TypeError, match="depth"):
        build_model("my-net", input_shape=(2,), num_classes=4, depth=3)


def test_duplicate_names_need_replace(registry):
    def first(**kwargs):
        return nn.Identity()

    def second(**kwargs):
        return nn.Identity()

    register_model("dup")(first)
    register_model("dup")(first)  # the same factory again (a module reload) is fine
    with pytest.raises(ValueError, match="already registered"):
        register_model("DUP")(second)
    register_model("dup", replace=True)(second)
    assert registry["dup"] is second


def test_register_returns_the_factory_unchanged(registry):
    class Custom(nn.Linear):
        def __init__(self, *, input_shape, num_classes, activation=None, dropout=0.0):
            super().__init__(input_shape[0], num_classes)

    assert register_model("custom")(Custom) is Custom


@pytest.mark.parametrize("name", ["", "   ", None])
def test_bad_names_raise(name):
    with pytest.raises(ValueError, match="non-empty"):
        register_model(name)


def test_factory_must_return_a_module(registry):
    register_model("not-a-net")(lambda **kwargs: "net")
    with pytest.raises(TypeError, match="not an nn.Module"):
        build_model("not-a-net", input_shape=(2,), num_classes=2)


def test_plain_user_modules_get_input_shape_and_num_classes(registry):
    @register_model("plain")
    def plain(*, input_shape, num_classes, activation=None, dropout=0.0, **options):
        return nn.Sequential(nn.Flatten(), nn.Linear(4, num_classes))

    net = build_model("plain", input_shape=[2, 2], num_classes=3, anything="accepted by **options")
    assert net.input_shape == (2, 2) and net.num_classes == 3


# ---- model strings ---------------------------------------------------------------------------------


def _widths(net: nn.Module) -> list[int]:
    return [m.out_features for m in net.modules() if isinstance(m, nn.Linear)][:-1]


def test_a_bare_mlp_has_two_hidden_layers_of_256():
    net = build_model("mlp", input_shape=(1,), num_classes=1)
    assert isinstance(net, MLP) and DEFAULT_MLP_WIDTHS == (256, 256)
    assert _widths(net) == [256, 256] and net(torch.zeros(3, 1)).shape == (3, 1)


def test_the_widest_model_string_parses():
    assert parse_model_spec("mlp:2147483647,7") == ModelSpec("mlp", {"hidden_widths": (2**31 - 1, 7)})
    assert parse_model_spec("lenet:2147483647") == ModelSpec("lenet", {"width": 2**31 - 1})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mlp:\u0661\u0666", "hidden widths must be positive ints, got '\u0661\u0666'"),  # Arabic-Indic 16, was built
        ("mlp:016", "hidden widths must be positive ints, got '016'"),  # was width 16
        ("mlp:2147483647,007", "hidden widths must be positive ints, got '007'"),
        ("wrn:16,\u0664", "WIDEN must be a positive int, got '\u0664'"),  # was WRN-16-4
        ("wrn:016,4", "DEPTH must be a positive int, got '016'"),
        ("lenet:02", "lenet takes one width multiplier, a positive int (lenet:2), got '02'"),  # refused before too
        ("lenet:\u0662", "lenet takes one width multiplier, a positive int (lenet:2), got '\u0662'"),
    ],
)
def test_every_model_reads_its_numbers_by_one_rule(spec, message):
    """mlp and wrn took any str.isdecimal() number, Arabic-Indic digits and leading zeros, where lenet took only
    [1-9][0-9]*; all three now take ASCII digits without a leading zero, and say so."""
    with pytest.raises(ValueError) as info:
        parse_model_spec(spec)
    name = spec.partition(":")[0]
    expected = {"mlp": "mlp:W1,W2,...", "wrn": "wrn:DEPTH,WIDEN", "lenet": "lenet:M"}[name]
    assert str(info.value) == f"model {spec!r}: {message} (ASCII digits without a leading zero); expected {expected}"


@pytest.mark.parametrize(("spec", "widths"), [("mlp:16,8", [16, 8]), (" MLP: 16 , 8 ", [16, 8]), ("mlp:5", [5])])
def test_mlp_strings_give_the_hidden_widths(spec, widths):
    assert parse_model_spec(spec) == ModelSpec("mlp", {"hidden_widths": tuple(widths)})
    assert _widths(build_model(spec, input_shape=(2,), num_classes=3)) == widths


def test_names_without_arguments_parse_to_no_options():
    assert parse_model_spec("3FC") == ModelSpec("3fc") and parse_model_spec("mlp:") == ModelSpec("mlp")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mlp:0", "model 'mlp:0': hidden widths must be positive ints, got '0'; expected mlp:W1,W2,..."),
        ("mlp:a", "model 'mlp:a': hidden widths must be positive ints, got 'a'"),
        ("mlp:16,,8", "got ''"),
        ("mlp:-3", "got '-3'"),
        ("mlp:1.5", "got '1.5'"),
        ("3fc:500", "model '3fc' takes no arguments after ':', got '3fc:500'"),
        ("resnet:18", "unknown model 'resnet' (in 'resnet:18'); expected one of 3fc, bbb-mlp, conv, lenet[:M]"),
        ("", "a model must be a non-empty string"),
        # widths past 2**31 - 1 crashed in torch's layer constructors with a C++ stack trace
        ("mlp:4," + "9" * 20, "hidden widths must be at most 2147483647 (2**31 - 1), got '" + "9" * 20 + "'"),
        ("mlp:2147483648", "hidden widths must be at most 2147483647 (2**31 - 1), got '2147483648'"),
        ("mlp:" + "9" * 5000, "hidden widths must be at most 2147483647"),
        ("lenet:" + "9" * 20, "lenet's width multiplier must be at most 2147483647 (2**31 - 1), got '9999"),
        ("wrn:28," + "9" * 20, "WIDEN must be at most 2147483647 (2**31 - 1), got '9999"),
    ],
)
def test_bad_model_strings_fail_in_one_line(spec, message):
    with pytest.raises(ValueError) as info:
        parse_model_spec(spec)
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError):
        build_model(spec, input_shape=(2,), num_classes=2)


def test_an_option_in_the_string_and_as_a_keyword_is_refused():
    with pytest.raises(TypeError, match=r"\['hidden_widths'\] given both"):
        build_model("mlp:4", input_shape=(2,), num_classes=2, hidden_widths=(8,))


def test_model_usage_shows_the_string_forms():
    assert model_usage("mlp") == "mlp[:W1,W2,...]" and model_usage("3FC") == "3fc"


def test_user_models_can_take_arguments(registry):
    def parse(args):
        return {"width": int(args[0])}

    @register_model("wide", arguments=ModelArguments("WIDTH", parse))
    def wide(*, input_shape, num_classes, activation=None, dropout=0.0, width=3):
        return ThreeFC(input_shape, num_classes, activation=activation, dropout=dropout, width=width)

    assert _widths(build_model("wide:7", input_shape=(2,), num_classes=2)) == [7, 7, 7]
    with pytest.raises(ValueError, match=r"model 'wide:x': invalid literal .*; expected wide:WIDTH"):
        parse_model_spec("wide:x")
    register_model("wide", replace=True)(wide)  # re-registered without arguments: the string form goes too
    with pytest.raises(ValueError, match="takes no arguments"):
        parse_model_spec("wide:7")


def test_names_cannot_hold_a_colon(registry):
    with pytest.raises(ValueError, match="cannot hold ':'"):
        register_model("mlp:2")
