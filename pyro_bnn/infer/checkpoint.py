"""Checkpoints: written atomically, read without unpickling arbitrary objects."""

from __future__ import annotations

import os
import pickle
import re
import struct
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from pyro_bnn._io import atomic_path

FORMAT = "pyro_bnn.checkpoint/1"


class CheckpointMismatchError(ValueError):
    """A checkpoint a resume reads does not fit the trainer built for it (a tensor of another shape, a part
    missing), found only once the trainer is set up: one line naming the file and what differs."""


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes ``state`` to ``path`` via a temporary file in the same folder and an atomic rename.

    A crash or interruption while writing leaves the previous checkpoint at ``path`` intact. ``state`` may hold
    only tensors, numbers, strings, booleans, None, lists and dicts, the types that
    ``torch.load(weights_only=True)`` accepts. A tensor that is a view into a larger one (a batched run's Adam state
    is a row of the batch's) is written as a copy of its own values: ``torch.save`` would write the whole storage.

    Returns:
        The checkpoint's path.
    """
    return save_tensor_file(state, path, FORMAT)


def save_tensor_file(state: dict[str, Any], path: str | os.PathLike, file_format: str) -> Path:
    """Writes ``{"format": file_format, **state}`` as :func:`save_checkpoint` does (atomically, views compacted):
    the writer of every file :func:`load_tensor_file` reads."""
    with atomic_path(path) as temporary:
        torch.save({"format": file_format, **_compact(state)}, temporary)
    return Path(path)


_PLAIN = frozenset({int, float, bool, str, type(None)})
"""Types with nothing inside for :func:`_compact` to copy."""


def _compact(value: Any) -> Any:
    """``value`` with every tensor that uses only part of its storage replaced by a copy (the containers holding
    them rebuilt).

    A dict, list or tuple whose entries are all plain numbers, strings, booleans or None is returned as it is, found
    by one pass over their types in C: the weight statistics a checkpoint carries are thousands of such lists,
    which a call per number made cost as much as writing the file.
    """
    if isinstance(value, torch.Tensor):
        if value.untyped_storage().nbytes() > value.numel() * value.element_size():
            return value.clone(memory_format=torch.contiguous_format)
        return value
    if isinstance(value, dict):
        if set(map(type, value.values())) <= _PLAIN:
            return value
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if set(map(type, value)) <= _PLAIN:
            return value
        return type(value)(_compact(v) for v in value)
    return value


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device | None = "cpu") -> dict[str, Any]:
    """Reads a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)``.

    Raises:
        FileNotFoundError: if there is no file at ``path``.
        ValueError: if the file holds pickled objects other than tensors and plain containers (refused, since
            unpickling can run arbitrary code), is empty, truncated or corrupt (one line naming the file, its size
            and what torch could not read), or is not a pyro_bnn checkpoint.
    """
    return load_tensor_file(path, FORMAT, "checkpoint", map_location)


def load_tensor_file(
    path: str | os.PathLike, file_format: str, what: str, map_location: str | torch.device | None = "cpu"
) -> dict[str, Any]:
    """Reads a file of :func:`save_tensor_file` whose format is ``file_format``, as :func:`load_checkpoint` does
    (``what`` names the kind of file in its errors: ``"checkpoint"``, ``"SWAG posterior file"``).

    Raises:
        FileNotFoundError, ValueError: as :func:`load_checkpoint`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}")
    size = path.stat().st_size
    if size == 0:  # torch.load raises a bare EOFError, with no message at all
        raise ValueError(f"{path} is not a readable {what}: the file is empty (0 bytes)")
    _check_stored_checksums(path, size, what)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's text ends in advice to load with weights_only=False, which is what this refusal exists to prevent.
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        operand = re.search(r"Unsupported operand (\d+)", str(err))
        if operand and not found:  # bytes that are no pickle torch reads: random data, a text file, another format
            raise ValueError(
                f"{path} is not a pyro_bnn {what} ({size:,} bytes): torch.load reads no {what} in it "
                f"(unsupported pickle opcode {operand.group(1)}: not a file torch.save wrote)"
            ) from err
        reason = f"it names {found.group(1)}" if found else _why(err)
        raise ValueError(
            f"refusing to load {path}: it contains pickled objects other than tensors and plain containers, "
            f"which could run arbitrary code ({reason})"
        ) from err
    except _NOT_A_PICKLE as err:
        # The weights-only unpickler runs the opcodes of any bytes it is given: a text file or random data pops an
        # empty stack, reads a memo entry never stored or decodes bytes that are no UTF-8, and each says so in a
        # bare Python error of its own (a CSV file: IndexError, a file starting "hello": KeyError 101).
        raise ValueError(
            f"{path} is not a pyro_bnn {what} ({size:,} bytes): torch.load reads no {what} in it "
            f"(its bytes are no pickle torch.save wrote: {type(err).__name__}: {_why(err)})"
        ) from err
    except (RuntimeError, EOFError) as err:
        raise ValueError(
            f"{path} is not a readable {what} (truncated or corrupt, {size:,} bytes): {_why(err)}"
        ) from err
    except OSError as err:
        if err.filename is not None:  # the file itself could not be opened or read: the system's words name it
            raise
        # A zip archive cut short (a copy or disk that stopped midway): torch's reader raises EINVAL, naming nothing.
        raise ValueError(
            f"{path} is not a readable {what} (truncated or corrupt, {size:,} bytes): torch.load cannot read it "
            f"as a zip archive ({_why(err)})"
        ) from err
    if not isinstance(state, dict) or state.get("format") != file_format:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path} is not a pyro_bnn {what}: expected format {file_format!r}, found {found!r}")
    return state


