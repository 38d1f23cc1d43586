"""LeakyReLU over the whole slope range: exact values, gradients, errors."""

import math

import pytest
import torch

from pyro_bnn.nn import LeakyReLU

GRID = torch.tensor([-3.0, -1.0, -0.25, 0.0, 0.5, 2.0], dtype=torch.float64)

# f(x) on GRID, written out by hand for each slope.
EXPECTED_VALUES = {
    -1.0: [3.0, 1.0, 0.25, 0.0, 0.5, 2.0],  # |x|
    0.0: [0.0, 0.0, 0.0, 0.0, 0.5, 2.0],  # ReLU
    1.0: [-3.0, -1.0, -0.25, 0.0, 0.5, 2.0],  # identity
    -0.5: [1.5, 0.5, 0.125, 0.0, 0.5, 2.0],
    0.3: [-0.9, -0.3, -0.075, 0.0, 0.5, 2.0],
}

# df/dx on GRID; at x = 0 the gradient is the slope (PyTorch's leaky_relu convention).
EXPECTED_GRADIENTS = {
    -1.0: [-1.0, -1.0, -1.0, -1.0, 1.0, 1.0],
    0.0: [0.0, 0.0, 0.0, 0.0, 1.0, 1.0],
    1.0: [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    -0.5: [-0.5, -0.5, -0.5, -0.5, 1.0, 1.0],
    0.3: [0.3, 0.3, 0.3, 0.3, 1.0, 1.0],
}


@pytest.mark.parametrize("slope", sorted(EXPECTED_VALUES))
def test_values_on_grid(slope, device):
    out = LeakyReLU(slope)(GRID.to(device))
    expected = torch.tensor(EXPECTED_VALUES[slope], dtype=torch.float64, device=device)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("slope", sorted(EXPECTED_GRADIENTS))
def test_gradients_on_grid(slope, device):
    x = GRID.to(device).requires_grad_(True)
    (grad,) = torch.autograd.grad(LeakyReLU(slope)(x).sum(), x)
    expected = torch.tensor(EXPECTED_GRADIENTS[slope], dtype=torch.float64, device=device)
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-15)


def test_special_slopes_match_abs_relu_identity_exactly():
    x = torch.randn(1000)
    assert torch.equal(LeakyReLU(-1.0)(x), x.abs())
    assert torch.equal(LeakyReLU(0.0)(x), torch.relu(x))
    assert torch.equal(LeakyReLU(1.0)(x), x)


def test_slope_outside_unit_interval():
    x = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(LeakyReLU(2.5)(x), torch.tensor([-5.0, 3.0]))
    torch.testing.assert_close(LeakyReLU(-4)(x), torch.tensor([8.0, 3.0]))


def test_keeps_shape_and_dtype_and_has_no_parameters():
    x = torch.randn(2, 3, 4, dtype=torch.float32)
    module = LeakyReLU(-0.5)
    out = module(x)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert list(module.parameters()) == [] and list(module.buffers()) == []


def test_does_not_modify_its_input():
    x = torch.tensor([-1.0, 2.0])
    LeakyReLU(-0.5)(x)
    assert torch.equal(x, torch.tensor([-1.0, 2.0]))


def test_slope_is_stored_as_float_and_shown_in_repr():
    module = LeakyReLU(-1)
    assert module.slope == -1.0 and isinstance(module.slope, float)
    assert repr(LeakyReLU(-0.5)) == "LeakyReLU(slope=-0.5)"


@pytest.mark.parametrize("slope", [math.nan, math.inf, -math.inf, "abc", None, True])
def test_invalid_slope_raises_naming_the_value(slope):
    with pytest.raises(ValueError, match="slope") as info:
        LeakyReLU(slope)
    assert repr(slope) in str(info.value)
