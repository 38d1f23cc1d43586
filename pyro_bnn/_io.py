"""Atomic file writes: a reader never sees a half-written file and an interruption keeps the previous one."""

from __future__ import annotations

import json
import os
import pickle
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
    ``n / k`` joins of cached strings and pickles of the records rather than ``n / k`` encodings of the whole list
    (``indent`` makes ``json`` use its pure-Python encoder, about a microsecond per number; pickling is some 20 times
    faster).

    An item's encoding is reused while the item pickles to the same bytes as when it was encoded: a snapshot that
    tells apart what ``==`` does not and ``json`` does (``True``, ``1`` and ``1.0``; ``-0.0`` and ``0.0``; a dict's
    key order), so items changed in place, replaced or dropped are encoded again. An item that cannot be pickled is
    encoded again on every call.

    Args:
        indent: As ``json.dumps``'s; None for its one-line form (``", "`` between items).
    """

    def __init__(self, indent: int | None = None) -> None:
        self._indent = indent
        self._snapshots: list[bytes | None] = []  # the items encoded, pickled then
        self._texts: list[str] = []  # their encodings, each as it stands inside the list

    @property
    def indent(self) -> int | None:
        """As ``json.dumps``'s (fixed: the cached encodings are of this indent)."""
        return self._indent

    def text(self, items: Sequence[Any]) -> str:
        """``json.dumps(list(items), indent=self.indent)``."""
        items = list(items)
        same = zip(items, self._snapshots, strict=False)  # the shorter of the two
        kept = next(
            (i for i, (item, snapshot) in enumerate(same) if snapshot is None or _snapshot(item) != snapshot),
            min(len(items), len(self._snapshots)),
        )
        del self._snapshots[kept:], self._texts[kept:]
        for item in items[kept:]:
            self._snapshots.append(_snapshot(item))
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


def _snapshot(item: Any) -> bytes | None:
    """``item`` pickled (equal bytes: the same types, values and key order, so the same JSON text), or None where it
    cannot be pickled (then it never matches)."""
    try:
        return pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
