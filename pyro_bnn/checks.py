"""Argument checks shared by the whole package: one way to refuse a bad count, rate or choice.

A leaf module (``.importlinter``'s ``checks-leaf`` contract): it imports nothing else of pyro_bnn, so every layer,
``pyro_bnn.evaluation`` included, may use it. Each check returns the value (counts as a Python ``int``, rates as a
``float``) and raises a one-line ``ValueError`` that names the parameter, the value (its ``repr``) and what was
expected, e.g. ``num_samples must be an int >= 1, got 0``.

``bool`` is an ``int`` in Python, but ``num_samples=True`` is always a mistake: the integer checks refuse bools, and
so do the number checks (``dropout=False`` is as much a slip as ``dropout=True``). Any ``numbers.Integral`` (a numpy
integer too) counts as an int, any ``numbers.Real`` as a number; NaN and infinities are refused.

Settings objects (a trainer's options, a Laplace fit's, a run's config, ...) have one style, :class:`Settings`: a
frozen dataclass checked when it is made, in one method, :meth:`Settings.check`, and built from a command line's
parsed arguments by :meth:`Settings.from_args`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=Enum)
S = TypeVar("S", bound="Settings")


REGISTRY_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
"""What a registered guide, objective or model may be called: lower-case letters, digits, '.', '_' and '-' (not
first), so that the option grammar can always parse it (no space, no ':')."""


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_finite_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def int_at_least(value: object, name: str, minimum: int) -> int:
    """``value`` as an ``int`` if it is an int (not a bool) ``>= minimum``; else ``ValueError``:
    ``"{name} must be an int >= {minimum}, got {value!r}"``."""
    if not _is_int(value) or value < minimum:  # type: ignore[operator]
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def positive_int(value: object, name: str) -> int:
    """A count: ``value`` as an ``int`` if it is an int >= 1 (not a bool); ``"{name} must be an int >= 1, got 0"``."""
    return int_at_least(value, name, 1)


def non_negative_int(value: object, name: str) -> int:
    """A count that may be zero, or a seed: an int >= 0 (not a bool); ``"{name} must be an int >= 0, got -1"``."""
    return int_at_least(value, name, 0)


def optional_positive_int(value: object, name: str) -> int | None:
    """``None``, or an int >= 1 (not a bool) as an ``int``: an optional count such as ``batch_size=None``;
    ``"{name} must be None or an int >= 1, got 0"``."""
    if value is not None and (not _is_int(value) or value < 1):  # type: ignore[operator]
        raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
    return None if value is None else int(value)  # type: ignore[call-overload]


def positive_ints(values: object, name: str) -> tuple[int, ...]:
    """A sequence of counts (it may be empty) as a tuple; each entry as for :func:`positive_int`, named
    ``every entry of {name}``; a non-sequence (or a string): ``"{name} must be a sequence of ints >= 1, got ..."``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a sequence of ints >= 1, got {values!r}")
    return tuple(positive_int(v, f"every entry of {name}") for v in values)


def holds_values(value: object) -> bool:
    """Whether ``value`` is a collection of values to iterate (a list, a tuple, an array or tensor of >= 1 dim, a
    generator), not one value: a number, a 0-d array or tensor, or a string (whose characters are no values)."""
    return not isinstance(value, (str, bytes)) and isinstance(value, Iterable) and getattr(value, "ndim", 1) != 0


def int_below(value: object, name: str, stop: int) -> int:
    """An index into ``stop`` things: an int in ``[0, stop)`` (not a bool);
    ``"{name} must be an int in [0, {stop}), got {value!r}"``."""
    if not _is_int(value) or not 0 <= value < stop:  # type: ignore[operator]
        raise ValueError(f"{name} must be an int in [0, {stop}), got {value!r}")
    return int(value)  # type: ignore[call-overload]


def finite_float(value: object, name: str) -> float:
    """Any finite real number (not a bool) as a ``float``; ``"{name} must be a finite number, got nan"``."""
    if not _is_finite_number(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def positive_float(value: object, name: str) -> float:
    """A scale or rate: a finite number > 0 (not a bool) as a ``float``;
    ``"{name} must be a finite number > 0, got 0"``."""
    if not _is_finite_number(value) or not value > 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)  # type: ignore[arg-type]


