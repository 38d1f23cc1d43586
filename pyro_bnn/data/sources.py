"""Finding MNIST and Fashion-MNIST on disk (or online) and presenting them as a torchvision data root.

Sources, tried in order:

1. ``data_dir`` (the ``--data-dir`` CLI flag) if given, else ``$PYRO_BNN_DATA``. Either a torchvision root
   holding ``MNIST/raw/`` or ``FashionMNIST/raw/``, or a folder of the four IDX files
   (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
   ``t10k-labels-idx1-ubyte``, each uncompressed or ``.gz``). An explicit ``data_dir`` is authoritative: if it
   lacks a file, that is an error and nothing else is tried. ``$PYRO_BNN_DATA`` is a standing setting that may
   hold only some data sets, so a miss there falls through.
2. For Fashion-MNIST, the Debian package ``dataset-fashion-mnist`` (``DEBIAN_FASHION_MNIST_DIR``).
3. The cache (``pyro_bnn.data.cache``), holding earlier conversions and downloads.
4. torchvision's own download into the cache, when ``download=True``.

A folder of IDX files is converted into the cache's torchvision layout (decompressed, validated, written
atomically) and loaded from there with ``torchvision.datasets.MNIST`` / ``FashionMNIST``; a complete
uncompressed torchvision root is used in place. A missing source falls through to the next; a corrupt file
anywhere is a ``ValueError``, never skipped silently. When every source misses, one ``FileNotFoundError``
lists each place looked, why it failed and how to fix it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyro_bnn.data.cache import cache_idx_file, resolve_cache_dir, stamp_path, torchvision_raw_dir
from pyro_bnn.data.idx import IdxHeader, IdxKind, validate_idx

DATA_DIR_ENV = "PYRO_BNN_DATA"
"""Environment variable naming a data folder, used when no ``data_dir`` is passed."""

DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package installs the gzip IDX files (read at call time, so tests
can monkeypatch it)."""

IDX_FILES: tuple[tuple[str, IdxKind], ...] = (
    ("train-images-idx3-ubyte", IdxKind.IMAGES),
    ("train-labels-idx1-ubyte", IdxKind.LABELS),
    ("t10k-images-idx3-ubyte", IdxKind.IMAGES),
    ("t10k-labels-idx1-ubyte", IdxKind.LABELS),
)
"""The four standard IDX file names (without ``.gz``) and what each holds."""

_PAIRS = (
    ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
)


@dataclass(frozen=True)
class IdxDatasetSpec:
    """What the locator needs to know about one MNIST-style data set.

    Attributes:
        title: Human-readable name for messages, e.g. ``"Fashion-MNIST"``.
        folder: torchvision's class name, which is also its folder under a data root (``"FashionMNIST"``).
        image_shape: ``(rows, cols)`` of one image.
        num_classes: Labels must lie in ``0 .. num_classes - 1``.
        apt_package: Debian package that installs it, or ``None``.
    """

    title: str
    folder: str
    image_shape: tuple[int, int] = (28, 28)
    num_classes: int = 10
    apt_package: str | None = None


MNIST_SPEC = IdxDatasetSpec(title="MNIST", folder="MNIST")
FASHION_MNIST_SPEC = IdxDatasetSpec(title="Fashion-MNIST", folder="FashionMNIST", apt_package="dataset-fashion-mnist")


