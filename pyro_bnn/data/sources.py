"""Finding MNIST and Fashion-MNIST on disk (or online) and presenting them as a torchvision data root.

Sources, tried in order:

1. ``data_dir`` (the ``--data-dir`` CLI flag) if given, else ``$PYRO_BNN_DATA``. Either a torchvision root
   holding ``MNIST/raw/`` or ``FashionMNIST/raw/``, or a folder of the four IDX files
   (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
   ``t10k-labels-idx1-ubyte``, each uncompressed or ``.gz``). An explicit ``data_dir`` is authoritative: if it
   lacks a file, that is an error and nothing else is tried. ``$PYRO_BNN_DATA`` is a standing setting that may
   hold only some data sets, so a miss there falls through.
2. For Fashion-MNIST, the Debian package ``dataset-fashion-mnist`` (``DEBIAN_FASHION_MNIST_DIR``).
3. The cache (``pyro_bnn.data.cache``): its entry of the published data set, from earlier conversions and
   downloads, served only while the files' digests are the published ones.
4. torchvision's own download into the cache, when ``download=True``.

A folder of IDX files is validated whole (all four files: headers, lengths after decompression, image and label
counts, label values; ``pyro_bnn.data.idx_reading``, against ``pyro_bnn.data.idx_layout``) before any of it
enters the cache (``pyro_bnn.data.cache``), and errors name the user's file. It is then recognised by the MD5 of
its decompressed files (``pyro_bnn.data.fingerprints``):

* the published data set asked for: it becomes the cache entry that loads naming no folder read;
* anything else (another known data set, a test fixture, a modified file): a named folder (``data_dir``) is still
  loaded, with a ``DataContentWarning`` saying what it holds, from a separate entry keyed by its content, so it
  never becomes what ``load_dataset("mnist")`` without ``data_dir`` returns. ``$PYRO_BNN_DATA`` is treated the
  same way, except that another known data set there is a miss (it is set once for every data set); the Debian
  path serves the published Fashion-MNIST only.

A complete uncompressed torchvision root is used in place. A missing source falls through to the next; a corrupt
file anywhere is a one-line ``ValueError``, never skipped silently. When every source misses, one
``FileNotFoundError`` lists each place looked, why it failed and how to fix it.
"""

from __future__ import annotations

import os
import sys
import warnings
from enum import Enum
from pathlib import Path

from pyro_bnn.data.cache import (
    cached_file_facts,
    content_root,
    install_cached_file,
    resolve_cache_dir,
    staging_dir,
    torchvision_raw_dir,
)
from pyro_bnn.data.fingerprints import describe_content, identify, is_published
from pyro_bnn.data.idx_layout import (
    FASHION_MNIST_SPEC,
    IDX_FILES,
    MNIST_SPEC,
    IdxDatasetSpec,
    _check_counts,
    _check_facts,
    _describe_missing,
    _item_shape,
    find_idx_files,
)
from pyro_bnn.data.idx_reading import _commit, _remember, _Scan, _scan

DATA_DIR_ENV = "PYRO_BNN_DATA"
"""Environment variable naming a data folder, used when no ``data_dir`` is passed."""

DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package installs the gzip IDX files (read at call time, so tests
can monkeypatch it)."""

__all__ = [
    "DATA_DIR_ENV",
    "DEBIAN_FASHION_MNIST_DIR",
    "FASHION_MNIST_SPEC",
    "IDX_FILES",
    "MNIST_SPEC",
    "DataContentWarning",
    "IdxDatasetSpec",
    "find_idx_files",
    "locate_idx_dataset",
]


class DataContentWarning(UserWarning):
    """A named data folder holds something other than the published data set asked for; it is loaded anyway,
    kept apart in the cache, and never returned by a load that names no folder."""


class _Trust(Enum):
    """What a source may hold besides the published data set asked for."""

    NAMED = "named"
    """``data_dir``: anything valid, loaded with a ``DataContentWarning``."""

    STANDING = "standing"
    """``$PYRO_BNN_DATA``: like ``NAMED``, but another known data set is a miss (the setting serves every set)."""

    PUBLISHED = "published"
    """Debian's package path: the published data set only; anything else is a miss."""