FLOAT32_TINY = 2.0**-126
"""The smallest positive normal float32, about 1.18e-38; smaller numbers lose precision or become 0."""

FLOAT32_MAX = (2.0 - 2.0**-23) * 2.0**127
"""The largest finite float32, about 3.40e+38."""

FLOAT32_POSITIVE = f"a positive number that float32 holds ({FLOAT32_TINY:.2g} to {FLOAT32_MAX:.3g})"
"""What a scale bound for a float32 tensor must be, in the words of every refusal (the API's and the option
strings')."""

FLOAT32_FINITE = f"a finite number that float32 holds (-{FLOAT32_MAX:.3g} to {FLOAT32_MAX:.3g})"
"""What a location bound for a float32 tensor must be, in the words of every refusal."""


def to_float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (``inf`` when it overflows)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def float32_holds_positive(value: float) -> bool:
    """Whether ``value`` stays a positive normal float32 (neither 0, subnormal nor inf once stored as one): the
    test of every scale that lives in a float32 tensor (a prior's scale, a guide's initial scale)."""
    return FLOAT32_TINY <= to_float32(value) <= FLOAT32_MAX


def float32_holds_finite(value: float) -> bool:
    """Whether ``value`` stays finite once stored as a float32 (a location: one that rounds to 0 is harmless)."""
    return abs(to_float32(value)) <= FLOAT32_MAX


def positive_float32(value: object, name: str) -> float:
    """A scale bound for a float32 tensor: :func:`positive_float`, and a positive normal float32 (1e-50 would become
    0 there, 1e39 inf); ``"{name} must be a positive number that float32 holds (1.2e-38 to 3.4e+38), got 1e+39"``."""
    number = positive_float(value, name)
    if not float32_holds_positive(number):
        raise ValueError(f"{name} must be {FLOAT32_POSITIVE}, got {value!r}")
    return number


def non_negative_float(value: object, name: str) -> float:
    """A finite number >= 0 (not a bool) as a ``float``; ``"{name} must be a finite number >= 0, got -1.0"``."""
    if not _is_finite_number(value) or not value >= 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def probability(value: object, name: str) -> float:
    """A probability or a blend weight: a number in ``[0, 1]`` (not a bool) as a ``float``;
    ``"{name} must be a number in [0, 1], got 1.5"``."""
    if not _is_finite_number(value) or not 0 <= value <= 1:  # type: ignore[operator]
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)  # type: ignore[arg-type]


def open_unit(value: object, name: str) -> float:
    """A number strictly between 0 and 1 (a level such as ``alpha``), not a bool, as a ``float``;
    ``"{name} must be a number in (0, 1), got 1"``."""
    if not _is_finite_number(value) or not 0 < value < 1:  # type: ignore[operator]
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)  # type: ignore[arg-type]


def one_of(value: T, choices: Iterable[object], name: str) -> T:
    """``value`` if it is one of ``choices`` (compared with ``==``; a bool never matches an int choice);
    ``"{name} must be one of 'mean', 'sum', got 'avg'"``."""
    choices = tuple(choices)
    for choice in choices:
        if isinstance(value, bool) != isinstance(choice, bool):
            continue
        try:
            if value == choice:
                return value
        except Exception:  # noqa: BLE001 - a value that cannot be compared is simply not a choice
            continue
    listed = ", ".join(repr(choice) for choice in choices)
    raise ValueError(f"{name} must be one of {listed}, got {value!r}")


def enum_member(enum: type[E], name: object, what: str) -> E:
    """The member of ``enum`` whose value is ``name`` (a member passes through), or a one-line ValueError naming
    ``what`` and listing the choices: ``"unknown KL weighting 'avg'; expected one of 'uniform', 'blundell'"``."""
    try:
        return enum(name)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum)
        raise ValueError(f"unknown {what} {name!r}; expected one of {choices}") from None


