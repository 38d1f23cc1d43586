"""The IDX file format that MNIST and Fashion-MNIST ship in: header parsing, validation and atomic copies.

An IDX file is a big-endian header followed by the raw array: a 4-byte magic number (two zero bytes, the
element type ``0x08`` for unsigned bytes, then the number of dimensions), one 4-byte size per dimension, then
``prod(sizes)`` bytes. Files may be gzip-compressed (``*.gz``); every length below is that of the decompressed
content.

Every failure is a ``ValueError`` that names the file, what was expected and what was found, so a truncated
download or a label file passed as images is reported before torchvision's asserts see it.
"""

from __future__ import annotations

import gzip
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
    if item_shape is not None and shape[1:] != tuple(item_shape):
        raise ValueError(
            f"{path}: expected {kind.noun} of shape (N, {', '.join(map(str, item_shape))}), found shape {shape}"
        )
    return IdxHeader(kind, shape)


def _check_length(header: IdxHeader, found_payload: int, path: Path) -> None:
    if found_payload != header.payload_bytes:
        problem = "truncated" if found_payload < header.payload_bytes else "has trailing bytes"
        raise ValueError(
            f"{path}: IDX file {problem}: its header promises {header.kind.noun} of shape {header.shape}, "
            f"i.e. {header.total_bytes} bytes ({header.header_bytes}-byte header + {header.payload_bytes} "
            f"data bytes), found {header.header_bytes + found_payload} bytes"
            + (" after decompression" if path.suffix == ".gz" else "")
        )


def _drain(stream: BinaryIO, sink: BinaryIO | None = None) -> int:
    """Reads ``stream`` to its end, writing to ``sink`` if given; returns the number of bytes read."""
    total = 0
    while chunk := stream.read(_COPY_CHUNK_BYTES):
        total += len(chunk)
        if sink is not None:
            sink.write(chunk)
    return total


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
    try:
        with open_idx(path) as stream:
            header = read_header(stream, path, kind, item_shape)
            if path.suffix == ".gz":
                payload = _drain(stream)
            else:
                payload = os.fstat(stream.fileno()).st_size - header.header_bytes
    except _GZIP_ERRORS as error:
        raise ValueError(f"{path}: not a readable gzip file ({type(error).__name__}: {error})") from error
    _check_length(header, payload, path)
    return header


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
        try:
            with open_idx(source) as stream:
                header = read_header(stream, source, kind, item_shape)
                sink.write(header.to_bytes())
                payload = _drain(stream, sink)
        except _GZIP_ERRORS as error:
            raise ValueError(f"{source}: not a readable gzip file ({type(error).__name__}: {error})") from error
        _check_length(header, payload, source)
    return header
