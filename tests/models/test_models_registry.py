"""The model registry: lookup, options, user registration and its errors."""

import pytest
import torch
from torch import nn

from pyro_bnn.models import ThreeFC, available_models, build_model, register_model
from pyro_bnn.models import registry as registry_module

ZOO = ["3fc", "bbb-mlp", "conv", "lenet", "mlp", "tanh-cnn", "tanh-small"]


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, so user registrations in a test do not leak into others."""
    monkeypatch.setattr(registry_module, "_REGISTRY", dict(registry_module._REGISTRY))
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
        build_model("lenet", input_shape=(1, 28, 28), num_classes=10, width=3)


def test_activation_none_means_the_model_default():
    tanh_net = build_model("tanh-small", input_shape=(2,), num_classes=2, activation=None)
    assert isinstance(tanh_net.act1, nn.Tanh)
    relu_net = build_model("tanh-small", input_shape=(2,), num_classes=2, activation="relu")
    assert isinstance(relu_net.act1, nn.ReLU)


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
        pass

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
