"""Importing a local GGUF model into the store (`import_model`): validate it,
check the space, copy every part to a ``.part`` file while hashing, install it atomically."""

from __future__ import annotations

import threading
from pathlib import Path

from specchat.core.gguf.header import GGUFError, read_gguf_info
from specchat.core.gguf.split_names import model_part_names
from specchat.core.store.fileops import (
    CHUNK_SIZE,
    Checksum,
    HashProgress,
    StoreError,
    atomic_install,
    ensure_free_space,
    remove_files,
    sha256_file,
)
from specchat.core.store.lock import store_file_locks
from specchat.core.store.progress import Cancelled
from specchat.core.store.store import InstalledModel, ModelStore

__all__ = ["import_model"]


def import_model(
    store: ModelStore,
    src: Path | str,
    progress: HashProgress | None = None,
    cancel: threading.Event | None = None,
) -> InstalledModel:
    """Copy a local GGUF model (all parts of a split one) into the store.

    The file is validated first (a complete, readable GGUF), then copied to ``.part`` files
    while hashing and renamed into place. Raises :class:`StoreError` (invalid file, name
    taken by a different model, :class:`~.fileops.NotEnoughDiskSpace`) or
    :class:`~.progress.Cancelled`.
    """
    src = Path(src).expanduser()
    try:
        read_gguf_info(src)
    except GGUFError as e:
        raise StoreError(f"cannot import {src.name}: {e}") from None
    sources = [src.with_name(n) for n in model_part_names(src.name)]
    for part in sources:
        if not part.is_file():
            raise StoreError(f"cannot import {src.name}: part {part.name} is missing")
        if part != src:
            try:
                read_gguf_info(part)
            except GGUFError as e:
                raise StoreError(f"cannot import {src.name}: {e}") from None
    if all(p.resolve() == (store.root / p.name).resolve() for p in sources):
        model = store.model(sources[0].name)
        if model is not None:
            return model
    todo = [p for p in sources if not _same_file_installed(store, p)]
    total = sum(p.stat().st_size for p in todo)
    ensure_free_space(store.root, total, f"importing {src.name}")
    done = 0
    for part in todo:
        done = _copy_in(store, part, done, total, progress, cancel)
    model = store.model(sources[0].name)
    if model is None:  # pragma: no cover - we just installed it
        raise StoreError(f"{src.name} was copied but cannot be listed")
    return model


def _same_file_installed(store: ModelStore, source: Path) -> bool:
    """True when the store already has this exact file; StoreError when the name is taken by a
    different one."""
    dest = store.path_for(source.name)
    if not dest.is_file():
        return False
    if dest.stat().st_size == source.stat().st_size and store.file_sha256(dest) == sha256_file(
        source
    ):
        return True
    raise StoreError(
        f"a different model named {source.name} is already installed; delete it first "
        "or rename the file you are importing"
    )


def _copy_in(
    store: ModelStore,
    source: Path,
    before: int,
    total: int,
    progress: HashProgress | None,
    cancel: threading.Event | None,
) -> int:
    """Copy one file in; return the bytes copied so far, this file included."""
    final = store.path_for(source.name)
    tmp = store.part_path_for(source.name)
    with store_file_locks(store.root, [source.name]):  # never two writers on one .part file
        return _copy_locked(store, source, final, tmp, before, total, progress, cancel)


def _copy_locked(
    store: ModelStore,
    source: Path,
    final: Path,
    tmp: Path,
    before: int,
    total: int,
    progress: HashProgress | None,
    cancel: threading.Event | None,
) -> int:
    def copied(done: int, _size: int) -> None:
        if progress is not None:
            progress(before + done, total)

    checksum = Checksum(source.stat().st_size, copied)
    try:
        with open(source, "rb") as src, open(tmp, "wb") as out:
            while chunk := src.read(CHUNK_SIZE):
                if cancel is not None and cancel.is_set():
                    raise Cancelled(
                        f"import of {source.name} cancelled; nothing was added to the store"
                    )
                out.write(chunk)
                checksum.update(chunk)
        read_gguf_info(tmp)  # the copy, not only the original, must be whole
        atomic_install(tmp, final)
    except OSError as e:
        raise StoreError(f"importing {source.name} failed: {e.strerror or e}") from None
    except GGUFError as e:
        raise StoreError(f"importing {source.name} failed: the copy is damaged ({e})") from None
    finally:
        remove_files(tmp)
    store.record_verified(final, checksum.sha256)
    return before + checksum.done
