"""Every zoo model: architecture, parameter counts, functional_call + vmap purity, activation, dropout."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode

from pyro_bnn.models import available_models, build_model
from pyro_bnn.models.registry import _REGISTRY
from pyro_bnn.nn import LeakyReLU


@dataclass(frozen=True)
class Case:
    input_shape: tuple[int, ...]
    num_classes: int
    num_parameters: int
    layers: list[str]
    default_activation: type[nn.Module]
    kwargs: dict = field(default_factory=dict)


# Layer lists and parameter counts written out by hand (weights + biases per layer).
CASES = {
    "3fc": Case(
        (1, 28, 28),
        10,
        784 * 1000 + 1000 + 2 * (1000 * 1000 + 1000) + 1000 * 10 + 10,
        [
            "Flatten",
            "Linear(784, 1000)",
            "act",
            "Linear(1000, 1000)",
            "act",
            "Linear(1000, 1000)",
            "act",
            "Linear(1000, 10)",
        ],
        nn.ReLU,
    ),
    "conv": Case(
        (1, 28, 28),
        10,
        (1 * 128 * 25 + 128) + (128 * 256 * 25 + 256) + (256 * 7 * 7 * 10 + 10),
        [
            "Conv2d(1, 128, k5, s2, p2)",
            "act",
            "Conv2d(128, 256, k5, s2, p2)",
            "act",
            "Flatten",
            "Linear(12544, 10)",
        ],
        nn.ReLU,
    ),
    "bbb-mlp": Case(
        (1, 28, 28),
        10,
        (784 * 400 + 400) + (400 * 400 + 400) + (400 * 10 + 10),
        ["Flatten", "Linear(784, 400)", "act", "Linear(400, 400)", "act", "Linear(400, 10)"],
        nn.ReLU,
    ),
    "tanh-small": Case(
        (2,),
        2,
        (2 * 5 + 5) + (5 * 5 + 5) + (5 * 2 + 2),
        ["Flatten", "Linear(2, 5)", "act", "Linear(5, 5)", "act", "Linear(5, 2)"],
        nn.Tanh,
    ),
    "tanh-cnn": Case(
        (1, 28, 28),
        10,
        (1 * 32 * 25 + 32) + (32 * 32 * 25 + 32) + (512 * 64 + 64) + (64 * 10 + 10),
        [
            "Conv2d(1, 32, k5, s1, p0)",
            "act",
            "MaxPool2d(2)",
            "Conv2d(32, 32, k5, s1, p0)",
            "act",
            "MaxPool2d(2)",
            "Flatten",
            "Linear(512, 64)",
            "act",
            "Linear(64, 10)",
        ],
        nn.Tanh,
    ),
    "lenet": Case(
        (1, 28, 28),
        10,
        (1 * 6 * 25 + 6) + (6 * 16 * 25 + 16) + (16 * 120 * 16 + 120) + (120 * 64 + 64) + (64 * 10 + 10),
        [
            "Conv2d(1, 6, k5, s1, p0)",
            "act",
            "MaxPool2d(2)",
            "Conv2d(6, 16, k5, s1, p0)",
            "act",
            "MaxPool2d(2)",
            "Conv2d(16, 120, k4, s1, p0)",
            "act",
            "Flatten",
            "Linear(120, 64)",
            "act",
            "Linear(64, 10)",
        ],
        nn.ReLU,
    ),
    "mlp": Case(
        (1, 28, 28),
        10,
        (784 * 16 + 16) + (16 * 8 + 8) + (8 * 10 + 10),
        ["Flatten", "Linear(784, 16)", "act", "Linear(16, 8)", "act", "Linear(8, 10)"],
        nn.ReLU,
        {"hidden_widths": (16, 8)},
    ),
}
NAMES = sorted(CASES)


def describe(net: nn.Module) -> list[str]:
    """The net's layers as short strings; every activation is ``"act"``."""
    out = []
    for module in net.children():
        if isinstance(module, nn.Linear):
            out.append(f"Linear({module.in_features}, {module.out_features})")
        elif isinstance(module, nn.Conv2d):
            out.append(
                f"Conv2d({module.in_channels}, {module.out_channels}, k{module.kernel_size[0]}, "
                f"s{module.stride[0]}, p{module.padding[0]})"
            )
        elif isinstance(module, nn.MaxPool2d):
            out.append(f"MaxPool2d({module.kernel_size})")
        elif isinstance(module, nn.Flatten):
            out.append("Flatten")
        elif isinstance(module, nn.Dropout):
            out.append("Dropout")
        else:
            out.append("act")
    return out


