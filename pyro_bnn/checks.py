"""Argument checks shared by the whole package: one way to refuse a bad count, rate or choice.

A leaf module (``.importlinter``'s ``checks-leaf`` contract): it imports nothing else of pyro_bnn, so every layer,
``pyro_bnn.evaluation`` included, may use it. Each check returns the value (counts as a Python ``int``, rates as a
``float``) and raises a one-line ``ValueError`` that names the parameter, the value (its ``repr``) and what was
expected, e.g. ``num_samples must be an int >= 1, got 0``.

``bool`` is an ``int`` in Python, but ``num_samples=True`` is always a mistake: the integer checks refuse bools, and
so do the number checks (``dropout=False`` is as much a slip as ``dropout=True``). Any ``numbers.Integral`` (a numpy
integer too) counts as an int, any ``numbers.Real`` as a number; NaN and infinities are refused.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


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


__all__ = [
    "finite_float",
    "int_at_least",
    "int_below",
    "non_negative_float",
    "non_negative_int",
    "one_of",
    "open_unit",
    "optional_positive_int",
    "positive_float",
    "positive_int",
    "positive_ints",
    "probability",
]
