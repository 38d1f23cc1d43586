"""Run folders that lose nothing: one run at a time, an old run replaced only by a finished new one, no debris.

:func:`check_writable` is the up-front check of every verb that writes a folder (one line for a path that cannot be
one, before any data is read). :class:`RunFolder` is what ``train_run`` trains inside:

* **Locked.** An exclusive ``flock`` on the folder itself for the whole run; a second run on the same ``--out``
  fails at once with one line instead of both reporting success while one's results are lost.
* **Overwrite swaps.** With ``overwrite`` and an earlier run in the folder, the new run trains in a hidden sibling
  (``.<name>.staging``) and replaces the old folder only when it has finished; a new run that fails or is killed
  leaves the old run as it was.
* **No debris.** Temporary files left by a killed write (``.*.part``) and a stale staging sibling are removed when
  the next run takes the lock; a run that fails before writing its first checkpoint removes the files it wrote
  (and the folder, if it created it) instead of leaving a folder with only ``config.json``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from pyro_bnn._io import TEMP_SUFFIX

CHECKPOINT = "checkpoint.pt"

STOPPED = "stopped.json"
"""Written into a run folder whose training stopped on a divergence with a good checkpoint left (``{"stopped":
"diverged", "message": ...}``): the folder says why it holds no ``metrics.json``. Removed when the run trains
again."""

GRID_FILES = ("grid.json", "reproduce.json")
"""The files that make a folder a grid of runs (an ensemble's or a reproduction's: ``pyro_bnn.reproduce``'s
``GRID`` and ``STATE``), which a single run must not share."""

RUN_FILES = (CHECKPOINT, "config.json")
"""The files that make a folder a single run's (``train``, ``sample``), which a grid must not share."""


def check_not_a_grid(out: Path) -> None:
    """Refuses, in one line, a folder that holds a grid of runs: a single run's files beside a grid's would be
    read as neither."""
    for name in GRID_FILES:
        if (Path(out) / name).exists():
            raise FileExistsError(f"{out} holds a grid of runs ({name}); give this run a folder of its own")


def check_not_a_run(out: Path, *, what: str = "the grid") -> None:
    """Refuses, in one line, a folder that holds a single run: a grid's files beside it would be read as neither
    (``what``: the message's name for what would be written there, ``"the grid"``, ``"the demo"``)."""
    for name in RUN_FILES:
        if (Path(out) / name).exists():
            raise FileExistsError(f"{out} holds a run ({name}); give {what} a folder of its own")


class RunFolderBusyError(FileExistsError):
    """Another process holds the run folder's lock."""


def check_writable(out: str | os.PathLike, *, option: str = "--out") -> None:
    """Checks that ``out`` can be a run folder by trying it, and leaves the file system as it found it.

    The one up-front check of every verb that writes a folder (``train``, ``demo``, ``evaluate``, ``diagnose``,
    ``reproduce`` and its grids), called before any data is read, so that a bad path costs one line instead of a
    traceback after the work. Trying is the only test that holds: permission bits say nothing to root, and
    read-only, pseudo (``/sys``, ``/proc``) or full file systems refuse writes that ``os.access`` allows. So the
    folder and its missing parents are created, a probe file is written and removed, the folder is opened for
    reading (as the run's lock does), and the folders created here are removed again: a run refused afterwards
    (missing data, a busy folder) leaves nothing behind, and :class:`RunFolder` creates the folder for real.

    Args:
        out: The folder. An empty string is refused: it would quietly mean the current folder.
        option: What the message calls the path (``"--out"``, ``"run folder"``).

    Raises:
        ValueError: One line naming ``out`` and the reason (a file in the way, or the system's words for the
            ``OSError``: "Permission denied", "Read-only file system", "File name too long", ...).
    """
    if os.fspath(out) == "":
        raise ValueError(f"{option} is empty; name a folder (. for the current one)")
    path = Path(out)
    created: list[Path] = []
    try:
        if path.exists() and not path.is_dir():
            raise ValueError(f"{option} {path} exists and is not a folder")
        missing, existing = [], path
        while not existing.exists() and existing.parent != existing:
            missing.append(existing)
            existing = existing.parent
        if not existing.is_dir():
            raise ValueError(f"{option} {path} cannot be created: {existing} is not a folder")
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except OSError as err:
                where = "" if folder == path else f"{folder}: "
                raise ValueError(f"{option} {path} cannot be created: {where}{_reason(err)}") from None
            created.append(folder)
        try:
            _probe(path)
        except OSError as err:
            raise ValueError(f"{option} {path} cannot be written: {_reason(err)}") from None
    except OSError as err:  # stat() itself failing: a name too long, a loop of links, an unreadable parent
        raise ValueError(f"{option} {path} cannot be used: {_reason(err)}") from None
    finally:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                pass  # another run put files in it meanwhile: they are its files now


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def _probe(folder: Path) -> None:
    # A killed probe leaves a .*.part file, which the next run on the folder removes with its other leftovers.
    descriptor, name = tempfile.mkstemp(dir=folder, prefix=".write-probe.", suffix=TEMP_SUFFIX)
    try:
        os.write(descriptor, b"pyro-bnn")
    finally:
        os.close(descriptor)
        Path(name).unlink(missing_ok=True)
    os.close(os.open(folder, os.O_RDONLY))


