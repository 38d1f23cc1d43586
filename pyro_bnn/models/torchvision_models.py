"""VGG16 and ResNet-18/50 from torchvision (never pretrained), adapted to small images and any channel count.

torchvision is imported when a model is built, not when this module registers them, so ``import pyro_bnn``
stays fast. Every in-place ReLU of torchvision's modules is switched to out-of-place, as in the rest of the
zoo, so the nets can run under ``torch.func.functional_call`` and ``torch.vmap`` without writing into their
inputs. (torchvision's residual blocks still add the shortcut with ``out += identity``, an in-place add on a
fresh intermediate tensor, which autograd and ``vmap`` accept.)
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from pyro_bnn.checks import positive_int
from pyro_bnn.models.base import SequentialNet, dropout_probability, hidden_activation
from pyro_bnn.models.registry import register_model
from pyro_bnn.models.shapes import SpatialStage, as_image_shape, final_spatial_size
from pyro_bnn.nn import ActivationLike, make_activation

_VGG_POOL: SpatialStage = (2, 2, 0)
_VGG16_CONFIG = "D"
"""torchvision's name of the VGG16 layer configuration (13 convolutions, 5 max-pools)."""

SMALL_IMAGE_SIDE = 64
"""ResNets get the CIFAR stem when both image sides are at most this."""


def _check_relu(activation: ActivationLike | None, model: str) -> None:
    """Accepts None or anything ``make_activation`` builds into a plain ``nn.ReLU``; raises ``ValueError``."""
    if activation is None:
        return
    if type(make_activation(activation)) is not nn.ReLU:
        raise ValueError(f"{model} uses ReLU throughout; activation must be None or 'relu', got {activation!r}")


def _out_of_place_relus(net: nn.Module) -> None:
    for module in net.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False


def _init_conv(conv: nn.Conv2d) -> nn.Conv2d:
    """torchvision's initialisation of VGG and ResNet convolutions: He-normal (fan out), zero bias."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


class VGG16(SequentialNet):
    """VGG16's 13 convolutions (torchvision) with the CIFAR classifier ``512-512-num_classes``.

    ``features`` is torchvision's VGG16 feature extractor (``torchvision.models.vgg.make_layers`` with
    configuration ``"D"``, the layers ``vgg16(weights=None).features`` holds, initialised as torchvision's
    ``VGG`` does: He-normal fan-out convolutions, zero biases, unit BatchNorm), with its first convolution
    taking ``C`` input channels; the rest: ``flatten``, ``fc1`` = ``Linear(512 h w, 512)``, ``act1``,
    [``drop1``], ``fc2`` = ``Linear(512, 512)``, ``act2``, [``drop2``], ``out`` = ``Linear(512, num_classes)``
    (PyTorch's default initialisation). Five 2x2 max-pools give ``h = floor(H / 32)``, ``w = floor(W / 32)``:
    1x1 for 32x32 inputs, as in the implicit-BNN paper; larger images feed ``512 h w`` features to ``fc1``, with
    no adaptive pooling. Images need sides of at least 32. The ``features`` keep torchvision's numeric layer
    names (``features.0.weight``), so torchvision's VGG16 feature weights load into them.

    Args:
        input_shape: ``(channels, height, width)``, e.g. ``(3, 32, 32)``.
        num_classes: Output size.
        batch_norm: Use ``vgg16_bn``'s features (BatchNorm after every convolution).
        activation: None or ``"relu"`` (the features use ReLU; other activations are refused).
        dropout: Probability of an ``nn.Dropout`` after each classifier activation; 0 adds none.

    Raises:
        ValueError: If ``input_shape`` is not 3-D or smaller than 32x32, the activation is not ReLU, or another
            argument is invalid.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        batch_norm: bool = False,
        activation: ActivationLike | None = None,
        dropout: float = 0.0,
    ) -> None:
        from torchvision.models import vgg

        model = "vgg16-bn" if batch_norm else "vgg16"
        shape = as_image_shape(input_shape, model)
        num_classes = positive_int(num_classes, "num_classes")
        dropout = dropout_probability(dropout)
        _check_relu(activation, model)
        height, width = final_spatial_size(shape, [_VGG_POOL] * 5, model)

        features = vgg.make_layers(vgg.cfgs[_VGG16_CONFIG], batch_norm=batch_norm)
        if shape[0] != features[0].in_channels:
            first = features[0]
            features[0] = nn.Conv2d(shape[0], first.out_channels, first.kernel_size, padding=first.padding)
        for module in features.modules():
            if isinstance(module, nn.Conv2d):
                _init_conv(module)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        _out_of_place_relus(features)
        channels = [m for m in features.modules() if isinstance(m, nn.Conv2d)][-1].out_channels

        layers: list[tuple[str, nn.Module]] = [
            ("features", features),
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(channels * height * width, 512)),
            *hidden_activation(1, "relu", dropout),
            ("fc2", nn.Linear(512, 512)),
            *hidden_activation(2, "relu", dropout),
            ("out", nn.Linear(512, num_classes)),
        ]
        super().__init__(layers, input_shape=shape, num_classes=num_classes)