def dataclass_from_args(
    base: type[T] | T, namespace: argparse.Namespace, /, **overrides: str | Callable[[argparse.Namespace], Any]
) -> T:
    """The dataclass object (of class ``base``, or a copy of the object ``base``) that parsed arguments ask for: the
    engine of :meth:`Settings.from_args`, for any dataclass (the same contract as the commands'
    ``options_from_args(base, args, **renames)``, which it can replace).

    Each field takes the attribute of ``namespace`` of its own name, or the one an override names for it (a string),
    or the value an override computes from ``namespace`` (a function). A field with no such attribute, or whose
    attribute is None (an option not given), keeps its default: the class's own when ``base`` is the class,
    ``base``'s value when it is an object. Attributes that name no field are ignored.

    Raises:
        TypeError: an override for a field the class does not have.
    """
    cls = base if isinstance(base, type) else type(base)
    fields = [field.name for field in dataclasses.fields(cls) if field.init]  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    values = {}
    for name in fields:
        source = overrides.get(name, name)
        if callable(source):
            value = source(namespace)
        elif hasattr(namespace, source):
            value = getattr(namespace, source)
        else:
            continue
        if value is not None:
            values[name] = value
    return cls(**values) if isinstance(base, type) else dataclasses.replace(base, **values)  # type: ignore[type-var]


class Settings:
    """The one style of a settings object: a frozen dataclass, checked when it is made.

    Subclass it with ``@dataclass(frozen=True)`` and put every check of the fields in :meth:`check`, which
    ``__post_init__`` calls, so an object that exists is a checked one: ``MyOptions(...)``,
    :func:`dataclasses.replace` and :meth:`from_args` all check (a class that needs ``__post_init__`` for
    something else calls ``super().__post_init__()``). A bad value raises one line naming the field, the value and
    what was expected (the checks above). :meth:`check` may normalise a field (a string to its enum member, a count
    to an ``int``) through :meth:`_set`, the frozen dataclass's own route.

    Example::

        @dataclass(frozen=True)
        class FitOptions(Settings):
            epochs: int = 10
            lr: float = 1e-3

            def check(self) -> None:
                self._set("epochs", positive_int(self.epochs, "epochs"))
                self._set("lr", positive_float(self.lr, "lr"))

        FitOptions.from_args(parser.parse_args())  # the fields from --epochs and --lr, where given

    Raises:
        TypeError: when made, if the class is not a frozen dataclass.
    """

    __slots__ = ()

    def __post_init__(self) -> None:
        params = getattr(type(self), "__dataclass_params__", None)
        if params is None or not params.frozen:
            raise TypeError(f"{type(self).__name__} must be a @dataclass(frozen=True) to be Settings")
        self.check()

    def check(self) -> Any:
        """Refuses a bad field with a one-line ``ValueError`` (or ``TypeError`` for a value of the wrong kind), and
        normalises fields through :meth:`_set`; called when the object is made. The base class checks nothing."""

    def _set(self, name: str, value: object) -> None:
        """Sets a field of this frozen object from :meth:`check` (a normalised value)."""
        object.__setattr__(self, name, value)

    @classmethod
    def from_args(
        cls: type[S],
        namespace: argparse.Namespace,
        base: S | None = None,
        /,
        **overrides: str | Callable[[argparse.Namespace], Any],
    ) -> S:
        """The settings a command line's parsed arguments ask for, checked (:func:`dataclass_from_args`).

        Each field takes the attribute of ``namespace`` of its own name, or the one an override names for it (a
        string), or the value an override computes from ``namespace`` (a function). A field with no such attribute,
        or whose attribute is None (an option not given), keeps its default: the class's own, or ``base``'s value
        when a ``base`` object is given (the result is then a copy of ``base`` with the values given). Attributes
        that name no field are ignored.

        Raises:
            TypeError: an override for a field the class does not have, or a ``base`` of another class.
            ValueError: a bad value, from :meth:`check`.
        """
        if base is not None and not isinstance(base, cls):
            raise TypeError(f"base must be a {cls.__name__}, got {type(base).__name__}")
        return dataclass_from_args(cls if base is None else base, namespace, **overrides)


__all__ = [
    "Settings",
    "dataclass_from_args",
    "enum_member",
    "FLOAT32_FINITE",
    "FLOAT32_MAX",
    "FLOAT32_POSITIVE",
    "FLOAT32_TINY",
    "finite_float",
    "holds_values",
    "float32_holds_finite",
    "float32_holds_positive",
    "int_at_least",
    "int_below",
    "non_negative_float",
    "non_negative_int",
    "one_of",
    "open_unit",
    "optional_positive_int",
    "positive_float",
    "positive_float32",
    "positive_int",
    "positive_ints",
    "probability",
    "to_float32",
]
