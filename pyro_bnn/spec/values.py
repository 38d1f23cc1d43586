"""Value types: how one argument of an option string is read and checked.

Each type turns the argument's text into a value or raises :class:`ArgumentError` with one clause naming the
argument, what was expected and the text as written (``"scale must be a finite number > 0, got '-1'"``); the
family that owns the option adds the spec and its usage around it. ``inf`` and ``nan`` are refused wherever a
finite number is expected, and a number bound for a float32 tensor (a prior's scale, a guide's initial scale)
must survive the conversion: a scale that float32 rounds to 0 or to inf is refused here, naming the value,
rather than becoming a zero variance later.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import Enum

from pyro_bnn.checks import enum_member as enum_member  # re-exported: its home is the checks leaf

FLOAT32_TINY = 2.0**-126
"""The smallest positive normal float32, about 1.18e-38; smaller numbers lose precision or become 0."""

FLOAT32_MAX = (2.0 - 2.0**-23) * 2.0**127
"""The largest finite float32, about 3.40e+38."""


class ArgumentError(ValueError):
    """One argument is wrong: ``clause`` says which and why.

    Attributes:
        show_usage: Whether the family should add the form's usage (a choice list already says what is expected).
    """

    def __init__(self, clause: str, *, show_usage: bool = True) -> None:
        super().__init__(clause)
        self.show_usage = show_usage


def _number(text: str) -> float | None:
    """``float(text)``, or None when the text is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def to_float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (``inf`` when it overflows)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


class ValueType:
    """Base class: ``parse(text, name)`` returns the value; ``expected`` describes the values accepted."""

    numeric = True
    expected = "a value"

    def parse(self, text: str, name: str) -> object:
        raise NotImplementedError

    def metavar(self, name: str) -> str:
        """The placeholder shown in usage strings, e.g. ``SCALE``."""
        return name.upper().replace(" ", "_")

    def _refuse(self, name: str, text: str, expected: str | None = None) -> ArgumentError:
        return ArgumentError(f"{name} must be {expected or self.expected}, got {text!r}")


@dataclass(frozen=True)
class Real(ValueType):
    """A finite float, at least ``minimum`` when given."""

    minimum: float | None = None

    @property
    def expected(self) -> str:
        return "a finite number" if self.minimum is None else f"a finite number >= {self.minimum:g}"

    def parse(self, text: str, name: str) -> float:
        value = _number(text)
        if value is None:
            raise self._refuse(name, text)
        if not math.isfinite(value):
            raise self._refuse(name, text, "finite")
        if self.minimum is not None and not value >= self.minimum:
            raise self._refuse(name, text)
        return value


@dataclass(frozen=True)
class Positive(ValueType):
    """A finite float > 0; with ``float32``, also a normal float32 (it will live in a float32 tensor)."""

    float32: bool = False

    expected = "a finite number > 0"

    def parse(self, text: str, name: str) -> float:
        value = _number(text)
        if value is None or not (value > 0 and math.isfinite(value)):
            raise self._refuse(name, text)
        if self.float32 and not FLOAT32_TINY <= to_float32(value) <= FLOAT32_MAX:
            raise self._refuse(
                name, text, f"a positive number that float32 holds ({FLOAT32_TINY:.2g} to {FLOAT32_MAX:.3g})"
            )
        return value


@dataclass(frozen=True)
class Interval(ValueType):
    """A float in an interval; ``closed`` says which ends belong to it (``"both"``, ``"low"``, ``"high"`` or
    ``"neither"``). With ``float32``, the float32-rounded value must lie in it too."""

    low: float
    high: float
    closed: str = "both"
    float32: bool = False

    @property
    def expected(self) -> str:
        left = "[" if self.closed in ("both", "low") else "("
        right = "]" if self.closed in ("both", "high") else ")"
        return f"a number in {left}{self.low:g}, {self.high:g}{right}"

    def _contains(self, value: float) -> bool:
        above = value >= self.low if self.closed in ("both", "low") else value > self.low
        below = value <= self.high if self.closed in ("both", "high") else value < self.high
        return above and below

    def parse(self, text: str, name: str) -> float:
        value = _number(text)
        if value is None or not self._contains(value):
            raise self._refuse(name, text)
        if self.float32 and not self._contains(to_float32(value)):
            raise self._refuse(name, text, f"{self.expected} after rounding to float32")
        return value


@dataclass(frozen=True)
class Integer(ValueType):
    """An int >= ``minimum`` (written without a decimal point)."""

    minimum: int = 1

    @property
    def expected(self) -> str:
        return f"an int >= {self.minimum}"

    def parse(self, text: str, name: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise self._refuse(name, text) from None
        if value < self.minimum:
            raise self._refuse(name, text)
        return value


@dataclass(frozen=True)
class Choice(ValueType):
    """A member of a ``str`` enum, by value (case ignored); ``what`` names it in messages (``"hyperprior"``)."""

    enum: type[Enum]
    what: str

    numeric = False

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(repr(member.value) for member in self.enum)

    def metavar(self, name: str) -> str:
        return "|".join(member.value for member in self.enum)

    def parse(self, text: str, name: str) -> Enum:
        try:
            return self.enum(text.lower())
        except ValueError:
            raise ArgumentError(f"unknown {self.what} {text!r}; expected {self.expected}", show_usage=False) from None
