"""Model files on disk, for every way a model gets into the store (download, PyPI fetch,
import): checksums, the free-space check, and installing a finished file atomically."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from specchat.core.store.progress import TransferError
from specchat.core.units import format_bytes

__all__ = [
    "CHUNK_SIZE",
    "ChecksumMismatch",
    "Checksum",
    "HashProgress",
    "NotEnoughDiskSpace",
    "StoreError",
    "atomic_install",
    "ensure_free_space",
    "hash_file",
    "remove_files",
    "sha256_file",
]

CHUNK_SIZE = 1024 * 1024  # 1 MiB
DISK_HEADROOM_MIN = 128 << 20  # kept free besides what a job writes…
DISK_HEADROOM_FRACTION = 0.05  # …or this share of it, when more

HashProgress = Callable[[int, int], None]  # (done_bytes, total_bytes)


class StoreError(TransferError):
    """A store operation (import, install) failed; the message is meant for the user."""


class NotEnoughDiskSpace(StoreError):
    """The store's file system has too little free space for a job (see `ensure_free_space`)."""

    def __init__(self, what: str, needed: int, headroom: int, free: int, where: Path) -> None:
        super().__init__(
            f"not enough free disk space for {what}: it needs {format_bytes(needed)} including "
            f"{format_bytes(headroom)} to spare, but only {format_bytes(free)} is free in {where}"
        )
        self.what, self.needed, self.free, self.where = what, needed, free, where


class ChecksumMismatch(TransferError):
    """Bytes arrived, but their checksum is not the expected one; nothing was installed."""


# ---------------------------------------------------------------------------------------------
# Checksums


class Checksum:
    """The SHA-256 of bytes fed in order, and with ``git_blob`` also the git blob id (which
    needs the ``total`` size up front). ``progress(done, total)`` is called after each chunk; an
    exception it raises aborts the hashing (used for cancelling)."""

    def __init__(
        self, total: int, progress: HashProgress | None = None, *, git_blob: bool = False
    ) -> None:
        self.total = total
        self.done = 0
        self._progress = progress
        self._sha256 = hashlib.sha256()
        self._git = (
            hashlib.sha1(f"blob {total}\0".encode(), usedforsecurity=False) if git_blob else None
        )

    def update(self, chunk: bytes) -> None:
        self._sha256.update(chunk)
        if self._git is not None:
            self._git.update(chunk)
        self.done += len(chunk)
        if self._progress is not None:
            self._progress(self.done, self.total)

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()

    @property
    def git_sha1(self) -> str | None:
        return None if self._git is None else self._git.hexdigest()


def hash_file(
    path: Path, progress: HashProgress | None = None, *, git_blob: bool = False
) -> Checksum:
    """Hash a file in 1 MiB chunks (see :class:`Checksum`)."""
    checksum = Checksum(path.stat().st_size, progress, git_blob=git_blob)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            checksum.update(chunk)
    return checksum


def sha256_file(path: Path, progress: HashProgress | None = None) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks; ``progress(done, total)`` after each.

    An exception raised by ``progress`` aborts the hashing (used for cancellation).
    """
    return hash_file(path, progress).sha256


# ---------------------------------------------------------------------------------------------
# Space and installing


def ensure_free_space(where: Path, needed: int, what: str) -> None:
    """Raise :class:`NotEnoughDiskSpace` unless the file system of ``where`` has room for
    ``needed`` more bytes plus head room (5 %, at least 128 MiB). ``what`` names the job in
    the message ("downloading model.gguf")."""
    if needed <= 0:
        return
    headroom = max(DISK_HEADROOM_MIN, int(needed * DISK_HEADROOM_FRACTION))
    free = shutil.disk_usage(where).free
    if free < needed + headroom:
        raise NotEnoughDiskSpace(what, needed + headroom, headroom, free, where)


def _fsync_dir(directory: Path) -> None:
    if os.name != "posix":
        return  # directories cannot be opened for fsync on Windows; NTFS journals the rename
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_install(tmp_path: Path, final_path: Path) -> None:
    """Flush ``tmp_path`` to disk and rename it to ``final_path`` in one step.

    Both must be on the same file system (keep temp files in the store directory). An existing
    ``final_path`` is replaced.
    """
    with open(tmp_path, "r+b") as f:
        os.fsync(f.fileno())
    os.replace(tmp_path, final_path)
    _fsync_dir(final_path.parent)


def remove_files(*paths: Path) -> None:
    """Delete files that may not exist."""
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
