"""Argument checks shared by the plots: a mapping where one is expected, and the names of what to draw.

Every function that takes the names of the panels to draw (``keys``, ``names``, ``quantities``, ``sites``) reads
them with :func:`panel_names`, so they agree: one ``str`` is one name (``keys="val_accuracy"`` draws one panel, not
one per character), any other iterable of strings names one panel each, and an empty one is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def mapping(value: Any, name: str, expected: str) -> Mapping:
    """``value`` if it is a ``Mapping``; else a one-line ``ValueError``: ``"{name} must be {expected}, got list"``."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be {expected}, got {type(value).__name__}")
    return value


def panel_names(value: str | Iterable[str], name: str) -> tuple[str, ...]:
    """The names of the panels to draw: one ``str`` is one name, an iterable of ``str`` one name per entry.

    Raises:
        ValueError: ``value`` is empty, or is not a str or an iterable of str (one line naming ``name``).
    """
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise ValueError(f"{name} must be a str or a sequence of str, got {type(value).__name__}") from None
    bad = [entry for entry in names if not isinstance(entry, str)]
    if bad:
        raise ValueError(f"{name} must be a str or a sequence of str; it holds {bad[0]!r}")
    if not names:
        raise ValueError(f"{name} must name at least one panel to draw; got none")
    return names
