"""Checkpoints: written atomically, read without unpickling arbitrary objects."""

from __future__ import annotations

import os
import pickle
import re
import struct
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyro_bnn._io import atomic_path

FORMAT = "pyro_bnn.checkpoint/1"


class CheckpointMismatchError(ValueError):
    """A checkpoint a resume reads does not fit the trainer built for it (a tensor of another shape, a part
    missing), found only once the trainer is set up: one line naming the file and what differs."""


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes ``state`` to ``path`` via a temporary file in the same folder and an atomic rename.

    A crash or interruption while writing leaves the previous checkpoint at ``path`` intact. ``state`` may hold
    only tensors, numbers, strings, booleans, None, lists, tuples and dicts, the types that
    ``torch.load(weights_only=True)`` accepts: a NumPy scalar or 0-d array (``np.float64(0.5)``, a callback's best
    loss) is written as the Python number it holds, and anything else the loader would refuse (a NumPy array of
    more dimensions, a ``Decimal``, an object) is refused before anything is written, so a checkpoint on disk is
    always one a resume can read. A tensor that is a view into a larger one (a batched run's Adam state is a row of
    the batch's) is written as a copy of its own values: ``torch.save`` would write the whole storage.

    Returns:
        The checkpoint's path.

    Raises:
        ValueError: One line naming the entry the loader would refuse (``callbacks['0:Best']['best']``) and its
            type; the file at ``path`` is left as it was.
    """
    return save_tensor_file(state, path, FORMAT)


def save_tensor_file(state: dict[str, Any], path: str | os.PathLike, file_format: str) -> Path:
    """Writes ``{"format": file_format, **state}`` as :func:`save_checkpoint` does (atomically, views compacted,
    NumPy scalars as Python numbers, what the loader would refuse refused first): the writer of every file
    :func:`load_tensor_file` reads."""
    try:
        storable = _compact(state, ())
    except _Unstorable as err:
        where = "".join(f"[{key!r}]" for key in err.where)
        kind = type(err.value)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise ValueError(
            f"refusing to write {path}: its entry {where} is of type {name}, which torch.load(weights_only=True) would "
            "refuse on resume; a checkpoint holds only tensors, numbers, strings, booleans, None and lists, tuples "
            "and dicts of them"
        ) from None
    with atomic_path(path) as temporary:
        torch.save({"format": file_format, **storable}, temporary)
    return Path(path)


_PLAIN = frozenset({int, float, bool, str, type(None)})
"""Types with nothing inside for :func:`_compact` to copy or check."""

_LEAVES = _PLAIN | {complex, bytes, bytearray, torch.device, torch.dtype, torch.layout, torch.Size}
"""Every other type ``torch.load(weights_only=True)`` rebuilds without a container around it (exact types: a
subclass, a str enum say, is pickled by its class's name, which the loader refuses)."""

_DICTS = (dict, OrderedDict, Counter)


class _Unstorable(Exception):
    """An entry of a state that the weights-only loader would refuse: its keys from the top, and the value."""

    def __init__(self, where: tuple, value: Any) -> None:
        super().__init__(where, value)
        self.where, self.value = where, value


def _compact(value: Any, where: tuple = ()) -> Any:
    """``value`` as :func:`save_tensor_file` writes it: a tensor that uses only part of its storage replaced by a
    copy, a NumPy scalar or 0-d array by its Python number (the containers holding them rebuilt).

    A walk over the structure, not a trial ``torch.save`` and weights-only load: checkpoints are written every epoch,
    and the walk costs a type look-up per container entry, none per tensor element. A dict, list or tuple whose keys
    and entries are all plain numbers, strings, booleans or None is returned as it is, found by one pass over their
    types in C: the weight statistics a checkpoint carries are thousands of such lists, which a call per number
    made cost as much as writing the file.

    Raises:
        _Unstorable: an entry (``where`` + its keys) the weights-only loader would refuse.
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is torch.Tensor or kind is torch.nn.Parameter:
        if value.untyped_storage().nbytes() > value.numel() * value.element_size():
            return value.clone(memory_format=torch.contiguous_format)
        return value
    if kind in _DICTS:
        if set(map(type, value)) <= _PLAIN and set(map(type, value.values())) <= _PLAIN:
            return value
        return {_compact(k, (*where, k)): _compact(v, (*where, k)) for k, v in value.items()}
    if kind is list or kind is tuple:
        if set(map(type, value)) <= _PLAIN:
            return value
        return kind(_compact(v, (*where, i)) for i, v in enumerate(value))
    if kind is set:
        return {_compact(v, (*where, v)) for v in value}
    if kind in _LEAVES or kind in _safe_globals():
        return value
    # NumPy scalars (np.float64 is a float subclass, so "a number" to a callback's author) pickle by their class's
    # name, which the loader refuses: the number they hold is what a resume needs.
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        number = value.item()
        if type(number) in _LEAVES:
            return number
    raise _Unstorable(where, value)


def _safe_globals() -> set[type]:
    """The classes a user allowed the weights-only loader to rebuild (``torch.serialization.add_safe_globals``)."""
    allowed = torch.serialization.get_safe_globals()
    return {entry[0] if isinstance(entry, tuple) else entry for entry in allowed}


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
    # torch.save writes a zip archive; only bytes that are not one can be "no pickle torch.save wrote": from a zip
    # archive the same errors come from the caller's map_location, and are theirs to see
    not_a_pickle = () if zipfile.is_zipfile(path) else _NOT_A_PICKLE
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
    except not_a_pickle as err:
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


def config_differences(
    saved: dict[str, Any],
    current: dict[str, Any],
    ignore: Iterable[str] = (),
    *,
    same: Callable[[str, Any, Any], bool] | None = None,
) -> str:
    """One line naming the keys whose values differ (``"activation: 'relu' in the checkpoint, 'tanh' now"``), or
    an empty string; ``same(key, saved_value, current_value)`` says when two values of a key set the same thing
    (default: equal), e.g. option strings that differ only in a case their parser ignores."""
    parts = [
        f"{key}: {saved.get(key, '<missing>')!r} in the checkpoint, {current.get(key, '<missing>')!r} now"
        for key in differing_keys(saved, current, ignore, same=same)
    ]
    return "; ".join(parts)


def differing_keys(
    saved: dict[str, Any],
    current: dict[str, Any],
    ignore: Iterable[str] = (),
    *,
    same: Callable[[str, Any, Any], bool] | None = None,
) -> list[str]:
    """The keys outside ``ignore``, sorted, whose values differ (a key one config lacks differs), up to ``same``
    as in :func:`config_differences`."""
    equal = same if same is not None else (lambda key, a, b: a == b)
    keys = sorted((set(saved) | set(current)) - set(ignore))
    return [key for key in keys if not equal(key, saved.get(key, "<missing>"), current.get(key, "<missing>"))]
