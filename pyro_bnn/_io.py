"""Atomic file writes: a reader never sees a half-written file and an interruption keeps the previous one."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".part"
"""Suffix of the temporary files (leading dot + this suffix keep leftovers of a killed process out of globs)."""


def _default_mode() -> int:
    # mkstemp makes owner-only files; results and caches are ordinary files that others may read.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | os.PathLike, *, sync: bool = True) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; when the block succeeds the file is synced to disk and renamed over
    ``path`` (``os.replace``), otherwise it is removed and ``path`` is left as it was.

    Args:
        path: The file to write.
        sync: ``fsync`` the file before the rename (about 3 ms on a disk). Without it a reader still never sees a
            half-written file and an interrupted process still leaves the previous one, but after a power cut or an
            operating-system crash the file may be empty or old: for files rewritten often that only a person
            watching a run reads (a history written again at the end with ``sync=True``).

    Example:
        >>> with atomic_path("out/model.pt") as tmp:
        ...     torch.save(state, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    os.close(descriptor)
    temporary = Path(name)
    try:
        yield temporary
        if sync:
            with open(temporary, "rb") as written:
                os.fsync(written.fileno())
        os.chmod(temporary, _default_mode())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | os.PathLike, text: str, *, sync: bool = True) -> None:
    """Writes UTF-8 ``text`` to ``path`` atomically (``sync``: as :func:`atomic_path`)."""
    with atomic_path(path, sync=sync) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_json_atomically(path: str | os.PathLike, value: Any, *, sync: bool = True) -> None:
    """Writes ``value`` as indented JSON to ``path`` atomically (``sync``: as :func:`atomic_path`)."""
    write_text_atomically(path, json.dumps(value, indent=2), sync=sync)


class JsonListText:
    """The JSON text of a list that grows (a training history), encoding each item once.

    ``encoder.text(items)`` equals ``json.dumps(items, indent=indent)`` character for character, but reuses the
    encoding of the items it has seen: rewriting a history of ``n`` records after every ``k``-th epoch costs about
    ``n / k`` joins of cached strings rather than ``n / k`` encodings of the whole list (``indent`` makes ``json``
    use its pure-Python encoder, some 10 microseconds per number).

    An item's encoding is reused while the item would encode to the same text as a deep copy taken when it was
    encoded (:func:`_encodes_alike`: same types, same key order, same float text; not ``==``, under which ``True``
    equals ``1``, ``1`` equals ``1.0`` and ``-0.0`` equals ``0.0``), so items changed in place, replaced or dropped
    are encoded again.

    Args:
        indent: As ``json.dumps``'s; None for its one-line form (``", "`` between items).
    """

    def __init__(self, indent: int | None = None) -> None:
        self._indent = indent
        self._items: list[Any] = []  # deep copies of the items encoded
        self._texts: list[str] = []  # their encodings, each as it stands inside the list

    @property
    def indent(self) -> int | None:
        """As ``json.dumps``'s (fixed: the cached encodings are of this indent)."""
        return self._indent

    def text(self, items: Sequence[Any]) -> str:
        """``json.dumps(list(items), indent=self.indent)``."""
        items = list(items)
        kept = len(self._items)
        same = zip(items, self._items, strict=False)  # the shorter of the two
        kept = next((i for i, (a, b) in enumerate(same) if not _encodes_alike(a, b)), min(len(items), kept))
        del self._items[kept:], self._texts[kept:]
        for item in items[kept:]:
            self._items.append(copy.deepcopy(item))
            self._texts.append(self._encode(item))
        if not items:
            return "[]"
        if self.indent is None:
            return "[" + ", ".join(self._texts) + "]"
        pad = "\n" + " " * self.indent
        return "[" + pad + ("," + pad).join(self._texts) + "\n]"

    def _encode(self, item: Any) -> str:
        if self.indent is None:
            return json.dumps(item)
        # One level deeper than at the top: JSON strings escape their newlines, so every newline is the encoder's.
        return json.dumps(item, indent=self.indent).replace("\n", "\n" + " " * self.indent)


def _encodes_alike(a: Any, b: Any) -> bool:
    """Whether ``json.dumps`` writes ``a`` and ``b`` as the same text (for the values a JSON list holds).

    Types must match (``True``, ``1`` and ``1.0`` are equal but encode differently), dicts in the same key order,
    floats by their text (``-0.0`` and ``0.0`` differ, two NaNs agree).
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            _encodes_alike(key_a, key_b) and _encodes_alike(value_a, value_b)
            for (key_a, value_a), (key_b, value_b) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_encodes_alike, a, b))
    if isinstance(a, float):
        return float.__repr__(a) == float.__repr__(b)
    return a == b