def _lock(folder: Path) -> int:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(descriptor)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RunFolderBusyError(
                f"{folder} is in use by another pyro-bnn run; wait for it or pick another --out"
            ) from None
        raise
    return descriptor


def check_not_busy(out: Path) -> None:
    """Raises :class:`RunFolderBusyError` if another run holds ``out`` now (a check; it takes no lock)."""
    if out.is_dir():
        os.close(_lock(out))


def staging_path(out: Path) -> Path:
    return out.parent / f".{out.name}.staging"


def remove_temporary_files(folder: Path) -> list[Path]:
    """Removes the temporary files a killed atomic write leaves (``.<name>.<random>.part``); returns them."""
    stale = [p for p in folder.glob(f".*{TEMP_SUFFIX}") if p.is_file()] if folder.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


class RunFolder:
    """The folder a run trains in, as a context manager: ``with RunFolder(out, overwrite=...) as work: ...``.

    ``work`` is ``out`` itself, or a staging sibling when an earlier run in ``out`` is being overwritten; on a
    clean exit the staging folder replaces ``out``. See the module docstring for the guarantees.

    Args:
        out: The run folder (created when missing).
        overwrite: Replace an earlier run (one with a checkpoint) once this one finishes.
    """

    def __init__(self, out: str | os.PathLike, *, overwrite: bool = False) -> None:
        self.out = Path(out)
        self.overwrite = overwrite
        self.work: Path | None = None
        self._descriptor: int | None = None
        self._created = False
        self._written: list[Path] = []

    def __enter__(self) -> Path:
        check_writable(self.out)
        self._created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        self._descriptor = _lock(self.out)
        try:
            remove_temporary_files(self.out)
            staging = staging_path(self.out)
            if staging.exists():
                shutil.rmtree(staging)  # a killed overwrite's leftovers: the lock says nobody owns them
            if self.overwrite and (self.out / CHECKPOINT).exists():
                staging.mkdir()
                self.work = staging
            else:
                self.work = self.out
            self._before = set(self.work.iterdir())
        except BaseException:
            self._unlock()
            raise
        return self.work

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                if self.work != self.out:
                    self._swap()
            elif self.work != self.out:
                shutil.rmtree(self.work, ignore_errors=True)  # the old run stays as it was
            elif not (self.out / CHECKPOINT).exists():
                self._remove_new_files()
        finally:
            self._unlock()

    def _swap(self) -> None:
        old = self.out.parent / f".{self.out.name}.replaced"
        if old.exists():
            shutil.rmtree(old)
        os.rename(self.out, old)
        os.rename(self.work, self.out)
        shutil.rmtree(old, ignore_errors=True)

    def _remove_new_files(self) -> None:
        for path in set(self.out.iterdir()) - self._before:
            if path.is_file():
                path.unlink(missing_ok=True)
        if self._created and not any(self.out.iterdir()):
            self.out.rmdir()

    def _unlock(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing the descriptor releases the flock
            self._descriptor = None
