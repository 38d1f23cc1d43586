"""The cache of uncompressed IDX files, kept by content, and the remembered digests that keep reloading cheap.

Layout under the cache folder (``$PYRO_BNN_CACHE``, default ``~/.cache/pyro_bnn``):

* ``<Folder>/raw/<name>``: the *published* data set, exactly what ``torchvision.datasets.<Folder>(root=<cache>)``
  reads (``Folder`` is torchvision's class name, ``MNIST`` or ``FashionMNIST``). Only files whose MD5 is the
  published one (``pyro_bnn.data.fingerprints``) are written here, and a load that names no folder serves these
  files only after checking their digests again.
* ``by-content/<key>/<Folder>/raw/<name>``: a named folder (``data_dir``) whose files are something else, another
  data set or a test fixture. ``key`` is the MD5 of the four files' digests, so two folders share an entry only
  if their content is identical, and nothing here is ever served to a load that names no folder.
* ``.<name>.md5`` next to each cached file: a stamp with the file's digest, valid while the file keeps its size,
  modification time, change time and inode, so a later load does not read 47 MB again to know what it holds.
* ``.digests/<hash of the path>.json``: the same stamp for a source file outside the cache (a ``.gz`` in a user
  folder or Debian's package), so a repeated load neither decompresses nor hashes it.

Files enter the cache through a staging folder inside it and ``os.replace``, so an interrupted conversion never
leaves a half-written file under a final name. Every entry may be deleted at any time; it is rebuilt on demand.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyro_bnn._io import TEMP_SUFFIX
from pyro_bnn.data.idx import IdxFacts, IdxHeader, IdxKind, scan_idx

CACHE_DIR_ENV = "PYRO_BNN_CACHE"
"""Environment variable that overrides the default cache folder ``~/.cache/pyro_bnn``."""

CONTENT_DIR = "by-content"
"""Folder of the cache that holds named folders' content other than the published data sets."""

DIGESTS_DIR = ".digests"
"""Folder of the cache that remembers the digests of source files outside the cache."""

STAGING_PREFIX = ".staging-"
"""Prefix of the temporary folders that files are prepared in before they are moved into an entry."""

_STAMP_VERSION = 1


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


def content_root(cache: Path, digests: Iterable[str]) -> Path:
    """The torchvision root of the cache entry for one particular content.

    Args:
        cache: The cache folder.
        digests: MD5 of the four decompressed files, in the standard order.

    Returns:
        ``cache / "by-content" / <MD5 of the digests joined by newlines>``.
    """
    key = hashlib.md5("\n".join(digests).encode("ascii"), usedforsecurity=False).hexdigest()
    return cache / CONTENT_DIR / key


def digest_stamp_path(cached_file: Path) -> Path:
    """The digest stamp kept next to a cached file: ``.<name>.md5`` in the same folder."""
    return cached_file.with_name(f".{cached_file.name}.md5")


def source_stamp_path(cache: Path, source: Path) -> Path:
    """Where the cache remembers the digest of a file outside it, keyed by the file's absolute path."""
    key = hashlib.sha256(str(source.resolve()).encode("utf-8")).hexdigest()[:32]
    return cache / DIGESTS_DIR / f"{key}.json"


def file_signature(path: Path) -> dict[str, object]:
    """What must stay the same for a remembered digest of ``path`` to hold: its path, size, times and inode.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
    """
    status = path.stat()
    return {
        "path": str(path.resolve()),
        "size": status.st_size,
        "mtime_ns": status.st_mtime_ns,
        "ctime_ns": status.st_ctime_ns,
        "inode": status.st_ino,
    }


