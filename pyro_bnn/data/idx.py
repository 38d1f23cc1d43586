"""The IDX file format that MNIST and Fashion-MNIST ship in: header parsing, validation and atomic copies.

An IDX file is a big-endian header followed by the raw array: a 4-byte magic number (two zero bytes, the
element type ``0x08`` for unsigned bytes, then the number of dimensions), one 4-byte size per dimension, then
``prod(sizes)`` bytes. Files may be gzip-compressed (``*.gz``); every length below is that of the decompressed
content.

Every failure is a one-line ``ValueError`` that names the file, what was expected and what was found, so a
truncated download or a label file passed as images is reported before torchvision's asserts see it.

``scan_idx`` reads a file once to validate it, take the MD5 of its decompressed bytes (what identifies a data
set, see ``pyro_bnn.data.fingerprints``) and, optionally, write the decompressed copy, all in the same pass.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import zlib
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

from pyro_bnn._io import atomic_path

_COPY_CHUNK_BYTES = 1 << 20

# What a broken gzip stream raises: a cut-off file (EOFError), not gzip (BadGzipFile), bad data (zlib.error).
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


class IdxKind(IntEnum):
    """The two IDX layouts MNIST-style data sets use, valued by their magic number."""

    IMAGES = 2051
    """Unsigned-byte images, magic ``0x00000803``: three dimensions ``(count, rows, cols)``."""

    LABELS = 2049
    """Unsigned-byte labels, magic ``0x00000801``: one dimension ``(count,)``."""

    @property
    def ndim(self) -> int:
        """Number of dimensions, the magic number's low byte."""
        return self.value & 0xFF

    @property
    def noun(self) -> str:
        """``"images"`` or ``"labels"``, for messages."""
        return self.name.lower()


@dataclass(frozen=True)
class IdxHeader:
    """A parsed, validated IDX header.

    Attributes:
        kind: Images or labels.
        shape: Array shape, ``(count, rows, cols)`` for images, ``(count,)`` for labels.
    """

    kind: IdxKind
    shape: tuple[int, ...]

    @property
    def count(self) -> int:
        """Number of examples (the first dimension)."""
        return self.shape[0]

    @property
    def header_bytes(self) -> int:
        """Length of the header: the magic number plus one 4-byte size per dimension."""
        return 4 * (1 + len(self.shape))

    @property
    def payload_bytes(self) -> int:
        """Length of the array data that must follow the header (one byte per element)."""
        return math.prod(self.shape)

    @property
    def total_bytes(self) -> int:
        """Length the whole (decompressed) file must have."""
        return self.header_bytes + self.payload_bytes

    def to_bytes(self) -> bytes:
        """The header as it is stored on disk (big-endian)."""
        fields = (int(self.kind), *self.shape)
        return b"".join(value.to_bytes(4, "big") for value in fields)


@dataclass(frozen=True)
class IdxFacts:
    """What one full read of an IDX file established about its decompressed content.

    Attributes:
        header: The validated header.
        md5: MD5 (hex) of the decompressed file, header included.
        value_range: ``(min, max)`` of the values of a labels file (``None`` for images or an empty file).
    """

    header: IdxHeader
    md5: str
    value_range: tuple[int, int] | None = None


