"""The local model store: a flat directory of GGUF files with cached checksums.

Layout of the store directory (``$SPECCHAT_MODELS_DIR``, else ``<user data dir>/models``)::

    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf            an installed model
    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.verified   {"size", "mtime_ns", "sha256"} of it
    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.part       a download in progress (never loaded)
    qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.part.json  where that download comes from (to resume)

A model split into several files (``name-00001-of-00003.gguf`` …) is one model, named by its
first part. A file only gets its final name through :func:`atomic_install`, so a half-written
file is never taken for a model.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from specchat.core.gguf.header import GGUFError, GGUFInfo, read_gguf_info
from specchat.core.gguf.split_names import model_part_names, split_name, split_part
from specchat.core.store.catalog import CatalogModel
from specchat.core.store.fileops import (
    CHUNK_SIZE,
    HashProgress,
    StoreError,
    atomic_install,
    remove_files,
    sha256_file,
)
from specchat.core.store.progress import Cancelled

__all__ = [
    "CHUNK_SIZE",
    "PART_META_SUFFIX",
    "PART_SUFFIX",
    "VERIFIED_SUFFIX",
    "HashProgress",
    "ImportCancelled",
    "InstalledModel",
    "ModelStore",
    "PartialDownload",
    "StoreError",
    "atomic_install",
    "default_models_dir",
    "model_part_names",
    "sha256_file",
    "split_name",
    "split_part",
]

ENV_MODELS_DIR = "SPECCHAT_MODELS_DIR"
PART_SUFFIX = ".part"
PART_META_SUFFIX = ".part.json"
VERIFIED_SUFFIX = ".verified"

ImportCancelled = Cancelled  # the former name: an import raises the shared Cancelled


@dataclass(frozen=True)
class InstalledModel:
    """A model in the store; ``info`` is None when the file is not valid (see ``error``)."""

    path: Path  # the file to load (the first part of a split model)
    size: int  # bytes, all parts together
    parts: tuple[Path, ...]
    info: GGUFInfo | None = field(repr=False)
    error: str | None = None

    @property
    def file(self) -> str:
        return self.path.name

    @property
    def ok(self) -> bool:
        return self.info is not None and self.error is None

    @property
    def quant(self) -> str | None:
        return self.info.quantization if self.info else None

    @property
    def architecture(self) -> str | None:
        return self.info.architecture if self.info else None

    @property
    def context_length(self) -> int | None:
        return self.info.context_length if self.info else None

    @property
    def vocab_size(self) -> int | None:
        return self.info.vocab_size if self.info else None

    @property
    def n_params(self) -> int | None:
        return self.info.n_params if self.info else None

    @property
    def kv_bytes_per_token(self) -> float | None:
        return self.info.kv_bytes_per_token() if self.info else None


@dataclass(frozen=True)
class PartialDownload:
    """An interrupted download that can be resumed (``<file>.part`` plus its source record)."""

    file: str
    path: Path
    have: int
    total: int | None
    repo_id: str | None
    filename: str | None  # the path in the repo
    revision: str | None
    sha256: str | None

    @property
    def ref(self) -> str | None:
        """``owner/repo/file.gguf``, or None when the source is unknown."""
        if self.repo_id and self.filename:
            return f"{self.repo_id}/{self.filename}"
        return None


def default_models_dir() -> Path:
    """``$SPECCHAT_MODELS_DIR`` if set, else ``<platform user data dir>/specchat/models``."""
    env = os.environ.get(ENV_MODELS_DIR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("specchat", appauthor=False)) / "models"


class ModelStore:
    """The directory holding the downloaded GGUF files."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_models_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        self._info_cache: dict[Path, tuple[tuple[int, int], GGUFInfo | None, str | None]] = {}
        self._cache_lock = threading.Lock()

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

    def part_meta_path_for(self, file_name: str) -> Path:
        """Where a download records its source, so that it can be resumed later."""
        return self.path_for(file_name + PART_META_SUFFIX)

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

    def models(self) -> list[InstalledModel]:
        """Every model in the store with its GGUF header (split parts as one model).

        Headers are cached per file size and modification time, so listing again is cheap.
        A file that is not a valid GGUF is listed with ``error`` set instead of ``info``.
        """
        out: list[InstalledModel] = []
        for path in self.installed():
            parts = split_part(path.name)
            if parts is not None and parts[1] != 1:
                continue  # listed with its first part
            names = model_part_names(path.name)
            paths = tuple(self.root / n for n in names)
            missing = [p.name for p in paths if not p.is_file()]
            size = sum(p.stat().st_size for p in paths if p.is_file())
            info, error = self._cached_info(path)
            if missing and error is None:
                error = f"part(s) missing: {', '.join(missing)}"
            out.append(InstalledModel(path, size, paths, info, error))
        return out

    def model(self, file_name: str) -> InstalledModel | None:
        """The installed model named ``file_name`` (any of its part names), or None."""
        first = model_part_names(file_name)[0]
        return next((m for m in self.models() if m.file == first), None)

    def _cached_info(self, path: Path) -> tuple[GGUFInfo | None, str | None]:
        try:
            st = path.stat()
        except OSError as e:
            return None, f"{path.name} cannot be read: {e.strerror or e}"
        key = (st.st_size, st.st_mtime_ns)
        with self._cache_lock:
            cached = self._info_cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        try:
            info: GGUFInfo | None = read_gguf_info(path)
            error: str | None = None
        except GGUFError as e:
            info, error = None, str(e)
        with self._cache_lock:
            self._info_cache[path] = (key, info, error)
        return info, error

    def partial_downloads(self) -> list[PartialDownload]:
        """Interrupted downloads (``*.gguf.part``) with where they came from, if recorded."""
        out: list[PartialDownload] = []
        for part in sorted(self.root.glob("*.gguf" + PART_SUFFIX)):
            if not part.is_file():
                continue
            file = part.name.removesuffix(PART_SUFFIX)
            record = self.read_part_meta(file)
            total = record.get("size")
            out.append(
                PartialDownload(
                    file=file,
                    path=part,
                    have=part.stat().st_size,
                    total=total if isinstance(total, int) else None,
                    repo_id=_opt_str(record.get("repo_id")),
                    filename=_opt_str(record.get("filename")),
                    revision=_opt_str(record.get("revision")),
                    sha256=_opt_str(record.get("sha256")),
                )
            )
        return out

    def read_part_meta(self, file_name: str) -> dict[str, Any]:
        """The source record of a download in progress ({} when there is none)."""
        try:
            record = json.loads(self.part_meta_path_for(file_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def write_part_meta(self, file_name: str, record: dict[str, Any]) -> None:
        path = self.part_meta_path_for(file_name)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(tmp, path)

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

    def record_verified(self, path: Path, sha256: str, source: str | None = None) -> None:
        """Remember the SHA-256 of ``path`` as it is now (best effort: a read-only store is ok).

        ``source``: where the file came from (``owner/repo/file.gguf``); kept from an earlier
        record when not given.
        """
        try:
            st = path.stat()
            sidecar = self._sidecar(path)
            source = source or self.source_of(path)
            tmp = sidecar.with_name(sidecar.name + PART_SUFFIX)
            record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
            if source:
                record["source"] = source
            tmp.write_text(json.dumps(record), encoding="utf-8")
            os.replace(tmp, sidecar)
        except OSError:
            pass

    def source_of(self, path: Path) -> str | None:
        """The Hub file (``owner/repo/file.gguf``) a model was downloaded from, if recorded."""
        try:
            record = json.loads(self._sidecar(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        source = record.get("source") if isinstance(record, dict) else None
        return source if isinstance(source, str) and source else None

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
        """Remove a model (every part of a split model) with its checksum records and any
        leftover download (``.part`` and its source record).

        Returns whether a model file itself existed.
        """
        existed = False
        for name in model_part_names(file_name):
            path = self.path_for(name)
            existed = path.is_file() or existed
            remove_files(
                path, self._sidecar(path), self.part_path_for(name), self.part_meta_path_for(name)
            )
        with self._cache_lock:
            for name in model_part_names(file_name):
                self._info_cache.pop(self.root / name, None)
        return existed


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
