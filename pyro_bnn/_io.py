"""Atomic file writes: a reader never sees a half-written file and an interruption keeps the previous one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
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
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; when the block succeeds the file is synced to disk and renamed over
    ``path`` (``os.replace``), otherwise it is removed and ``path`` is left as it was.

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
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.chmod(temporary, _default_mode())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Writes UTF-8 ``text`` to ``path`` atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_json_atomically(path: str | os.PathLike, value: Any) -> None:
    """Writes ``value`` as indented JSON to ``path`` atomically."""
    write_text_atomically(path, json.dumps(value, indent=2))
