"""The local model store: a flat directory of GGUF files with cached checksums.

Layout of the store directory (``$SPECCHAT_MODELS_DIR``, else ``<user data dir>/models``)::

    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf            an installed model
    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.verified   {"size", "mtime_ns", "sha256"} of it
    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.part       a download in progress (never loaded)

A file only gets its final name through :func:`atomic_install`, so a half-written file is never
taken for a model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    from specchat.core.catalog import CatalogModel

ENV_MODELS_DIR = "SPECCHAT_MODELS_DIR"
CHUNK_SIZE = 1024 * 1024  # 1 MiB
PART_SUFFIX = ".part"
VERIFIED_SUFFIX = ".verified"

HashProgress = Callable[[int, int], None]  # (done_bytes, total_bytes)


def default_models_dir() -> Path:
    """``$SPECCHAT_MODELS_DIR`` if set, else ``<platform user data dir>/specchat/models``."""
    env = os.environ.get(ENV_MODELS_DIR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("specchat", appauthor=False)) / "models"


def sha256_file(path: Path, progress: HashProgress | None = None) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks; ``progress(done, total)`` after each.

    An exception raised by ``progress`` aborts the hashing (used for cancellation).
    """
    total = path.stat().st_size
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            h.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return h.hexdigest()


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


class ModelStore:
    """The directory holding the downloaded GGUF files."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_models_dir()
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"ModelStore({str(self.root)!r})"

    # -- paths ---------------------------------------------------------------------------

    def path_for(self, file_name: str) -> Path:
        """Where a model file lives in the store. ``file_name`` must be a plain file name."""
        if (
            not file_name
            or file_name in (".", "..")
            or "/" in file_name
            or "\\" in file_name
            or Path(file_name).name != file_name
        ):
            raise ValueError(f"not a plain file name: {file_name!r}")
        return self.root / file_name

    def part_path_for(self, file_name: str) -> Path:
        """The temporary file a download of ``file_name`` is written to."""
        return self.path_for(file_name + PART_SUFFIX)

    def _sidecar(self, path: Path) -> Path:
        return path.with_name(path.name + VERIFIED_SUFFIX)

    # -- listing -------------------------------------------------------------------------

    def installed(self) -> list[Path]:
        """The ``.gguf`` files in the store, sorted by name (``.part`` files are not listed)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob("*.gguf") if p.is_file())

    def has(self, model: CatalogModel) -> bool:
        """The model's file is present (not checked)."""
        return self.path_for(model.file).is_file()

    # -- verification --------------------------------------------------------------------

    def cached_sha256(self, path: Path) -> str | None:
        """The SHA-256 recorded for ``path``, if its size and mtime still match the record."""
        try:
            st = path.stat()
            record = json.loads(self._sidecar(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if (
            isinstance(record, dict)
            and record.get("size") == st.st_size
            and record.get("mtime_ns") == st.st_mtime_ns
            and isinstance(record.get("sha256"), str)
        ):
            return str(record["sha256"])
        return None

    def record_verified(self, path: Path, sha256: str) -> None:
        """Remember the SHA-256 of ``path`` as it is now (best effort: a read-only store is ok)."""
        try:
            st = path.stat()
            sidecar = self._sidecar(path)
            tmp = sidecar.with_name(sidecar.name + PART_SUFFIX)
            record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
            tmp.write_text(json.dumps(record), encoding="utf-8")
            os.replace(tmp, sidecar)
        except OSError:
            pass

    def file_sha256(self, path: Path, progress: HashProgress | None = None) -> str:
        """SHA-256 of a store file, from the sidecar record when the file is unchanged."""
        cached = self.cached_sha256(path)
        if cached is not None:
            return cached
        before = path.stat()
        digest = sha256_file(path, progress)
        after = path.stat()
        if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns):
            self.record_verified(path, digest)
        return digest

    def has_verified(self, model: CatalogModel, progress: HashProgress | None = None) -> bool:
        """The model's file is present with the catalog's size and SHA-256.

        The checksum is cached next to the file (``<file>.verified``), so only the first check
        after a download or a change of the file hashes it. For a catalog entry without
        ``sha256`` (not yet verified upstream) presence with the right size (if known) is enough.
        """
        path = self.path_for(model.file)
        try:
            st = path.stat()
        except OSError:
            return False
        if not path.is_file():
            return False
        if model.size is not None and st.st_size != model.size:
            return False
        if model.sha256 is None:
            return True
        return self.file_sha256(path, progress) == model.sha256

    # -- removal -------------------------------------------------------------------------

    def delete(self, file_name: str) -> bool:
        """Remove a model file with its checksum record and any leftover ``.part`` file.

        Returns whether the model file itself existed.
        """
        path = self.path_for(file_name)
        existed = path.is_file()
        for p in (path, self._sidecar(path), self.part_path_for(file_name)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        return existed
