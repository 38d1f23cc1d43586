"""Activation choices as data: the ``Activation`` enum, ``ActivationSpec`` and their CLI string form.

Accepted strings (case and surrounding whitespace ignored; the grammar is :data:`ACTIVATION_FAMILY`):
``relu``, ``tanh``, ``sigmoid``, ``leaky`` (slope 0.01) or ``leaky:<slope>`` with any finite float (e.g.
``leaky:-0.5``), ``abs`` (the same function as ``leaky:-1``), and ``linear`` or its alias ``identity``.

``str(spec)`` is the canonical form (``"leaky:-0.5"``, ``"linear"``); it parses back to an equal spec, so it
is safe to store in configs and file names. Names are kept as written apart from the ``identity`` alias:
``"abs"`` stays ``"abs"`` and ``"relu"`` is not rewritten as ``"leaky:0.0"``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from torch import nn

from pyro_bnn.nn.leaky_relu import LeakyReLU, validate_slope
from pyro_bnn.spec import Arg, Family, Form, Real

DEFAULT_LEAKY_SLOPE = 0.01
"""Slope used by a bare ``"leaky"``, PyTorch's and Maas et al.'s default."""


class Activation(str, Enum):
    """The elementwise nonlinearities the model zoo can be built with."""

    RELU = "relu"
    """``max(0, x)`` (``nn.ReLU``)."""

    LEAKY_RELU = "leaky"
    """``x`` for ``x >= 0``, else ``slope * x`` (``pyro_bnn.nn.LeakyReLU``); the only kind with a slope."""

    TANH = "tanh"
    """Hyperbolic tangent (``nn.Tanh``), the priors paper's choice."""

    SIGMOID = "sigmoid"
    """Logistic sigmoid ``1 / (1 + exp(-x))`` (``nn.Sigmoid``)."""

    ABS = "abs"
    """``|x|``, built as a leaky ReLU with slope -1 (the end of the One Simple Trick slope range)."""

    LINEAR = "linear"
    """The identity (``nn.Identity``), also spelled ``"identity"``; turns an MLP into an affine map."""


ACTIVATION_FAMILY = Family(
    "activation",
    [
        Form(Activation.RELU),
        Form(
            Activation.LEAKY_RELU,
            (Arg("slope", Real(), DEFAULT_LEAKY_SLOPE),),
            example="leaky:-0.5",
        ),
        Form(Activation.TANH),
        Form(Activation.SIGMOID),
        Form(Activation.ABS),
        Form(Activation.LINEAR, aliases=("identity",)),
    ],
    enum=Activation,
    example="leaky:-0.5",
    allow_empty_args=False,
)
"""The ``--activation`` grammar; a colon announces a slope, so ``"leaky:"`` and ``"tanh:"`` are errors."""


@dataclass(frozen=True)
class ActivationSpec:
    """A parsed activation choice: its kind and, for leaky ReLU only, its slope.

    Attributes:
        kind: Which nonlinearity.
        slope: Negative-side slope for ``Activation.LEAKY_RELU`` (a finite float); ``None`` for other kinds.

    Raises:
        ValueError: If a slope is given for a kind other than leaky ReLU, or a leaky ReLU slope is missing
            or not finite.
    """

    kind: Activation
    slope: float | None = None

    def __post_init__(self) -> None:
        kind = Activation(self.kind)
        object.__setattr__(self, "kind", kind)
        if kind is Activation.LEAKY_RELU:
            if self.slope is None:
                raise ValueError("a leaky ReLU ActivationSpec needs a slope")
            # Adding 0.0 turns -0.0 into 0.0, so equal specs always have the same canonical string.
            object.__setattr__(self, "slope", validate_slope(self.slope) + 0.0)
        elif self.slope is not None:
            raise ValueError(f"activation {kind.value!r} takes no slope, got slope={self.slope!r}")

    def __str__(self) -> str:
        if self.kind is Activation.LEAKY_RELU:
            # repr of a float is the shortest string that parses back to the same float.
            return f"{self.kind.value}:{self.slope!r}"
        return self.kind.value

    def build(self) -> nn.Module:
        """Returns a fresh activation module for this spec."""
        if self.kind is Activation.RELU:
            return nn.ReLU()
        if self.kind is Activation.LEAKY_RELU:
            return LeakyReLU(self.slope)
        if self.kind is Activation.TANH:
            return nn.Tanh()
        if self.kind is Activation.SIGMOID:
            return nn.Sigmoid()
        if self.kind is Activation.ABS:
            return LeakyReLU(-1.0)
        return nn.Identity()


