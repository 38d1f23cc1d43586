"""Shape arithmetic and the pre-training input check."""

import pytest
import torch
from torch import nn

from pyro_bnn.models import build_model, check_input_shape
from pyro_bnn.models.shapes import as_input_shape, minimum_size, spatial_sizes, stage_output_size

CONV5, CONV4, POOL2, STRIDED = (5, 1, 0), (4, 1, 0), (2, 2, 0), (5, 2, 2)


@pytest.mark.parametrize(
    ("size", "stage", "expected"),
    [
        (28, CONV5, 24),
        (24, POOL2, 12),
        (5, POOL2, 2),
        (8, CONV4, 5),
        (28, STRIDED, 14),
        (7, STRIDED, 4),
        (1, STRIDED, 1),
        (4, CONV5, 0),
        (3, CONV5, -1),
    ],
)
def test_stage_output_size_matches_pytorch(size, stage, expected):
    assert stage_output_size(size, stage) == expected
    kernel, stride, padding = stage
    if expected >= 1:
        layer = nn.Conv2d(1, 1, kernel, stride=stride, padding=padding)
        assert layer(torch.zeros(1, 1, size, size)).shape[-1] == expected


def test_spatial_sizes_and_minimum_sizes():
    lenet = [CONV5, POOL2, CONV5, POOL2, CONV4]
    assert spatial_sizes(28, lenet) == [28, 24, 12, 8, 4, 1]
    assert minimum_size(lenet) == 28
    assert minimum_size([CONV5, POOL2, CONV5, POOL2]) == 16
    assert minimum_size([STRIDED, STRIDED]) == 1


@pytest.mark.parametrize(("shape", "expected"), [((1, 28, 28), (1, 28, 28)), ([2], (2,)), (torch.Size([3, 4]), (3, 4))])
def test_as_input_shape_normalises(shape, expected):
    result = as_input_shape(shape)
    assert result == expected and type(result) is tuple


def test_check_input_shape_accepts_a_matching_batch():
    net = build_model("lenet", input_shape=(1, 28, 28), num_classes=10)
    assert check_input_shape(net, torch.zeros(7, 1, 28, 28)) is None


@pytest.mark.parametrize(
    ("x_shape", "found"),
    [((7, 28, 28), "(28, 28)"), ((7, 784), "(784,)"), ((7, 3, 28, 28), "(3, 28, 28)"), ((7,), "()")],
)
def test_check_input_shape_names_found_and_expected(x_shape, found):
    net = build_model("lenet", input_shape=(1, 28, 28), num_classes=10)
    with pytest.raises(ValueError) as info:
        check_input_shape(net, torch.zeros(x_shape))
    message = str(info.value)
    assert f"found per-example shape {found}" in message and "(1, 28, 28)" in message
    assert "batch dimension" not in message


def test_check_input_shape_hints_at_a_missing_batch_dimension():
    net = build_model("tanh-small", input_shape=(2,), num_classes=2)
    with pytest.raises(ValueError, match="without the batch dimension"):
        check_input_shape(net, torch.zeros(2))


def test_check_input_shape_skips_nets_without_input_shape():
    assert check_input_shape(nn.Linear(3, 2), torch.zeros(4, 5)) is None
