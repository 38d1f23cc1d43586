"""Run folders that lose nothing: one run at a time, an old run replaced only by a finished new one, no debris.

:class:`RunFolder` is what ``train_run`` trains inside:

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
from pathlib import Path

from pyro_bnn._io import TEMP_SUFFIX

CHECKPOINT = "checkpoint.pt"


class RunFolderBusyError(FileExistsError):
    """Another process holds the run folder's lock."""


def check_writable(out: Path) -> None:
    """Raises ValueError (one line) when ``out`` cannot be a run folder: it is a file, or it or its first existing
    parent cannot be written."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    existing = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"--out {out} cannot be created: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} cannot be written: no write permission on {existing}")


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
