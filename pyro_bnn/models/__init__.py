"""The model zoo: plain ``torch.nn.Module`` nets, built by name with ``build_model``.

Importing this package registers every zoo model. All nets are pure functions of (parameters, input), so the
Bayesian layer can run them through ``torch.func.functional_call`` vectorised with ``torch.vmap``.
"""

from pyro_bnn.models.base import SequentialNet
from pyro_bnn.models.conv import ConvNet
from pyro_bnn.models.lenet import LeNet
from pyro_bnn.models.mlp import DEFAULT_MLP_WIDTHS, MLP, BayesByBackpropMLP, TanhSmallMLP, ThreeFC
from pyro_bnn.models.registry import (
    ModelArguments,
    ModelFactory,
    ModelSpec,
    available_models,
    build_model,
    default_activation,
    model_usage,
    parse_model_spec,
    register_model,
)
from pyro_bnn.models.shapes import check_input_shape
from pyro_bnn.models.tanh_cnn import TanhCNN
from pyro_bnn.models.torchvision_models import VGG16, torchvision_resnet
from pyro_bnn.models.wrn import WideBasicBlock, WideResNet

__all__ = [
    "DEFAULT_MLP_WIDTHS",
    "MLP",
    "BayesByBackpropMLP",
    "ConvNet",
    "LeNet",
    "ModelArguments",
    "ModelFactory",
    "ModelSpec",
    "SequentialNet",
    "TanhCNN",
    "TanhSmallMLP",
    "ThreeFC",
    "VGG16",
    "WideBasicBlock",
    "WideResNet",
    "available_models",
    "build_model",
    "check_input_shape",
    "default_activation",
    "model_usage",
    "parse_model_spec",
    "register_model",
    "torchvision_resnet",
]
