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
from dataclasses import dataclass
from enum import Enum

# Re-exported: their home is the checks leaf, whose float32 checks the priors' and guides' constructors share, so
# the API and the option strings refuse the same values in the same words.
from pyro_bnn.checks import FLOAT32_FINITE, FLOAT32_POSITIVE, float32_holds_finite, float32_holds_positive
from pyro_bnn.checks import FLOAT32_MAX as FLOAT32_MAX
from pyro_bnn.checks import FLOAT32_TINY as FLOAT32_TINY
from pyro_bnn.checks import enum_member as enum_member
from pyro_bnn.checks import to_float32 as to_float32


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


def format_number(value: float) -> str:
    """The text of a number that parses back to exactly ``value``, for writing a parsed spec back out (the inverse
    of :class:`Real`, :class:`Positive`, :class:`Interval`): ``f"{value:g}"`` where that reads back as the same float
    (``0.1``, ``1``, ``-5``, ``1e-05``), else ``repr``, the shortest text that does (``0.0123456789``, which ``:g``
    would cut to ``0.0123457``). ``:g`` first, so that every spec it already wrote exactly keeps its text: those go
    into run configs and run ids."""
    text = f"{value:g}"
    return text if float(text) == value else repr(float(value))


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
    """A finite float, at least ``minimum`` when given; with ``float32``, also finite as a float32 (it will live in
    a float32 tensor: a prior's location)."""

    minimum: float | None = None
    float32: bool = False

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
        if self.float32 and not float32_holds_finite(value):
            raise self._refuse(name, text, FLOAT32_FINITE)
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
        if self.float32 and not float32_holds_positive(value):
            raise self._refuse(name, text, FLOAT32_POSITIVE)
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
