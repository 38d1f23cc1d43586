"""argparse types of the bench scripts' count flags: a value out of range is refused in one line when the flags are
read (``error: argument --rounds: must be an int >= 1, got 0``), not after minutes of set-up or deep in Pyro."""

from __future__ import annotations

import argparse


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be an int >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """A count of steps, rounds, samples, threads...: an int >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """A seed, or a count where 0 means none: an int >= 0."""
    return _int_at_least(text, 0)


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of counts (``"1,8,32"``), each an int >= 1."""
    try:
        return tuple(positive_int(part) for part in text.split(","))
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"every entry {err} (in {text!r})") from None
