"""The cache of IDX files in torchvision's raw layout, written atomically and reused while current.

Layout: ``<cache>/<Folder>/raw/<name>``, with ``Folder`` torchvision's class name (``MNIST`` or
``FashionMNIST``) and ``name`` an uncompressed IDX file: exactly what
``torchvision.datasets.MNIST(root=<cache>, download=False)`` reads. A file converted from a source folder
carries a small stamp ``.<name>.source`` (the source's path, size and modification time), so a later load
reuses it only if it came from that same, unchanged source: pointing ``data_dir`` at another copy (or a test
fixture) never serves stale pixels.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyro_bnn._io import write_text_atomically
from pyro_bnn.data.idx import IdxHeader, IdxKind, copy_idx, validate_idx

CACHE_DIR_ENV = "PYRO_BNN_CACHE"
"""Environment variable that overrides the default cache folder ``~/.cache/pyro_bnn``."""


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder to use.

    Args:
        cache_dir: An explicit folder; ``None`` falls back to ``$PYRO_BNN_CACHE``, then ``~/.cache/pyro_bnn``.

    Returns:
        The folder (it may not exist yet; writers create it).
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_DIR_ENV)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "pyro_bnn"


def torchvision_raw_dir(root: Path, folder: str) -> Path:
    """Where torchvision keeps a data set's uncompressed IDX files under ``root``.

    Args:
        root: A torchvision data root.
        folder: torchvision's class name for the data set, e.g. ``"FashionMNIST"``.

    Returns:
        ``root / folder / "raw"``.
    """
    return root / folder / "raw"


def stamp_path(cached_file: Path) -> Path:
    """The provenance stamp kept next to a converted cache file.

    Args:
        cached_file: A file in the cache.

    Returns:
        ``cached_file``'s folder ``/ ".<name>.source"``.
    """
    return cached_file.with_name(f".{cached_file.name}.source")


def _source_signature(source: Path) -> dict[str, object]:
    status = source.stat()
    return {"source": str(source.resolve()), "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def _read_stamp(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def cache_idx_file(
    source: Path, cached_file: Path, kind: IdxKind, item_shape: tuple[int, ...] | None = None
) -> IdxHeader:
    """Makes ``cached_file`` an uncompressed, validated copy of ``source``, reusing it when already current.

    The cached copy is reused when its stamp names this exact source (path, size, modification time) and it
    still validates; otherwise ``source`` is validated and decompressed or copied again (atomically, see
    ``copy_idx``) and the stamp rewritten.

    Args:
        source: IDX file, ``*.gz`` or uncompressed.
        cached_file: Destination in the cache.
        kind: Images or labels.
        item_shape: Expected shape of one example; ``None`` accepts any.

    Returns:
        The header of the cached file.

    Raises:
        FileNotFoundError: If ``source`` does not exist.
        ValueError: If ``source`` is not a valid IDX file of that kind (see ``validate_idx``).
    """
    signature = _source_signature(source)
    stamp = stamp_path(cached_file)
    if cached_file.is_file() and _read_stamp(stamp) == signature:
        try:
            return validate_idx(cached_file, kind, item_shape)
        except ValueError:
            pass  # The cached copy was damaged after it was written; rebuild it from the source below.
    header = copy_idx(source, cached_file, kind, item_shape)
    write_text_atomically(stamp, json.dumps(signature, sort_keys=True))
    return header