# Narrower versions of the big nets (same code path) for the tests that run them many times.
SLIM = {"3fc": {"width": 24}, "bbb-mlp": {"width": 24}, "conv": {"channels": (8, 16)}}


def build(name: str, *, slim: bool = False, **overrides) -> nn.Module:
    case = CASES[name]
    arguments = {"input_shape": case.input_shape, "num_classes": case.num_classes, **case.kwargs}
    if slim:
        arguments.update(SLIM.get(name, {}))
    return build_model(name, **{**arguments, **overrides})


def batch(name: str, size: int = 4, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.randn(size, *CASES[name].input_shape, dtype=dtype).to(device)


def activations(net: nn.Module) -> list[nn.Module]:
    return [module for name, module in net.named_children() if name.startswith("act")]


LARGE_MODEL_MODULES = ("pyro_bnn.models.torchvision_models", "pyro_bnn.models.wrn")
"""The VGG/ResNet/WRN networks: not sequential layer lists, tested in test_large_models.py."""


def test_every_zoo_model_has_a_case():
    zoo = {
        name
        for name in available_models()
        if _REGISTRY[name].__module__.startswith("pyro_bnn.models")
        and _REGISTRY[name].__module__ not in LARGE_MODEL_MODULES
    }
    assert zoo == set(CASES)


@pytest.mark.parametrize("name", NAMES)
def test_architecture_and_parameter_count(name):
    case = CASES[name]
    net = build(name)
    assert describe(net) == case.layers
    assert sum(p.numel() for p in net.parameters()) == case.num_parameters
    assert net.input_shape == case.input_shape and net.num_classes == case.num_classes
    assert all(type(m) is case.default_activation for m in activations(net))
    assert list(net.buffers()) == []


def test_hand_counts_of_the_headline_nets():
    # Literal totals, as quoted in the papers' and this library's docs.
    assert CASES["3fc"].num_parameters == 2_797_010
    assert CASES["conv"].num_parameters == 948_234
    assert CASES["bbb-mlp"].num_parameters == 478_410
    assert CASES["tanh-small"].num_parameters == 57
    assert CASES["tanh-cnn"].num_parameters == 59_946
    assert CASES["lenet"].num_parameters == 41_806


@pytest.mark.parametrize(
    ("name", "overrides", "expected"),
    [
        ("bbb-mlp", {"width": 1200}, (784 * 1200 + 1200) + (1200 * 1200 + 1200) + (1200 * 10 + 10)),
        ("3fc", {"width": 50, "input_shape": (2,)}, (2 * 50 + 50) + 2 * (50 * 50 + 50) + (50 * 10 + 10)),
        ("tanh-small", {"widths": (4, 3, 2)}, (2 * 4 + 4) + (4 * 3 + 3) + (3 * 2 + 2) + (2 * 2 + 2)),
        (
            "conv",
            {"channels": (8, 16), "input_shape": (3, 32, 32)},
            (3 * 8 * 25 + 8) + (8 * 16 * 25 + 16) + (16 * 8 * 8 * 10 + 10),
        ),
        ("mlp", {"hidden_widths": (), "input_shape": (5,), "num_classes": 3}, 5 * 3 + 3),
    ],
)
def test_options_change_the_parameter_count(name, overrides, expected):
    assert sum(p.numel() for p in build(name, **overrides).parameters()) == expected


@pytest.mark.parametrize("name", NAMES)
def test_output_shape(name, device):
    out = build(name).to(device)(batch(name, size=5, device=device))
    assert out.shape == (5, CASES[name].num_classes)
    assert torch.isfinite(out).all()


def stacked_parameters(net: nn.Module, num_samples: int) -> dict[str, torch.Tensor]:
    """``num_samples`` perturbed copies of every parameter, stacked along a new leading dimension."""
    return {
        name: torch.stack([p.detach() + 0.05 * torch.randn_like(p) for _ in range(num_samples)])
        for name, p in net.named_parameters()
    }


@pytest.mark.parametrize("name", NAMES)
def test_vmap_over_parameter_samples_matches_a_loop(name, device):
    net = build(name, slim=True).to(device, torch.float64)
    x = batch(name, dtype=torch.float64, device=device)
    params = stacked_parameters(net, 3)
    before = {k: v.clone() for k, v in net.state_dict().items()}

    vmapped = torch.vmap(lambda p: functional_call(net, p, (x,)), randomness="different")(params)
    looped = torch.stack([functional_call(net, {k: v[i] for k, v in params.items()}, (x,)) for i in range(3)])

    assert vmapped.shape == (3, 4, CASES[name].num_classes)
    torch.testing.assert_close(vmapped, looped, rtol=1e-10, atol=1e-12)
    # The samples really are different functions, and the net's own parameters were not touched.
    assert not torch.allclose(vmapped[0], vmapped[1])
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


@pytest.mark.parametrize("name", NAMES)
def test_gradients_through_vmap_match_a_loop(name, device):
    net = build(name, slim=True).to(device, torch.float64)
    x = batch(name, size=2, dtype=torch.float64, device=device)
    params = {k: v.requires_grad_(True) for k, v in stacked_parameters(net, 3).items()}

    vmapped = torch.vmap(lambda p: functional_call(net, p, (x,)), randomness="different")(params)
    vmapped_grads = torch.autograd.grad(vmapped.square().sum(), list(params.values()))
    looped = [functional_call(net, {k: v[i] for k, v in params.items()}, (x,)) for i in range(3)]
    looped_grads = torch.autograd.grad(sum(out.square().sum() for out in looped), list(params.values()))

    for got, expected in zip(vmapped_grads, looped_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


class _MutationRecorder(TorchDispatchMode):
    """Records every ATen op whose schema says it writes to an argument (``relu_``, ``add_``, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.mutating_ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.is_mutable:
            self.mutating_ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", NAMES)
def test_no_inplace_modules_or_ops(name):
    # Dropout modules present but in eval mode: train-mode dropout fills its own fresh mask in place.
    net = build(name, slim=True, dropout=0.5).eval()
    assert not any(getattr(m, "inplace", False) for m in net.modules())
    x = batch(name)
    with _MutationRecorder() as recorder:
        net(x)
    assert recorder.mutating_ops == []


@pytest.mark.parametrize("name", NAMES)
def test_activation_argument_is_used(name):
    net = build(name, slim=True)
    swapped = build(name, slim=True, activation="leaky:-1")
    swapped.load_state_dict(net.state_dict())
    acts = activations(swapped)
    assert len(acts) == len(activations(net)) == CASES[name].layers.count("act")
    assert all(isinstance(m, LeakyReLU) and m.slope == -1.0 for m in acts)
    assert len({id(m) for m in acts}) == len(acts)  # one module per layer
    x = batch(name)
    assert not torch.allclose(net(x), swapped(x))


@pytest.mark.parametrize("name", NAMES)
def test_module_and_factory_activations_are_one_per_layer(name):
    from_module = activations(build(name, slim=True, activation=nn.ELU()))
    from_factory = activations(build(name, slim=True, activation=nn.SiLU))
    assert all(type(m) is nn.ELU for m in from_module) and all(type(m) is nn.SiLU for m in from_factory)
    assert len({id(m) for m in from_module}) == len(from_module)


@pytest.mark.parametrize("name", NAMES)
def test_dropout_follows_every_hidden_activation_iff_positive(name):
    plain = build(name, slim=True, dropout=0.0)
    assert not any(isinstance(m, nn.Dropout) for m in plain.modules())

    net = build(name, slim=True, dropout=0.25)
    expected = []
    for layer in describe(plain):
        expected += [layer, "Dropout"] if layer == "act" else [layer]
    assert describe(net) == expected
    assert expected.count("Dropout") == CASES[name].layers.count("act")
    assert all(m.p == 0.25 for m in net.modules() if isinstance(m, nn.Dropout))

    # Same parameters as the deterministic net; eval mode switches dropout off exactly.
    plain.load_state_dict(net.state_dict())
    x = batch(name)
    torch.testing.assert_close(net.eval()(x), plain(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_dropout_under_vmap_draws_a_mask_per_sample(name):
    net = build(name, slim=True, dropout=0.5).train()
    x = batch(name)
    same = {k: torch.stack([p.detach()] * 2) for k, p in net.named_parameters()}
    out = torch.vmap(lambda p: functional_call(net, p, (x,)), randomness="different")(same)
    assert not torch.allclose(out[0], out[1])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad_shape", [(), (0, 28, 28), (1, -28, 28), "abc", (1.5,), 784, (True,)])
def test_invalid_input_shapes_raise(name, bad_shape):
    with pytest.raises(ValueError, match="input_shape") as info:
        build(name, input_shape=bad_shape)
    assert repr(bad_shape) in str(info.value)


@pytest.mark.parametrize("name", ["conv", "tanh-cnn", "lenet"])
@pytest.mark.parametrize("bad_shape", [(784,), (28, 28), (1, 28, 28, 1)])
def test_image_models_reject_non_image_shapes(name, bad_shape):
    with pytest.raises(ValueError, match=r"\(channels, height, width\)") as info:
        build(name, input_shape=bad_shape)
    assert str(bad_shape) in str(info.value)


@pytest.mark.parametrize(
    ("name", "bad_shape", "minimum"),
    [
        ("lenet", (1, 27, 28), "28x28"),
        ("lenet", (1, 28, 20), "28x28"),
        ("lenet", (3, 8, 8), "28x28"),
        ("tanh-cnn", (1, 15, 16), "16x16"),
        ("tanh-cnn", (1, 28, 4), "16x16"),
    ],
)
def test_images_too_small_for_the_kernels_raise(name, bad_shape, minimum):
    with pytest.raises(ValueError, match=minimum) as info:
        build(name, input_shape=bad_shape)
    assert str(bad_shape) in str(info.value)


@pytest.mark.parametrize(
    ("name", "input_shape", "first_linear_in"),
    [
        ("lenet", (1, 28, 28), 120),
        ("lenet", (3, 32, 32), 120 * 2 * 2),  # 32 -> 28 -> 14 -> 10 -> 5 -> 2
        ("tanh-cnn", (1, 16, 16), 32 * 1 * 1),  # the smallest that fits: 16 -> 12 -> 6 -> 2 -> 1
        ("tanh-cnn", (3, 32, 30), 32 * 5 * 4),  # 32 -> 28 -> 14 -> 10 -> 5; 30 -> 26 -> 13 -> 9 -> 4
        ("conv", (1, 1, 1), 256 * 1 * 1),
        ("conv", (3, 29, 31), 256 * 8 * 8),  # ceil(ceil(29 / 2) / 2) = 8, ceil(ceil(31 / 2) / 2) = 8
        ("3fc", (3, 8, 8), 192),
        ("bbb-mlp", (5,), 5),
    ],
)
def test_other_input_sizes_are_sized_exactly(name, input_shape, first_linear_in):
    net = build(name, input_shape=input_shape)
    first_linear = next(m for m in net.modules() if isinstance(m, nn.Linear))
    assert first_linear.in_features == first_linear_in
    assert net(torch.randn(2, *input_shape)).shape == (2, CASES[name].num_classes)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"num_classes": 0}, "num_classes"),
        ({"num_classes": 2.0}, "num_classes"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": -0.1}, "dropout"),
        ({"dropout": float("nan")}, "dropout"),
        ({"activation": "swish"}, "swish"),
        ({"activation": "leaky:nan"}, "leaky:nan"),
    ],
)
def test_invalid_arguments_raise(name, overrides, match):
    with pytest.raises(ValueError, match=match):
        build(name, **overrides)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("3fc", {"width": 0}),
        ("bbb-mlp", {"width": -400}),
        ("tanh-small", {"widths": (5, 0)}),
        ("conv", {"channels": (128,)}),
        ("mlp", {"hidden_widths": 16}),
    ],
)
def test_invalid_widths_raise(name, overrides):
    with pytest.raises(ValueError):
        build(name, **overrides)


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        # conv: TypeError "object of type 'int' has no len()"
        ("conv", {"channels": 5}, "channels must be a sequence of two positive ints, got 5"),
        ("conv", {"channels": "ab"}, "channels must be a sequence of two positive ints, got 'ab'"),
        # tanh-small: named hidden_widths, the MLP's option, not the widths the caller passed
        ("tanh-small", {"widths": 5}, "widths must be a sequence of ints >= 1, got 5"),
        ("tanh-small", {"widths": (5, 0)}, "every entry of widths must be an int >= 1, got 0"),
    ],
)
def test_invalid_widths_are_named_as_given_in_one_line(name, overrides, message):
    with pytest.raises(ValueError) as info:
        build(name, **overrides)
    assert str(info.value) == message


@pytest.mark.parametrize("name", NAMES)
def test_slices_are_plain_sequentials(name):
    net = build(name, slim=True)
    features = net[:-1]
    assert type(features) is nn.Sequential and list(features) == list(net)[:-1]
    x = batch(name)
    torch.testing.assert_close(net.out(features(x)), net(x), rtol=0, atol=0)
    assert net[-1] is net.out
