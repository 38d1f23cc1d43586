"""Parsing of the ``name:arg1,arg2`` option strings used on the command line and in configs."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)


def split_spec(spec: str, what: str) -> tuple[str, list[str]]:
    """Splits ``"name:a,b"`` into ``("name", ["a", "b"])``; the name is lower-cased.

    Raises:
        ValueError: if ``spec`` is not a non-empty string.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{what} must be a non-empty string like 'name:arg1,arg2', got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    args = [a.strip() for a in rest.split(",")] if rest.strip() else []
    return name.strip().lower(), args


def enum_member(enum: type[E], name: str | E, what: str) -> E:
    """The member of ``enum`` whose value is ``name``, or a ValueError listing the choices."""
    try:
        return enum(name)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum)
        raise ValueError(f"unknown {what} {name!r}; expected one of {choices}") from None


def floats(args: list[str], counts: tuple[int, ...], spec: str, what: str) -> list[float]:
    """Parses ``args`` as floats, checking that their number is one of ``counts``."""
    if len(args) not in counts:
        expected = " or ".join(str(c) for c in counts)
        raise ValueError(f"{what} {spec!r} takes {expected} numeric argument(s), got {len(args)}")
    try:
        return [float(a) for a in args]
    except ValueError:
        raise ValueError(f"{what} {spec!r}: arguments must be numbers, got {args!r}") from None


def split_options(args: list[str], spec: str, what: str, known: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """Separates positional arguments from ``key=value`` options (which must follow them and be in ``known``).

    Raises:
        ValueError: an unknown or repeated key, or a positional argument after an option.
    """
    positional, options = [], {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            if options:
                raise ValueError(f"{what} {spec!r}: positional argument {arg!r} after a key=value option")
            positional.append(arg)
            continue
        key = key.strip().lower()
        if key not in known:
            raise ValueError(f"{what} {spec!r}: unknown option {key!r}; expected one of {', '.join(known)}")
        if key in options:
            raise ValueError(f"{what} {spec!r}: option {key!r} given twice")
        options[key] = value.strip()
    return positional, options