def open_idx(path: Path) -> BinaryIO:
    """Opens an IDX file for binary reading, decompressing on the fly when its name ends in ``.gz``.

    Args:
        path: The file.

    Returns:
        A binary stream over the decompressed content.
    """
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_exact(stream: BinaryIO, size: int, path: Path, what: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ValueError(f"{path}: truncated IDX file: expected a {size}-byte {what}, found only {len(data)} bytes")
    return data


def read_header(stream: BinaryIO, path: Path, kind: IdxKind, item_shape: tuple[int, ...] | None = None) -> IdxHeader:
    """Reads and checks the header at the start of ``stream``, leaving the stream at the first data byte.

    Args:
        stream: Binary stream positioned at the start of an (uncompressed) IDX file.
        path: The file's path, for messages.
        kind: Which layout the file must have.
        item_shape: Expected shape of one example, e.g. ``(28, 28)`` for MNIST images; ``None`` accepts any.

    Returns:
        The header.

    Raises:
        ValueError: If the magic number is not ``kind``'s, the header is cut short, or the example shape is
            not ``item_shape``.
    """
    magic = int.from_bytes(_read_exact(stream, 4, path, "magic number"), "big")
    if magic != kind.value:
        found = next((f"{k.value} ({k.noun})" for k in IdxKind if k.value == magic), str(magic))
        raise ValueError(f"{path}: expected the IDX magic number {kind.value} ({kind.noun} file), found {found}")
    sizes = _read_exact(stream, 4 * kind.ndim, path, f"header of {kind.ndim} dimension size(s)")
    shape = tuple(int.from_bytes(sizes[4 * i : 4 * i + 4], "big") for i in range(kind.ndim))
    header = IdxHeader(kind, shape)
    check_item_shape(header, path, item_shape)
    return header


def check_item_shape(header: IdxHeader, path: Path, item_shape: tuple[int, ...] | None) -> None:
    """Checks that one example of ``header`` has shape ``item_shape``.

    Args:
        header: A parsed header.
        path: The file's path, for messages.
        item_shape: Expected shape of one example; ``None`` accepts any.

    Raises:
        ValueError: If the example shape differs, naming both.
    """
    if item_shape is not None and header.shape[1:] != tuple(item_shape):
        raise ValueError(
            f"{path}: expected {header.kind.noun} of shape (N, {', '.join(map(str, item_shape))}), "
            f"found shape {header.shape}"
        )


def _check_length(header: IdxHeader, found_payload: int, path: Path) -> None:
    if found_payload != header.payload_bytes:
        problem = "truncated" if found_payload < header.payload_bytes else "has trailing bytes"
        raise ValueError(
            f"{path}: IDX file {problem}: expected {header.total_bytes} bytes, as its header promises "
            f"{header.kind.noun} of shape {header.shape} ({header.header_bytes}-byte header + "
            f"{header.payload_bytes} data bytes), found {header.header_bytes + found_payload} bytes"
            + (" after decompression" if path.suffix == ".gz" else "")
        )


def validate_idx(path: Path, kind: IdxKind, item_shape: tuple[int, ...] | None = None) -> IdxHeader:
    """Checks an IDX file's magic number, dimensions and length without loading it into memory.

    An uncompressed file is checked against its size on disk (no read past the header); a gzip file is
    decompressed in a stream to count its bytes.

    Args:
        path: The file (``*.gz`` or uncompressed).
        kind: Which layout the file must have.
        item_shape: Expected shape of one example; ``None`` accepts any.

    Returns:
        The header.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the header is wrong (see ``read_header``), the (decompressed) length differs from what
            the header promises, or a gzip file is corrupt.
    """
    if path.suffix == ".gz":
        return scan_idx(path, kind, item_shape).header
    with open_idx(path) as stream:
        header = read_header(stream, path, kind, item_shape)
        payload = os.fstat(stream.fileno()).st_size - header.header_bytes
    _check_length(header, payload, path)
    return header


def scan_idx(
    path: Path, kind: IdxKind, item_shape: tuple[int, ...] | None = None, sink: BinaryIO | None = None
) -> IdxFacts:
    """Reads an IDX file to its end once: validates it, hashes its decompressed bytes and optionally copies them.

    Args:
        path: The file (``*.gz`` is decompressed on the fly).
        kind: Which layout the file must have.
        item_shape: Expected shape of one example; ``None`` accepts any.
        sink: Binary stream that receives the decompressed file (header included); ``None`` writes nothing.
            On failure it may hold part of the file: the caller discards it.

    Returns:
        The header, the MD5 of the decompressed file and, for labels, the range of their values.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the header is wrong (see ``read_header``), the (decompressed) length differs from what
            the header promises, or a gzip file is corrupt.
    """
    digest = hashlib.md5(usedforsecurity=False)
    low, high = 256, -1
    payload = 0
    try:
        with open_idx(path) as stream:
            header = read_header(stream, path, kind, item_shape)
            head = header.to_bytes()
            digest.update(head)
            if sink is not None:
                sink.write(head)
            while chunk := stream.read(_COPY_CHUNK_BYTES):
                payload += len(chunk)
                digest.update(chunk)
                if sink is not None:
                    sink.write(chunk)
                if kind is IdxKind.LABELS:
                    low, high = min(low, min(chunk)), max(high, max(chunk))
    except _GZIP_ERRORS as error:
        raise ValueError(
            f"{path}: not a readable gzip file ({type(error).__name__}: {error}); expected a complete gzip stream, "
            f"as the name ends in .gz"
        ) from error
    _check_length(header, payload, path)
    return IdxFacts(header, digest.hexdigest(), (low, high) if high >= 0 else None)


def copy_idx(source: Path, destination: Path, kind: IdxKind, item_shape: tuple[int, ...] | None = None) -> IdxHeader:
    """Copies an IDX file to ``destination`` uncompressed, validating it on the way, atomically.

    The content goes to a temporary file in ``destination``'s folder that is renamed over ``destination`` only
    once it is complete and valid, so an interrupted or failed copy never leaves a half-written file under the
    final name, and the temporary file is removed on any failure.

    Args:
        source: The IDX file to copy (``*.gz`` is decompressed).
        destination: The uncompressed file to create or replace; its folder is created if needed.
        kind: Which layout the file must have.
        item_shape: Expected shape of one example; ``None`` accepts any.

    Returns:
        The header.

    Raises:
        FileNotFoundError: If ``source`` does not exist.
        ValueError: If ``source`` fails validation (see ``validate_idx``).
    """
    with atomic_path(destination) as temporary, open(temporary, "wb") as sink:
        return scan_idx(source, kind, item_shape, sink).header
