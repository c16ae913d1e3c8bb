"""One writer per model file: a lock file next to it (``<file>.lock``) while it is downloaded,
fetched or imported, so two windows or processes never write the same ``.part`` file.

The second comer waits, says so once (`waiting`), and can be cancelled while it waits. The lock
is an OS file lock (the ``filelock`` package, installed with huggingface_hub), released when its
holder ends or dies; the lock file is removed on release (an empty one may stay behind after a
crash: it holds nothing and is reused).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["LOCK_SUFFIX", "lock_path", "store_file_locks", "waiting_message"]

LOCK_SUFFIX = ".lock"
POLL_S = 0.25


def lock_path(root: Path, file_name: str) -> Path:
    return root / (file_name + LOCK_SUFFIX)


def waiting_message(file_name: str) -> str:
    return (
        f"waiting: another download of {file_name} into this model store is running (in this "
        "or another window or terminal); this one goes on when it ends"
    )


@contextlib.contextmanager
def store_file_locks(
    root: Path,
    file_names: Sequence[str],
    *,
    waiting: Callable[[str], None] | None = None,
    check_cancel: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Hold the locks of `file_names` (in a fixed order: no deadlock between two jobs that share
    some files). `waiting(name)` is called once when a lock is busy; `check_cancel()` is called
    while waiting and may raise to give up."""
    held: list[FileLock] = []
    try:
        for name in sorted(set(file_names)):
            lock = FileLock(lock_path(root, name), thread_local=False)
            told = False
            while True:
                try:
                    lock.acquire(timeout=POLL_S)
                    break
                except Timeout:
                    if not told and waiting is not None:
                        waiting(name)
                        told = True
                    if check_cancel is not None:
                        check_cancel()
            held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            # Unlinked while still held: a peer waiting on this inode sees it unlinked once it gets
            # the lock and starts over on a new file (filelock checks st_nlink), so no two holders.
            # (Windows cannot unlink an open file; filelock removes it there after the release.)
            with contextlib.suppress(OSError):
                Path(lock.lock_file).unlink()
            lock.release()