@register_model("vgg16")
def vgg16(
    *, input_shape: Sequence[int], num_classes: int, activation: ActivationLike | None = None, dropout: float = 0.0
) -> VGG16:
    """VGG16 without BatchNorm, classifier 512-512-C, the implicit-BNN paper's CIFAR net.

    15,245,130 parameters for 32x32x3 inputs and 10 classes. See :class:`VGG16`.
    """
    return VGG16(input_shape, num_classes, batch_norm=False, activation=activation, dropout=dropout)


@register_model("vgg16-bn")
def vgg16_bn(
    *, input_shape: Sequence[int], num_classes: int, activation: ActivationLike | None = None, dropout: float = 0.0
) -> VGG16:
    """VGG16 with BatchNorm (torchvision's vgg16_bn), classifier 512-512-C.

    15,253,578 parameters for 32x32x3 inputs and 10 classes. See :class:`VGG16`.
    """
    return VGG16(input_shape, num_classes, batch_norm=True, activation=activation, dropout=dropout)


def torchvision_resnet(
    depth: int,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    activation: ActivationLike | None = None,
    dropout: float = 0.0,
) -> nn.Module:
    """Builds torchvision's ``resnet18`` or ``resnet50`` (``weights=None``) for ``input_shape``.

    For small images (both sides at most :data:`SMALL_IMAGE_SIDE`) the ImageNet stem (7x7 stride-2
    convolution, 3x3 stride-2 max-pool) is replaced by the common CIFAR stem: a 3x3 stride-1 convolution and no
    max-pool (``maxpool`` becomes ``nn.Identity``), so a 32x32 image reaches ``layer4`` at 4x4. This is an
    adaptation, not torchvision's architecture. Larger images keep the ImageNet stem. Either way ``conv1``
    takes ``C`` input channels and is initialised as torchvision's; global average pooling accepts any size.

    Args:
        depth: 18 or 50.
        input_shape: ``(channels, height, width)``.
        num_classes: Output size (``fc``).
        activation: None or ``"relu"``; other activations are refused.
        dropout: Must be 0: torchvision's ResNets have no dropout layers, and none is added.

    Returns:
        A ``torchvision.models.ResNet`` with ``input_shape`` and ``num_classes`` attributes.

    Raises:
        ValueError: If ``input_shape`` is not 3-D, the activation is not ReLU, dropout is not 0, or another
            argument is invalid.
    """
    from torchvision import models

    builders = {18: models.resnet18, 50: models.resnet50}
    if isinstance(depth, bool) or not isinstance(depth, int) or depth not in builders:
        raise ValueError(f"resnet depth must be 18 or 50, got {depth!r}")
    model = f"resnet{depth}"
    shape = as_image_shape(input_shape, model)
    num_classes = positive_int(num_classes, "num_classes")
    if dropout_probability(dropout) > 0:
        raise ValueError(f"{model} has no dropout layers; dropout must be 0, got {dropout!r}")
    _check_relu(activation, model)
    net = builders[depth](weights=None, num_classes=num_classes)
    channels, height, width = shape
    if max(height, width) <= SMALL_IMAGE_SIDE:
        net.conv1 = _init_conv(nn.Conv2d(channels, 64, 3, stride=1, padding=1, bias=False))
        net.maxpool = nn.Identity()
    elif channels != net.conv1.in_channels:
        net.conv1 = _init_conv(nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False))
    _out_of_place_relus(net)
    net.input_shape = shape
    net.num_classes = num_classes
    return net


@register_model("resnet18")
def resnet18(
    *, input_shape: Sequence[int], num_classes: int, activation: ActivationLike | None = None, dropout: float = 0.0
) -> nn.Module:
    """ResNet-18 (torchvision), CIFAR stem (3x3 conv, no max-pool) for images up to 64x64.

    11,173,962 parameters for 32x32x3 inputs and 10 classes. No dropout. See :func:`torchvision_resnet`.
    """
    return torchvision_resnet(18, input_shape, num_classes, activation=activation, dropout=dropout)


@register_model("resnet50")
def resnet50(
    *, input_shape: Sequence[int], num_classes: int, activation: ActivationLike | None = None, dropout: float = 0.0
) -> nn.Module:
    """ResNet-50 (torchvision), CIFAR stem (3x3 conv, no max-pool) for images up to 64x64.

    23,520,842 parameters for 32x32x3 inputs and 10 classes. No dropout. See :func:`torchvision_resnet`.
    """
    return torchvision_resnet(50, input_shape, num_classes, activation=activation, dropout=dropout)
