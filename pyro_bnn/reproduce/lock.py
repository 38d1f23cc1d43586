"""One writer per grid folder: ``OUT/.grid.lock``, held with an exclusive ``flock`` by the process that writes the
grid (runs it, rewrites its report, re-scores it), and naming that process for anyone refused.

The kernel releases a ``flock`` when its holder dies, however it dies, so a lock left by a killed process is simply
taken by the next one (the file's stale text is overwritten); no process id is ever trusted to decide that. Runs
inside the grid keep their own per-folder locks (:class:`~pyro_bnn.runs.run_folder.RunFolder`): pool workers
and Ray tasks never touch this one. ``flock`` is advisory and local to one machine's kernel (and on some network
file systems local to one client): a Ray cluster's driver holds it, its tasks need not.

The lock is re-entrant within a process (:func:`reproduce` holds it around :func:`run_grid`, which takes it too).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyro_bnn.errors import GridBusyError

LOCK = ".grid.lock"
"""The lock file in a grid's folder (hidden: it is no result)."""

__all__ = ["LOCK", "GridBusyError", "check_grid_free", "grid_lock"]

_held: dict[Path, tuple[int, int]] = {}
"""Locks this process holds: folder -> (descriptor, depth)."""


def _holder(path: Path) -> str:
    """Who holds ``path``, as its text says (``pid 123 on host since 12:00:00 UTC: pyro-bnn reproduce ...``)."""
    try:
        values = json.loads(path.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(values["since"]))
        return f"pid {values['pid']} on {values['host']} since {since} ({values['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not yet written its name)"


PATIENCE_SECONDS = 1.0
"""How long taking the lock retries before refusing: :func:`check_grid_free` holds it for an instant, and a process
starting in that instant must not be refused in the name of the lock file's previous holder."""


def _try_lock(folder: Path, patience: float = 0.0) -> int:
    path = folder / LOCK
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return descriptor
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(descriptor)
                raise
            if time.monotonic() >= deadline:
                os.close(descriptor)
                raise GridBusyError(
                    f"{folder} is in use by {_holder(path)}; wait for it to finish or pick another --out"
                ) from None
            time.sleep(0.05)


def check_grid_free(out: str | os.PathLike) -> None:
    """Raises :class:`GridBusyError` (one line naming the holder) if another process holds ``out``'s grid lock now;
    takes no lock and creates nothing when ``out`` has no lock file yet."""
    folder = Path(out)
    if folder.resolve() in _held or not (folder / LOCK).exists():
        return
    os.close(_try_lock(folder))


@contextmanager
def grid_lock(out: str | os.PathLike, command: str) -> Iterator[None]:
    """Holds ``out``'s grid lock for the block (``out`` is created when missing), writing this process's id, host,
    start time and ``command`` into the lock file for whoever is refused.

    Raises:
        GridBusyError: Another process holds it (one line naming that process).
    """
    Path(out).mkdir(parents=True, exist_ok=True)
    folder = Path(out).resolve()
    if folder in _held:
        descriptor, depth = _held[folder]
        _held[folder] = (descriptor, depth + 1)
    else:
        descriptor = _try_lock(folder, PATIENCE_SECONDS)
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "command": command})
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, text.encode(), 0)
        _held[folder] = (descriptor, 1)
    try:
        yield
    finally:
        descriptor, depth = _held[folder]
        if depth > 1:
            _held[folder] = (descriptor, depth - 1)
        else:
            del _held[folder]
            os.close(descriptor)  # releases the flock; the file stays, its text now stale