class _SourceMissing(Exception):
    """A source that does not hold the data set; ``reason`` says why (internal, never escapes this module)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _item_shape(spec: IdxDatasetSpec, kind: IdxKind) -> tuple[int, ...]:
    return spec.image_shape if kind is IdxKind.IMAGES else ()


def find_idx_files(folder: Path, *, allow_gzip: bool = True) -> tuple[dict[str, Path], list[str]]:
    """Looks for the four standard IDX files in one folder.

    Args:
        folder: Folder to search (not recursively).
        allow_gzip: Whether ``<name>.gz`` counts; the uncompressed name is preferred when both exist.

    Returns:
        ``(found, missing)``: the path of each file found, keyed by its standard name, and the standard names
        of those not found.
    """
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name, _ in IDX_FILES:
        candidates = [folder / name] + ([folder / f"{name}.gz"] if allow_gzip else [])
        path = next((candidate for candidate in candidates if candidate.is_file()), None)
        if path is None:
            missing.append(name)
        else:
            found[name] = path
    return found, missing


def _describe_missing(folder: Path, missing: list[str], *, allow_gzip: bool = True) -> str:
    suffix = "[.gz]" if allow_gzip else ""
    return f"missing {', '.join(str(folder / f'{name}{suffix}') for name in missing)}"


def _check_counts(headers: dict[str, tuple[Path, IdxHeader]]) -> None:
    for images_name, labels_name in _PAIRS:
        images_path, images = headers[images_name]
        labels_path, labels = headers[labels_name]
        if images.count != labels.count:
            raise ValueError(
                f"image/label count mismatch: {images_path} holds {images.count} images but {labels_path} "
                f"holds {labels.count} labels; expected one label per image"
            )


def _validate_raw_dir(spec: IdxDatasetSpec, raw_dir: Path) -> None:
    headers = {
        name: (raw_dir / name, validate_idx(raw_dir / name, kind, _item_shape(spec, kind))) for name, kind in IDX_FILES
    }
    _check_counts(headers)


def _convert_into_cache(spec: IdxDatasetSpec, found: dict[str, Path], cache: Path) -> Path:
    raw_dir = torchvision_raw_dir(cache, spec.folder)
    headers = {}
    for name, kind in IDX_FILES:
        headers[name] = (
            found[name],
            cache_idx_file(found[name], raw_dir / name, kind, _item_shape(spec, kind)),
        )
    _check_counts(headers)
    return cache


def _from_folder(spec: IdxDatasetSpec, directory: Path, cache: Path) -> Path:
    """A torchvision root holding ``spec`` from a user folder, or ``_SourceMissing`` saying what is absent."""
    if not directory.exists():
        raise _SourceMissing(f"{directory} does not exist")
    if not directory.is_dir():
        raise _SourceMissing(f"{directory} is not a directory")
    raw_dir = torchvision_raw_dir(directory, spec.folder)
    if raw_dir.is_dir():
        found, missing = find_idx_files(raw_dir)
        if not missing:
            if all(path.suffix != ".gz" for path in found.values()):
                _validate_raw_dir(spec, raw_dir)
                return directory
            # torchvision reads uncompressed files only; a raw folder of just the .gz downloads is converted.
            return _convert_into_cache(spec, found, cache)
        raise _SourceMissing(f"torchvision root with an incomplete {raw_dir}: {_describe_missing(raw_dir, missing)}")
    found, missing = find_idx_files(directory)
    if not missing:
        return _convert_into_cache(spec, found, cache)
    raise _SourceMissing(f"{_describe_missing(directory, missing)} (nor is it a torchvision root: no {raw_dir})")


def _from_cache(spec: IdxDatasetSpec, cache: Path) -> Path:
    raw_dir = torchvision_raw_dir(cache, spec.folder)
    if not raw_dir.is_dir():
        raise _SourceMissing(f"{raw_dir} does not exist")
    _, missing = find_idx_files(raw_dir, allow_gzip=False)
    if missing:
        raise _SourceMissing(_describe_missing(raw_dir, missing, allow_gzip=False))
    try:
        _validate_raw_dir(spec, raw_dir)
    except ValueError as error:
        raise ValueError(f"{error} (this is a cache file: delete it to have it rebuilt or downloaded again)") from error
    return cache


def _download_into_cache(spec: IdxDatasetSpec, cache: Path) -> Path:
    """Runs torchvision's download in a staging folder inside the cache, then moves the checked files in.

    torchvision writes and extracts in place, so an interrupted download would leave partial files under their
    final names; staging keeps the cache itself all-or-nothing.
    """
    import torchvision.datasets

    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".download-"))
    try:
        dataset_class = getattr(torchvision.datasets, spec.folder)
        dataset_class(root=str(staging), train=True, download=True)
        staged_raw = torchvision_raw_dir(staging, spec.folder)
        _validate_raw_dir(spec, staged_raw)
        raw_dir = torchvision_raw_dir(cache, spec.folder)
        raw_dir.mkdir(parents=True, exist_ok=True)
        for name, _ in IDX_FILES:
            os.replace(staged_raw / name, raw_dir / name)
            # The file now comes from the download, not from the source an old stamp names.
            stamp_path(raw_dir / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
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
        data: ``data_dir`` itself or the cache.

    Raises:
        FileNotFoundError: If an explicit ``data_dir`` lacks a file (naming it), or no source holds the data
            set (listing every place looked, why each failed, and the fixes).
        ValueError: If a file that was found is not a valid IDX file (wrong magic number, dimensions or
            length) or image and label counts disagree.
    """
    cache = resolve_cache_dir(cache_dir)
    if data_dir is not None:
        directory = Path(data_dir).expanduser()
        try:
            return _from_folder(spec, directory, cache)
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
            return _from_folder(spec, Path(from_env).expanduser(), cache)
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
                return _convert_into_cache(spec, found, cache)
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
