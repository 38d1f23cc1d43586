"""The CIFAR-size models: torchvision's VGG16 / ResNet-18 / ResNet-50 (adapted) and the pre-activation WRN."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call

from pyro_bnn.models import available_models, build_model, parse_model_spec, torchvision_resnet
from pyro_bnn.spec.catalogue import listing

CIFAR = (3, 32, 32)
LARGE = ["vgg16", "vgg16-bn", "resnet18", "resnet50", "wrn28x10", "wrn:16,4"]

# Parameter counts written out independently of the implementations (weights + biases, BatchNorm weight + bias).
VGG16_CONVS = [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]


def vgg16_count(in_channels: int, num_classes: int, *, batch_norm: bool) -> int:
    total, previous = 0, in_channels
    for out in VGG16_CONVS:
        total += previous * out * 9 + out + (2 * out if batch_norm else 0)
        previous = out
    return total + (512 * 512 + 512) + (512 * 512 + 512) + (512 * num_classes + num_classes)


def conv_bn(in_channels: int, out_channels: int, kernel: int) -> int:
    """A bias-free convolution followed by BatchNorm."""
    return in_channels * out_channels * kernel * kernel + 2 * out_channels


def resnet18_cifar_count(in_channels: int, num_classes: int) -> int:
    total = conv_bn(in_channels, 64, 3)  # the CIFAR stem
    previous = 64
    for width in (64, 128, 256, 512):
        for block in range(2):
            total += conv_bn(previous, width, 3) + conv_bn(width, width, 3)
            if block == 0 and previous != width:
                total += conv_bn(previous, width, 1)  # downsample
            previous = width
    return total + 512 * num_classes + num_classes


def resnet50_cifar_count(in_channels: int, num_classes: int) -> int:
    total = conv_bn(in_channels, 64, 3)
    previous = 64
    for width, blocks in zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True):
        for block in range(blocks):
            total += conv_bn(previous, width, 1) + conv_bn(width, width, 3) + conv_bn(width, 4 * width, 1)
            if block == 0:
                total += conv_bn(previous, 4 * width, 1)  # downsample (channels always change here)
            previous = 4 * width
    return total + 2048 * num_classes + num_classes


def wrn_count(depth: int, k: int, in_channels: int, num_classes: int) -> int:
    """Closed form: stem, then per group a first block (BN a, conv a->b, BN b, conv b->b, 1x1 a->b if a != b)
    and n - 1 blocks (2 BN b, 2 conv b->b), then BN and the linear layer."""
    n = (depth - 4) // 6
    total = in_channels * 16 * 9
    a = 16
    for b in (16 * k, 32 * k, 64 * k):
        total += 2 * a + 9 * a * b + 2 * b + 9 * b * b + (a * b if a != b else 0)
        total += (n - 1) * (4 * b + 18 * b * b)
        a = b
    return total + 2 * a + a * num_classes + num_classes


def count(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def one_line_error(info: pytest.ExceptionInfo) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", LARGE)
def test_builds_for_cifar_and_maps_a_batch_to_logits(name):
    assert parse_model_spec(name).name in available_models()
    net = build_model(name, input_shape=CIFAR, num_classes=10).eval()
    assert tuple(net.input_shape) == CIFAR and net.num_classes == 10
    with torch.no_grad():
        out = net(torch.randn(2, *CIFAR))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    assert not any(getattr(m, "inplace", False) for m in net.modules())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vgg16", vgg16_count(3, 10, batch_norm=False)),
        ("vgg16-bn", vgg16_count(3, 10, batch_norm=True)),
        ("resnet18", resnet18_cifar_count(3, 10)),
        ("resnet50", resnet50_cifar_count(3, 10)),
        ("wrn28x10", wrn_count(28, 10, 3, 10)),
        ("wrn", wrn_count(28, 10, 3, 10)),
        ("wrn:16,4", wrn_count(16, 4, 3, 10)),
    ],
)
def test_parameter_counts(name, expected):
    assert count(build_model(name, input_shape=CIFAR, num_classes=10)) == expected


def test_closed_forms_agree_with_the_published_figures():
    assert vgg16_count(3, 10, batch_norm=False) == 15_245_130
    assert resnet18_cifar_count(3, 10) == 11_173_962  # the usual "11.2 M" of CIFAR ResNet-18
    assert resnet50_cifar_count(3, 10) == 23_520_842
    assert 36.4e6 < wrn_count(28, 10, 3, 10) < 36.6e6  # "36.5 M" in Zagoruyko & Komodakis, Table 4
    assert 2.7e6 < wrn_count(16, 4, 3, 10) < 2.8e6  # "2.7 M"


def test_vgg16_classifier_and_channel_adaptation():
    net = build_model("vgg16", input_shape=(5, 32, 32), num_classes=7, dropout=0.5)
    assert net.features[0].in_channels == 5
    assert [(m.in_features, m.out_features) for m in (net.fc1, net.fc2, net.out)] == [(512, 512), (512, 512), (512, 7)]
    assert [name for name, _ in net.named_children()][1:] == [
        *("flatten", "fc1", "act1", "drop1", "fc2", "act2", "drop2", "out"),
    ]
    assert all(m.p == 0.5 for m in net.modules() if isinstance(m, nn.Dropout))
    # Larger images feed 512 h w features to fc1, without adaptive pooling: 70 -> 35 -> 17 -> 8 -> 4 -> 2.
    assert build_model("vgg16", input_shape=(3, 64, 70), num_classes=10).fc1.in_features == 512 * 2 * 2


def test_resnet_stems():
    small = build_model("resnet18", input_shape=(1, 28, 28), num_classes=10)
    assert (small.conv1.in_channels, small.conv1.kernel_size, small.conv1.stride) == (1, (3, 3), (1, 1))
    assert isinstance(small.maxpool, nn.Identity)
    large = build_model("resnet18", input_shape=(4, 96, 96), num_classes=10)
    assert (large.conv1.in_channels, large.conv1.kernel_size, large.conv1.stride) == (4, (7, 7), (2, 2))
    assert isinstance(large.maxpool, nn.MaxPool2d)
    with torch.no_grad():
        assert large.eval()(torch.randn(1, 4, 96, 96)).shape == (1, 10)


def test_grayscale_28x28():
    net = build_model("resnet18", input_shape=(1, 28, 28), num_classes=10).eval()
    with torch.no_grad():
        assert net(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    wrn = build_model("wrn:10,1", input_shape=(1, 28, 28), num_classes=10).eval()
    with torch.no_grad():
        assert wrn(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    for name in ("vgg16", "vgg16-bn"):
        with pytest.raises(ValueError, match="at least 32x32") as info:
            build_model(name, input_shape=(1, 28, 28), num_classes=10)
        assert "(1, 28, 28)" in one_line_error(info)


def test_wrn_structure():
    net = build_model("wrn:16,4", input_shape=CIFAR, num_classes=10)
    assert [name for name, _ in net.named_children()] == [
        *("conv1", "group1", "group2", "group3", "bn", "act", "pool", "flatten", "out"),
    ]
    for group, width, stride in zip((net.group1, net.group2, net.group3), (64, 128, 256), (1, 2, 2), strict=True):
        assert [name for name, _ in group.named_children()] == ["block1", "block2"]
        first, second = group.block1, group.block2
        assert first.conv1.stride == (stride, stride) and first.conv2.out_channels == width
        assert first.shortcut.kernel_size == (1, 1) and second.shortcut is None
        assert first.drop is None
    assert (net.out.in_features, net.out.out_features) == (256, 10)
    widths = build_model("wrn28x10", input_shape=CIFAR, num_classes=10)
    assert len(widths.group3) == 4 and widths.out.in_features == 640


def test_wrn_forward_backward():
    net = build_model("wrn:16,4", input_shape=CIFAR, num_classes=10, dropout=0.3).train()
    assert sum(isinstance(m, nn.Dropout) for m in net.modules()) == 6
    out = net(torch.randn(2, *CIFAR))
    assert out.shape == (2, 10)
    nn.functional.cross_entropy(out, torch.tensor([1, 2])).backward()
    grads = [p.grad for p in net.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert net.conv1.weight.grad.abs().sum() > 0


def test_wrn_takes_any_activation():
    net = build_model("wrn:10,1", input_shape=(3, 8, 8), num_classes=3, activation="tanh")
    assert sum(isinstance(m, nn.Tanh) for m in net.modules()) == 3 * 2 + 1
    assert not any(isinstance(m, nn.ReLU) for m in net.modules())


@pytest.mark.parametrize("spec", ["wrn:27,4", "wrn:4,1", "wrn:16", "wrn:16,0", "wrn:16,x"])
def test_bad_wrn_strings(spec):
    with pytest.raises(ValueError, match=spec) as info:
        build_model(spec, input_shape=CIFAR, num_classes=10)
    one_line_error(info)


@pytest.mark.parametrize("depth", [27, 4, 0, 12.0])
def test_bad_wrn_depth_option(depth):
    with pytest.raises(ValueError, match=r"depth must be .*got " + str(depth)) as info:
        build_model("wrn", input_shape=CIFAR, num_classes=10, depth=depth)
    one_line_error(info)


@pytest.mark.parametrize("name", ["vgg16", "vgg16-bn", "resnet18", "resnet50"])
def test_torchvision_models_take_relu_only(name):
    relu = {"vgg16": "relu", "vgg16-bn": "ReLU", "resnet18": nn.ReLU, "resnet50": nn.ReLU()}[name]
    build_model(name, input_shape=CIFAR, num_classes=2, activation=relu)
    with pytest.raises(ValueError, match="tanh") as info:
        build_model(name, input_shape=CIFAR, num_classes=10, activation="tanh")
    assert "ReLU" in one_line_error(info)
    with pytest.raises(ValueError, match="swish"):
        build_model(name, input_shape=CIFAR, num_classes=10, activation="swish")


@pytest.mark.parametrize("depth", [34, True, 18.0, "18", [18]])
def test_torchvision_resnet_refuses_another_depth_in_one_line(depth):
    """It raised a bare KeyError 34 (TypeError for a list)."""
    with pytest.raises(ValueError) as info:
        torchvision_resnet(depth, (3, 32, 32), 10)
    assert str(info.value) == f"resnet depth must be 18 or 50, got {depth!r}"


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_resnets_refuse_dropout(name):
    with pytest.raises(ValueError, match="dropout must be 0, got 0.1") as info:
        build_model(name, input_shape=CIFAR, num_classes=10, dropout=0.1)
    one_line_error(info)


@pytest.mark.parametrize(("name", "input_shape"), [("resnet18", (3, 8, 8)), ("wrn:10,1", (3, 8, 8))])
def test_eval_mode_vmap_over_parameter_samples_matches_a_loop(name, input_shape):
    net = build_model(name, input_shape=input_shape, num_classes=4).eval()
    x = torch.randn(2, *input_shape)
    # Scaled copies (cheaper than fresh noise on 11 M weights) give two different functions.
    params = {k: torch.stack([p.detach(), 1.05 * p.detach()]) for k, p in net.named_parameters()}
    with torch.no_grad():
        vmapped = torch.vmap(lambda p: functional_call(net, p, (x,)))(params)
        looped = torch.stack([functional_call(net, {k: v[i] for k, v in params.items()}, (x,)) for i in range(2)])
    torch.testing.assert_close(vmapped, looped, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(vmapped[0], vmapped[1])


def test_listed_by_pyro_bnn_list():
    text = listing()
    for label in ("vgg16 ", "vgg16-bn ", "resnet18 ", "resnet50 ", "wrn28x10 ", "wrn[:DEPTH,WIDEN] "):
        assert f"\n  {label}" in text