class _SourceMissing(Exception):
    """A source that does not hold the data set; ``reason`` says why (internal, never escapes this module)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _stacklevel_outside_this_package() -> int:
    """The ``stacklevel`` that makes a warning raised by its caller point at the first frame outside
    ``pyro_bnn.data`` (the user's ``load_dataset`` call)."""
    package = str(Path(__file__).parent) + os.sep
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        level, frame = level + 1, frame.f_back
    return level


def _judge(spec: IdxDatasetSpec, directory: Path, where: Path, scan: _Scan, cache: Path, trust: _Trust) -> bool:
    """Whether the scanned source is the published data set; warns, or raises ``_SourceMissing``, if it is not.

    Args:
        directory: The folder as it was named (``data_dir``, ``$PYRO_BNN_DATA``, the Debian path).
        where: The folder holding the files: ``directory`` or its torchvision raw folder.
    """
    digests = scan.digests
    if is_published(spec.title, digests):
        return True
    content = describe_content(spec.title, digests)
    if trust is _Trust.PUBLISHED or (trust is _Trust.STANDING and identify(digests) is not None):
        _remember(cache, scan)  # So that the next load knows this without reading the files again.
        inside = "" if where == directory else f"its {where.relative_to(directory)} "
        raise _SourceMissing(f"{inside}holds {content}")
    named_by = "data_dir" if trust is _Trust.NAMED else f"${DATA_DIR_ENV}"
    warnings.warn(
        f"{where} holds {content}: loaded because {named_by} names it; a load that names no folder returns only "
        f"the published {spec.title}",
        DataContentWarning,
        stacklevel=_stacklevel_outside_this_package(),
    )
    return False


def _convert(
    spec: IdxDatasetSpec, directory: Path, where: Path, files: dict[str, Path], cache: Path, trust: _Trust
) -> Path:
    """Brings a folder of IDX files (any of them ``.gz``) into the cache; returns the torchvision root to load."""
    with staging_dir(cache) as staging:
        scan = _scan(spec, files, cache, staging)
        published = _judge(spec, directory, where, scan, cache, trust)
        root = cache if published else content_root(cache, scan.digests.values())
        _commit(spec, scan, root, staging)
    _remember(cache, scan)
    return root


def _from_folder(spec: IdxDatasetSpec, directory: Path, cache: Path, trust: _Trust) -> Path:
    """A torchvision root holding ``spec`` from a folder, or ``_SourceMissing`` saying what is absent."""
    if not directory.exists():
        raise _SourceMissing(f"{directory} does not exist")
    if not directory.is_dir():
        raise _SourceMissing(f"{directory} is not a directory")
    raw_dir = torchvision_raw_dir(directory, spec.folder)
    if raw_dir.is_dir():
        found, missing = find_idx_files(raw_dir)
        if missing:
            raise _SourceMissing(
                f"torchvision root with an incomplete {raw_dir}: {_describe_missing(raw_dir, missing)}"
            )
        if any(path.suffix == ".gz" for path in found.values()):
            # torchvision reads uncompressed files only; a raw folder of just the .gz downloads is converted.
            return _convert(spec, directory, raw_dir, found, cache, trust)
        scan = _scan(spec, found, cache, staging=None)
        _judge(spec, directory, raw_dir, scan, cache, trust)  # Used in place: only its digests enter the cache.
        _remember(cache, scan)
        return directory
    found, missing = find_idx_files(directory)
    if missing:
        raise _SourceMissing(f"{_describe_missing(directory, missing)} (nor is it a torchvision root: no {raw_dir})")
    return _convert(spec, directory, directory, found, cache, trust)


def _from_cache(spec: IdxDatasetSpec, cache: Path) -> Path:
    """The cache as a torchvision root if its entry for ``spec`` holds the published data set."""
    raw_dir = torchvision_raw_dir(cache, spec.folder)
    if not raw_dir.is_dir():
        raise _SourceMissing(f"{raw_dir} does not exist")
    _, missing = find_idx_files(raw_dir, allow_gzip=False)
    if missing:
        raise _SourceMissing(_describe_missing(raw_dir, missing, allow_gzip=False))
    facts = {}
    try:
        for name, kind in IDX_FILES:
            facts[name] = cached_file_facts(raw_dir / name, kind, _item_shape(spec, kind))
            _check_facts(spec, raw_dir / name, kind, facts[name])
        _check_counts({name: (raw_dir / name, value.header) for name, value in facts.items()})
    except ValueError as error:
        raise ValueError(f"{error} (this is a cache file: delete it to have it rebuilt or downloaded again)") from error
    digests = {name: value.md5 for name, value in facts.items()}
    if not is_published(spec.title, digests):
        # Left by an older version, which cached every data_dir here, or put there by hand: never served.
        raise _SourceMissing(
            f"{raw_dir} holds {describe_content(spec.title, digests)}, so it is not used (a download replaces "
            f"it; or delete it)"
        )
    return cache


def _download_into_cache(spec: IdxDatasetSpec, cache: Path) -> Path:
    """Runs torchvision's download in a staging folder inside the cache, then moves the checked files in.

    torchvision writes and extracts in place, so an interrupted download would leave partial files under their
    final names; staging keeps the cache itself all-or-nothing. Only the published data set enters the cache.
    """
    import torchvision.datasets

    with staging_dir(cache, prefix=".download-") as staging:
        dataset_class = getattr(torchvision.datasets, spec.folder)
        dataset_class(root=str(staging.path), train=True, download=True)
        staged_raw = torchvision_raw_dir(staging.path, spec.folder)
        files = {name: staged_raw / name for name, _ in IDX_FILES}
        # Source stamps looked for inside the staging folder: there are none, so every file is read.
        scan = _scan(spec, files, staging.path, staging=None)
        if not is_published(spec.title, scan.digests):
            raise ValueError(
                f"the download in {staged_raw} holds {describe_content(spec.title, scan.digests)}; expected the "
                f"published files"
            )
        raw_dir = torchvision_raw_dir(cache, spec.folder)
        for name, _ in IDX_FILES:
            install_cached_file(files[name], raw_dir / name, scan.facts[name])
    return cache


def _not_found_message(spec: IdxDatasetSpec, looked: list[str], cache: Path) -> str:
    names = ", ".join(name for name, _ in IDX_FILES)
    lines = [f"{spec.title} was not found. Places looked, in order:"]
    lines += [f"  {number}. {entry}" for number, entry in enumerate(looked, start=1)]
    lines.append("To fix it, do one of:")
    if spec.apt_package is not None:
        lines.append(f"  - install the Debian package: sudo apt-get install {spec.apt_package}")
    lines.append(
        f"  - pass --data-dir DIR on the command line (data_dir=DIR in Python) or set {DATA_DIR_ENV}=DIR, "
        f"where DIR holds {names} (each optionally .gz) or is a torchvision root containing "
        f"{spec.folder}/raw/"
    )
    lines.append(f"  - go online and load with download=True, so torchvision downloads it into {cache}")
    return "\n".join(lines)


def locate_idx_dataset(
    spec: IdxDatasetSpec,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> Path:
    """Finds an MNIST-style data set: a torchvision root whose raw folder holds its validated files.

    See the module docstring for the order of sources.

    Args:
        spec: Which data set (``MNIST_SPEC`` or ``FASHION_MNIST_SPEC``).
        data_dir: Explicit folder (IDX files or torchvision root); when given, the only source tried.
        cache_dir: Cache folder; ``None`` means ``$PYRO_BNN_CACHE`` or ``~/.cache/pyro_bnn``.
        download: Whether torchvision may download the files as a last resort.

    Returns:
        A folder ``root`` such that ``torchvision.datasets.<spec.folder>(root, download=False)`` loads the
        data: a torchvision root named as ``data_dir`` itself, the cache (the published data set) or a
        content-keyed cache entry (a named folder of other content).

    Raises:
        FileNotFoundError: If an explicit ``data_dir`` lacks a file (naming it), or no source holds the data
            set (listing every place looked, why each failed, and the fixes).
        ValueError: If a file that was found is not a valid IDX file (wrong magic number, dimensions or
            length, broken gzip stream), image and label counts disagree or a label is out of range; the
            one-line message names the user's file, what was expected and what was found.

    Warns:
        DataContentWarning: If a named folder (``data_dir`` or ``$PYRO_BNN_DATA``) holds anything but the
            published data set; it is loaded all the same.
    """
    cache = resolve_cache_dir(cache_dir)
    if data_dir is not None:
        directory = Path(data_dir).expanduser()
        try:
            return _from_folder(spec, directory, cache, _Trust.NAMED)
        except _SourceMissing as missing:
            raise FileNotFoundError(
                f"{spec.title} not found in data_dir={str(directory)!r}: {missing.reason}. data_dir was "
                f"given explicitly, so no other source was tried; pass a folder holding "
                f"{', '.join(name for name, _ in IDX_FILES)} (each optionally .gz) or a torchvision root "
                f"containing {spec.folder}/raw/"
            ) from None

    looked = ["data_dir argument (--data-dir): not given"]
    from_env = os.environ.get(DATA_DIR_ENV)
    if from_env:
        try:
            return _from_folder(spec, Path(from_env).expanduser(), cache, _Trust.STANDING)
        except _SourceMissing as missing:
            looked.append(f"${DATA_DIR_ENV}={from_env}: {missing.reason}")
    else:
        looked.append(f"${DATA_DIR_ENV}: not set")

    if spec.apt_package is not None:
        debian_dir = DEBIAN_FASHION_MNIST_DIR
        where = f"{debian_dir} (Debian package {spec.apt_package})"
        if not debian_dir.is_dir():
            looked.append(f"{where}: does not exist")
        else:
            found, missing_names = find_idx_files(debian_dir)
            if not missing_names:
                try:
                    return _convert(spec, debian_dir, debian_dir, found, cache, _Trust.PUBLISHED)
                except _SourceMissing as missing:
                    looked.append(f"{where}: {missing.reason}")
            else:
                looked.append(f"{where}: {_describe_missing(debian_dir, missing_names)}")

    try:
        return _from_cache(spec, cache)
    except _SourceMissing as missing:
        looked.append(f"cache of earlier conversions and downloads: {missing.reason}")

    if not download:
        looked.append(f"torchvision download into {cache}: not tried because download=False")
    else:
        try:
            return _download_into_cache(spec, cache)
        except Exception as error:
            # Whatever stops the download (no network, a mirror's error, a full disk) is listed with the rest.
            detail = f"{type(error).__name__}: {error}".strip().replace("\n", "\n       ")
            looked.append(f"torchvision download into {cache}: failed with {detail}")
    raise FileNotFoundError(_not_found_message(spec, looked, cache))
