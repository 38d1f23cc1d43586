"""Input corruptions: exact formulas with seeded generators, statistics, and the CLI spec parser."""

from __future__ import annotations

import math

import pytest
import torch

from pyro_bnn.data import gaussian_blend, parse_corruption, salt_and_pepper
from pyro_bnn.data.corruptions import canonical_corruption


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def images() -> torch.Tensor:
    return torch.rand(16, 1, 28, 28, generator=generator(42)) * 0.6 + 0.2  # values in [0.2, 0.8)


# ---- gaussian_blend ------------------------------------------------------------------------------


def test_gamma_zero_is_the_identity(images):
    assert torch.equal(gaussian_blend(images, 0.0, generator=generator()), images)


@pytest.mark.parametrize("gamma", [0.0, 0.3, 0.5, 1.0])
def test_blend_formula_is_reproduced_exactly(images, gamma):
    eps = torch.randn(images.shape, generator=generator(3))
    expected = (1 - gamma) * images + gamma * eps
    assert torch.equal(gaussian_blend(images, gamma, generator=generator(3)), expected)


def test_gamma_one_is_standard_normal_noise():
    out = gaussian_blend(torch.full((200_000,), 5.0), 1.0, generator=generator(1))
    assert abs(out.mean().item()) < 0.01  # standard error 0.0022
    assert out.std().item() == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_blend_keeps_shape_and_dtype(dtype):
    x = torch.zeros(2, 3, 4, dtype=dtype)
    out = gaussian_blend(x, 0.5)
    assert out.shape == x.shape and out.dtype == dtype


def test_blend_rejects_integer_tensors():
    with pytest.raises(TypeError, match="floating-point"):
        gaussian_blend(torch.zeros(3, dtype=torch.uint8), 0.5)


@pytest.mark.parametrize("gamma", [-0.1, 1.1, math.nan, "0.5", None])
def test_bad_gamma(images, gamma):
    with pytest.raises(ValueError, match=rf"gamma must be a number in \[0, 1\], got {gamma!r}"):
        gaussian_blend(images, gamma)


# ---- salt_and_pepper -----------------------------------------------------------------------------


def test_salt_and_pepper_fraction_and_values():
    x = torch.rand(200_000, generator=generator(5)) * 0.6 + 0.2
    low, high = x.min(), x.max()
    out = salt_and_pepper(x, 0.1, generator=generator(6))

    changed = out != x
    assert changed.float().mean().item() == pytest.approx(0.1, abs=0.004)  # standard error 0.0007
    assert ((out[changed] == low) | (out[changed] == high)).all()
    assert (out[changed] == low).float().mean().item() == pytest.approx(0.5, abs=0.02)
    assert torch.equal(out[~changed], x[~changed])


def test_salt_and_pepper_explicit_values_and_extremes(images):
    out = salt_and_pepper(images, 0.5, low=-1.0, high=2.0, generator=generator())
    changed = out != images
    assert set(out[changed].unique().tolist()) == {-1.0, 2.0}
    assert torch.equal(salt_and_pepper(images, 0.0, generator=generator()), images)
    every = salt_and_pepper(images, 1.0, generator=generator())
    assert ((every == images.min()) | (every == images.max())).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8])
def test_salt_and_pepper_keeps_shape_and_dtype(dtype):
    x = (torch.rand(4, 1, 5, 5, generator=generator()) * 200).to(dtype)
    out = salt_and_pepper(x, 0.3)
    assert out.shape == x.shape and out.dtype == dtype


@pytest.mark.parametrize("p", [-0.01, 1.5, math.nan, True])
def test_bad_p(images, p):
    with pytest.raises(ValueError, match=rf"p must be a number in \[0, 1\], got {p!r}"):
        salt_and_pepper(images, p)


# ---- parse_corruption ----------------------------------------------------------------------------


def test_none_is_the_identity(images):
    assert parse_corruption("none")(images) is images
    assert parse_corruption(" NONE ")(images) is images


def test_gaussian_spec(images):
    corrupt = parse_corruption("gaussian:0.5", generator=generator(9))
    assert torch.equal(corrupt(images), gaussian_blend(images, 0.5, generator=generator(9)))


@pytest.mark.parametrize("spec", ["salt-pepper:0.1", "saltpepper:0.1", "sp:0.1", " SP : 0.1 "])
def test_salt_pepper_spellings(images, spec):
    corrupt = parse_corruption(spec, generator=generator(2))
    assert torch.equal(corrupt(images), salt_and_pepper(images, 0.1, generator=generator(2)))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("gaussian", "corruption 'gaussian' takes 1 numeric argument\\(s\\), got 0; expected gaussian:GAMMA"),
        ("gaussian:", "gamma must be a number in \\[0, 1\\], got ''"),
        ("gaussian:abc", "gamma must be a number in \\[0, 1\\], got 'abc'"),
        ("gaussian:1.5", "gamma must be a number in \\[0, 1\\], got '1.5'"),
        ("gaussian:-0.1", "gamma must be a number in \\[0, 1\\], got '-0.1'"),
        ("gaussian:nan", "got 'nan'"),
        ("sp:2", "p must be a number in \\[0, 1\\], got '2'"),
        ("blur:0.3", "unknown corruption 'blur' \\(in 'blur:0.3'\\); expected one of none, gaussian:GAMMA, salt-pe"),
        ("", "a corruption must be a non-empty string like 'gaussian:0.5', got ''"),
        ("none:0.2", "corruption 'none' takes no arguments after ':', got 'none:0.2'"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(ValueError, match=match) as error:
        parse_corruption(spec)
    assert repr(spec) in str(error.value)


@pytest.mark.parametrize(
    "spec, canonical",
    [
        ("gaussian:0.5", "gaussian:0.5"),
        (" Gaussian:0.50 ", "gaussian:0.5"),
        ("gaussian:1", "gaussian:1.0"),
        ("sp:.2", "salt-pepper:0.2"),
        ("SaltPepper:0.2", "salt-pepper:0.2"),
        ("none", None),
        (" NONE ", None),
    ],
)
def test_canonical_corruption_is_one_spelling_that_corrupts_alike(images, spec, canonical):
    assert canonical_corruption(spec) == canonical
    again = parse_corruption(canonical or "none", generator=generator(3))(images)
    torch.testing.assert_close(parse_corruption(spec, generator=generator(3))(images), again)


def test_canonical_corruption_refuses_what_parse_corruption_refuses():
    with pytest.raises(ValueError, match="unknown corruption 'blur'"):
        canonical_corruption("blur:3")