ActivationLike = str | Activation | ActivationSpec | nn.Module | Callable[[], nn.Module]
"""Anything ``make_activation`` accepts: a spec string, an ``Activation``, an ``ActivationSpec``, a module
instance (copied per layer) or a zero-argument factory such as ``nn.ELU``."""


def parse_activation(spec: str | Activation | ActivationSpec) -> ActivationSpec:
    """Parses an activation string (or enum member) into an ``ActivationSpec``.

    Args:
        spec: A string (:data:`ACTIVATION_FAMILY`, see this module's docstring), an ``Activation`` (leaky ReLU
            gets slope 0.01), or an ``ActivationSpec``, which is returned unchanged.

    Returns:
        The parsed spec; ``str(result)`` is its canonical string.

    Raises:
        ValueError: If the name is unknown, a slope is given to a kind that takes none, or the slope is not a
            finite float. The message is one line naming the value and what was expected.
        TypeError: If ``spec`` is not a string, ``Activation`` or ``ActivationSpec``.
    """
    if isinstance(spec, ActivationSpec):
        return spec
    if isinstance(spec, Activation):
        slope = DEFAULT_LEAKY_SLOPE if spec is Activation.LEAKY_RELU else None
        return ActivationSpec(spec, slope)
    if not isinstance(spec, str):
        raise TypeError(f"expected an activation string, Activation or ActivationSpec, got {spec!r}")
    parsed = ACTIVATION_FAMILY.parse(spec)
    if parsed.kind is Activation.LEAKY_RELU:
        return ActivationSpec(parsed.kind, parsed["slope"])
    return ActivationSpec(parsed.kind)


def _reject_inplace(module: nn.Module, source: object) -> nn.Module:
    # Nets run under torch.func.functional_call and torch.vmap, where an in-place activation would overwrite
    # the previous layer's output (and its saved-for-backward tensor) across posterior samples.
    for submodule in module.modules():
        if getattr(submodule, "inplace", False) is True:
            raise ValueError(
                f"activation {source!r} runs in place (inplace=True); pyro_bnn nets must be pure functions "
                "of their parameters under torch.func.functional_call, so build it with inplace=False"
            )
    return module


def make_activation(spec: ActivationLike) -> nn.Module:
    """Builds a new activation module; models call it once per hidden layer.

    Args:
        spec: A spec string (``"leaky:-0.5"``), an ``Activation``, an ``ActivationSpec``, an ``nn.Module``
            instance (deep-copied, so layers never share a module or its parameters), or a zero-argument
            callable returning a module (e.g. the class ``nn.ELU``), called once per layer.

    Returns:
        A fresh module mapping ``(*)`` to ``(*)``.

    Raises:
        ValueError: If a string spec cannot be parsed (see ``parse_activation``) or the module runs in place.
        TypeError: If ``spec`` is none of the above, or a callable returns something other than a module.
    """
    if isinstance(spec, (str, ActivationSpec)):
        return parse_activation(spec).build()
    if isinstance(spec, nn.Module):
        return _reject_inplace(copy.deepcopy(spec), spec)
    if callable(spec):
        module = spec()
        if not isinstance(module, nn.Module):
            raise TypeError(f"activation factory {spec!r} returned {module!r}, not an nn.Module")
        return _reject_inplace(module, spec)
    raise TypeError(
        f"activation must be a string ({ACTIVATION_FAMILY.usages()}), Activation, ActivationSpec, nn.Module or a "
        f"zero-argument callable returning one; got {spec!r}"
    )
