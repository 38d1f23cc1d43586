"""Input corruptions for distribution-shift experiments, and the CLI strings that name them.

Accepted specs (case and surrounding whitespace ignored; the grammar is :data:`CORRUPTION_FAMILY`):

* ``"none"``: the identity;
* ``"gaussian:<gamma>"``: ``gaussian_blend`` with ``gamma`` in [0, 1], e.g. ``"gaussian:0.5"``;
* ``"salt-pepper:<p>"`` (also ``"saltpepper:<p>"``, ``"sp:<p>"``): ``salt_and_pepper`` with ``p`` in [0, 1].

Both corruptions return a new tensor of the input's shape, dtype and device, and draw their noise from
``generator`` when one is given (on the generator's device, then moved), else from torch's global RNG.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import Enum

import torch

from pyro_bnn.checks import probability
from pyro_bnn.spec import Arg, Family, Form, Interval


def _noise_device(x: torch.Tensor, generator: torch.Generator | None) -> torch.device:
    # A generator can only fill tensors on its own device; draw there and move the result to x.
    return x.device if generator is None else generator.device


def gaussian_blend(x: torch.Tensor, gamma: float, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Blends the input with standard Gaussian noise: ``(1 - gamma) * x + gamma * eps``, ``eps ~ N(0, 1)``.

    ``gamma = 0`` returns ``x`` unchanged (as a copy), ``gamma = 1`` pure noise.

    Args:
        x: ``(...)`` floating-point inputs (normalised images or points).
        gamma: Noise weight in [0, 1].
        generator: Source of ``eps`` (elementwise, one draw per element of ``x``); ``None`` uses the global
            RNG.

    Returns:
        ``(...)`` tensor of ``x``'s shape, dtype and device.

    Raises:
        ValueError: If ``gamma`` is not a float in [0, 1].
        TypeError: If ``x`` is not a floating-point tensor.
    """
    gamma = probability(gamma, "gamma")
    if not x.is_floating_point():
        raise TypeError(f"gaussian_blend needs a floating-point tensor, got dtype {x.dtype}")
    eps = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=_noise_device(x, generator))
    return (1.0 - gamma) * x + gamma * eps.to(x.device)


def salt_and_pepper(
    x: torch.Tensor,
    p: float,
    *,
    low: float | None = None,
    high: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Replaces each element independently, with probability ``p``, by ``low`` or ``high`` (one half each).

    One uniform draw ``u`` per element decides both: ``u < p / 2`` gives ``low``, ``p / 2 <= u < p`` gives
    ``high``, otherwise the element is kept.

    Args:
        x: ``(...)`` inputs of any real dtype.
        p: Probability that an element is replaced, in [0, 1].
        low: The "pepper" value; default ``x.min()`` (the darkest value in this tensor).
        high: The "salt" value; default ``x.max()``.
        generator: Source of the draws; ``None`` uses the global RNG.

    Returns:
        ``(...)`` tensor of ``x``'s shape, dtype and device.

    Raises:
        ValueError: If ``p`` is not a float in [0, 1].
    """
    p = probability(p, "p")
    if x.numel() == 0:
        return x.clone()
    low_value = x.min() if low is None else torch.tensor(low, dtype=x.dtype, device=x.device)
    high_value = x.max() if high is None else torch.tensor(high, dtype=x.dtype, device=x.device)
    u = torch.rand(x.shape, generator=generator, device=_noise_device(x, generator)).to(x.device)
    return torch.where(u < p / 2, low_value, torch.where(u < p, high_value, x))


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class Corruption(str, Enum):
    """The input corruptions by name (``pyro-bnn evaluate --corruption``)."""

    NONE = "none"
    """The inputs unchanged."""
    GAUSSIAN = "gaussian"
    """(1 - GAMMA) x + GAMMA eps with eps ~ N(0, 1) (:func:`gaussian_blend`)."""
    SALT_PEPPER = "salt-pepper"
    """Each element replaced with probability P by the input's min or max, one half each (:func:`salt_and_pepper`)."""


_UNIT = Interval(0.0, 1.0)

CORRUPTION_FAMILY = Family(
    "corruption",
    [
        Form(Corruption.NONE),
        Form(Corruption.GAUSSIAN, (Arg("gamma", _UNIT),), example="gaussian:0.5"),
        Form(Corruption.SALT_PEPPER, (Arg("p", _UNIT),), aliases=("saltpepper", "sp"), example="salt-pepper:0.1"),
    ],
    enum=Corruption,
    example="gaussian:0.5",
    allow_empty_args=False,
)
"""The ``--corruption`` grammar."""


def parse_corruption(spec: str, *, generator: torch.Generator | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """Turns a CLI corruption string into a function of the inputs.

    Args:
        spec: ``"none"``, ``"gaussian:<gamma>"`` or ``"salt-pepper:<p>"`` (see the module docstring).
        generator: Passed to the corruption on every call; ``None`` uses the global RNG.

    Returns:
        A function mapping ``(...)`` inputs to corrupted inputs of the same shape and dtype; for ``"none"``
        the identity, returning its input itself.

    Raises:
        ValueError: One line naming the spec, if it is not one of the accepted forms or its value is not a number
            in [0, 1].
    """
    parsed = CORRUPTION_FAMILY.parse(spec)
    if parsed.kind is Corruption.GAUSSIAN:
        return functools.partial(gaussian_blend, gamma=parsed["gamma"], generator=generator)
    if parsed.kind is Corruption.SALT_PEPPER:
        return functools.partial(salt_and_pepper, p=parsed["p"], generator=generator)
    return _identity


def canonical_corruption(spec: str) -> str | None:
    """The one spelling of a corruption string, which names the files and records made with it.

    The family's name (aliases resolved, case and surrounding whitespace dropped) and each value as a float's
    ``repr``: ``" Gaussian:0.50"`` is ``"gaussian:0.5"``, ``"sp:.2"`` is ``"salt-pepper:0.2"``; ``"none"`` is
    ``None`` (no corruption).

    Raises:
        ValueError: As :func:`parse_corruption`.
    """
    parsed = CORRUPTION_FAMILY.parse(spec)
    if parsed.kind is Corruption.NONE:
        return None
    return f"{parsed.name}:{','.join(repr(float(value)) for value in parsed.values.values())}"
