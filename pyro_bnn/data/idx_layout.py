"""The layout of an MNIST-style data set on disk, and the checks of its four IDX files as a whole.

``IdxDatasetSpec`` says what a data set is (its title, torchvision folder, image shape and classes);
``find_idx_files`` finds its four standard files in a folder; the checks compare image and label counts and what
each file holds with the spec. ``pyro_bnn.data.idx_reading`` reads the files, ``pyro_bnn.data.sources`` in the
order of its sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyro_bnn.data.idx import IdxFacts, IdxHeader, IdxKind, check_item_shape

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


def _check_facts(spec: IdxDatasetSpec, path: Path, kind: IdxKind, facts: IdxFacts) -> None:
    """Checks what one file of a data set holds (read afresh or remembered by a stamp) against ``spec``: at least one
    example (an empty IDX file is well formed, but no split of a data set may be empty), its shape and its labels.

    Raises:
        ValueError: one line naming ``path``, what was expected and what was found.
    """
    if facts.header.count == 0:
        raise ValueError(f"{path}: expected at least one {kind.noun.removesuffix('s')}, found 0")
    check_item_shape(facts.header, path, _item_shape(spec, kind))
    if facts.value_range is not None:
        low, high = facts.value_range
        if not 0 <= low <= high < spec.num_classes:
            raise ValueError(f"{path}: expected labels in 0..{spec.num_classes - 1}, found values from {low} to {high}")
