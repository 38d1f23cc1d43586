"""Writing figures to disk."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from matplotlib.figure import Figure

from pyro_bnn._io import atomic_path

DEFAULT_FORMAT = "png"
"""Format written when the path has no suffix."""


def _close(fig: Figure) -> None:
    """Releases ``fig`` from pyplot's registry where it is registered; other figures need nothing."""
    # A figure can only be registered with pyplot if pyplot was imported, and importing it here just to close
    # a figure would make it choose a backend as a side effect.
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: float = 150) -> Path:
    """Writes a figure atomically and closes it.

    The figure is rendered to a temporary file in the target's directory and moved over the target with
    ``os.replace``, so a reader never sees a half-written file and an existing file survives a failed render.
    The temporary file is created like any other file, so the result gets the usual permissions (the umask's),
    not a private temp file's 0600. The figure is closed only after a successful write.

    Args:
        fig: the figure to write.
        path: target file; missing parent directories are created. Its suffix picks the format (``.png``,
            ``.pdf``, ``.svg``, ... as matplotlib supports); without one, ``.png`` is appended.
        dpi: resolution for raster formats.

    Returns:
        The path written, with the suffix appended where there was none.

    Raises:
        ValueError: the suffix names a format matplotlib cannot write.
    """
    path = Path(path)
    if not path.suffix:
        path = path.with_name(f"{path.name}.{DEFAULT_FORMAT}")
    file_format = path.suffix[1:].lower()
    supported = fig.canvas.get_supported_filetypes()
    if file_format not in supported:
        raise ValueError(
            f"cannot write a figure as {path.suffix!r} ({path}); supported suffixes: "
            + ", ".join(f".{name}" for name in sorted(supported))
        )

    with atomic_path(path) as temporary:
        fig.savefig(temporary, format=file_format, dpi=dpi, bbox_inches="tight")
    _close(fig)
    return path