def recall_facts(stamp: Path, path: Path, kind: IdxKind) -> IdxFacts | None:
    """The facts a stamp remembers about ``path``, if it names ``path`` exactly as it is now.

    Args:
        stamp: The stamp file (``digest_stamp_path`` or ``source_stamp_path``).
        path: The file the facts are about.
        kind: The layout the caller expects; a stamp about another layout does not count.

    Returns:
        The facts, or ``None`` if the stamp is missing, unreadable, about another file or out of date.
    """
    try:
        record = json.loads(stamp.read_text(encoding="utf-8"))
        if record.get("version") != _STAMP_VERSION or record.get("kind") != int(kind):
            return None
        if record.get("file") != file_signature(path):
            return None
        value_range = record["value_range"]
        return IdxFacts(
            header=IdxHeader(kind, tuple(int(size) for size in record["shape"])),
            md5=str(record["md5"]),
            value_range=None if value_range is None else (int(value_range[0]), int(value_range[1])),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def record_facts(stamp: Path, facts: IdxFacts, signature: dict[str, object]) -> None:
    """Writes a stamp remembering ``facts`` about the file with ``signature`` (taken before the file was read).

    A stamp that cannot be written (a read-only cache) is skipped: it only saves time. For the same reason it is
    not synced to disk: one lost or torn in a crash fails to parse or to match, and the file is read again.
    """
    record = {
        "version": _STAMP_VERSION,
        "file": signature,
        "kind": int(facts.header.kind),
        "shape": list(facts.header.shape),
        "md5": facts.md5,
        "value_range": None if facts.value_range is None else list(facts.value_range),
    }
    # A unique name opened with "x" (so the umask applies, unlike mkstemp's owner-only files), then renamed.
    temporary = stamp.with_name(f".{stamp.name}.{os.getpid()}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "x", encoding="utf-8") as stream:
            json.dump(record, stream, sort_keys=True)
        os.replace(temporary, stamp)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


def cached_file_facts(cached_file: Path, kind: IdxKind, item_shape: tuple[int, ...] | None = None) -> IdxFacts:
    """What a cached file holds: from its stamp while the file is unchanged, else by reading it (and stamping it).

    Args:
        cached_file: An uncompressed IDX file in the cache.
        kind: Its layout.
        item_shape: Expected shape of one example; ``None`` accepts any.

    Returns:
        The file's facts.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If it has to be read and is not a valid IDX file (see ``scan_idx``).
    """
    stamp = digest_stamp_path(cached_file)
    facts = recall_facts(stamp, cached_file, kind)
    if facts is None:
        signature = file_signature(cached_file)
        facts = scan_idx(cached_file, kind, item_shape)
        record_facts(stamp, facts, signature)
    return facts


def install_cached_file(prepared: Path, cached_file: Path, facts: IdxFacts) -> None:
    """Moves a fully written, checked file into the cache (atomically) and stamps it with ``facts``.

    Args:
        prepared: The file, in a staging folder on the cache's file system, already synced to disk.
        cached_file: Its final place; its folder is created if needed.
        facts: What ``prepared`` holds.
    """
    cached_file.parent.mkdir(parents=True, exist_ok=True)
    os.replace(prepared, cached_file)
    record_facts(digest_stamp_path(cached_file), facts, file_signature(cached_file))
    # Older versions stamped a cached file with its source; that stamp no longer describes the file.
    cached_file.with_name(f".{cached_file.name}.source").unlink(missing_ok=True)


class Staging:
    """A temporary folder inside the cache (same file system, so a move into an entry is atomic), created on first
    use, so that a load that finds everything in place creates and removes nothing."""

    def __init__(self, cache: Path, prefix: str = STAGING_PREFIX) -> None:
        self._cache = cache
        self._prefix = prefix
        self._path: Path | None = None

    @property
    def path(self) -> Path:
        """The folder, created now if it does not exist yet."""
        if self._path is None:
            self._cache.mkdir(parents=True, exist_ok=True)
            self._path = Path(tempfile.mkdtemp(dir=self._cache, prefix=self._prefix))
        return self._path

    def remove(self) -> None:
        """Removes the folder and whatever is left in it."""
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


@contextmanager
def staging_dir(cache: Path, prefix: str = STAGING_PREFIX) -> Iterator[Staging]:
    """A ``Staging`` folder in ``cache``, removed with its contents when the block ends."""
    staging = Staging(cache, prefix)
    try:
        yield staging
    finally:
        staging.remove()