_NOT_A_PICKLE = (IndexError, KeyError, TypeError, AttributeError, OverflowError, struct.error, UnicodeDecodeError)
"""What ``torch.load(weights_only=True)`` raises, besides ``UnpicklingError``, on bytes that are no pickle."""


def _check_stored_checksums(path: Path, size: int, what: str) -> None:
    """Refuses a checkpoint whose zip archive (``torch.save``'s format) holds a member whose bytes do not match the
    CRC-32 stored beside them: torch's reader does not check them, so bytes damaged in the middle of a file (a bad
    disk or copy) would load as wrong numbers. Reads the file once more; a file that is no zip archive is left to
    ``torch.load``."""
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        raise ValueError(
            f"{path} is not a readable {what} (truncated or corrupt, {size:,} bytes): {_why(err)}"
        ) from err
    if damaged is not None:
        raise ValueError(
            f"{path} is not a readable {what} (corrupt, {size:,} bytes): the bytes of its record "
            f"{damaged.split('/', 1)[-1]!r} do not match the checksum stored with them"
        )


def _why(err: BaseException) -> str:
    """The first sentence of an error's message (torch appends a paragraph of advice), or its type's name when it
    has none: a message never ends in a bare colon."""
    text = " ".join(str(err).split())
    if isinstance(err, OSError) and err.strerror:
        text = err.strerror
    first = text.split(". ")[0].rstrip(".")
    return first or f"{type(err).__name__} with no message"


def state_dict_mismatch(err: RuntimeError | KeyError | ValueError) -> str:
    """The line of a ``load_state_dict`` failure that says what did not fit: torch's first ``size mismatch for
    loc: ...``, ``Missing key(s) ...`` or ``Unexpected key(s) ...`` line (its first line only names the class), or
    the key a checkpoint lacks."""
    if isinstance(err, KeyError):
        return f"it holds no {err.args[0]!r}" if err.args else "a key is missing"
    lines = [" ".join(line.split()) for line in str(err).strip().splitlines()]
    told = [line for line in lines[1:] if line]
    return (told[0] if told else lines[0] if lines else type(err).__name__).rstrip(".")


def config_differences(saved: dict[str, Any], current: dict[str, Any], ignore: Iterable[str] = ()) -> str:
    """One line naming the keys whose values differ (``"activation: 'relu' in the checkpoint, 'tanh' now"``), or
    an empty string."""
    keys = sorted((set(saved) | set(current)) - set(ignore))
    parts = [
        f"{key}: {saved.get(key, '<missing>')!r} in the checkpoint, {current.get(key, '<missing>')!r} now"
        for key in keys
        if saved.get(key, "<missing>") != current.get(key, "<missing>")
    ]
    return "; ".join(parts)
