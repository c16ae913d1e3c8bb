"""Resumable, verified model downloads from the Hugging Face Hub into the model store.

One download goes like this:

1. HEAD each file through huggingface_hub (``get_hf_file_metadata``): size, commit, and the
   LFS SHA-256 (the Hub's linked ETag). A catalog pin for the same repo and file must agree.
2. Check the free disk space for the bytes still to fetch (:func:`ensure_free_space`).
3. GET the bytes into ``<file>.part`` in the store (:mod:`specchat.core.fetch.transfer`),
   resuming what is already there (after a cancel, a dropped connection or a restart of the app:
   ``<file>.part.json`` records where the bytes come from), with retries and back-off.
4. Hash the file (SHA-256, or the git blob id for a file kept in git) and parse its GGUF header.
   Only then is it renamed into place (:func:`atomic_install`). A file that fails is deleted.

Progress (:class:`~specchat.core.store.progress.Progress`: bytes, speed, ETA) goes to a
callback in the downloading thread; setting the ``cancel`` event stops the download at the next
chunk with :class:`~specchat.core.store.progress.Cancelled` and keeps the ``.part`` file. A
failure raises :class:`~specchat.core.store.progress.TransferError` (or a subclass), or
:class:`~specchat.core.hub.values.HubError` from the Hub.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from specchat.core.fetch.transfer import RetryPolicy, fetch_to_part, kept_detail
from specchat.core.gguf.header import GGUFError, read_gguf_info
from specchat.core.gguf.split_names import model_part_names
from specchat.core.hub.client import HubClient
from specchat.core.hub.values import RemoteFileMeta, RemoteModel
from specchat.core.store.catalog import Catalog, load_catalog
from specchat.core.store.fileops import (
    ChecksumMismatch,
    NotEnoughDiskSpace,
    atomic_install,
    ensure_free_space,
    hash_file,
    remove_files,
)
from specchat.core.store.lock import store_file_locks, waiting_message
from specchat.core.store.progress import (
    Cancelled,
    Phase,
    Progress,
    ProgressFn,
    Reporter,
    TransferError,
)
from specchat.core.store.store import ModelStore

__all__ = [
    "ChecksumMismatch",
    "DownloadCancelled",
    "DownloadError",
    "DownloadProgress",
    "Downloader",
    "NotEnoughDiskSpace",
    "ProgressFn",
    "RetryPolicy",
    "Stage",
]

# The former names of the shared vocabulary (see .progress), for callers not yet moved over.
DownloadProgress = Progress
DownloadCancelled = Cancelled
DownloadError = TransferError
Stage = Phase


@dataclass
class _Job:
    """One file of the model being downloaded."""

    path: str  # in the repo
    meta: RemoteFileMeta
    size: int
    sha256: str | None
    git_sha1: str | None
    installed: bool = False

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


class Downloader:
    """Downloads GGUF models from the Hub into a :class:`ModelStore`.

    ``catalog``: pins (size and SHA-256) that downloaded files must match, by repo and file
    name; by default the app's catalog. ``retry``: how often and how patiently a dropped
    connection or a server error is retried.
    """

    def __init__(
        self,
        store: ModelStore,
        hub: HubClient | None = None,
        *,
        catalog: Catalog | None = None,
        retry: RetryPolicy | None = None,
        progress_interval: float = 0.1,
    ) -> None:
        self.store = store
        self.hub = hub or HubClient()
        self.retry = retry or RetryPolicy()
        self.progress_interval = progress_interval
        if catalog is None:
            with contextlib.suppress(OSError, ValueError):
                catalog = load_catalog()
        self._pins: dict[tuple[str, str], tuple[int | None, str | None]] = {}
        for m in catalog.models.values() if catalog else ():
            self._pins[(m.repo.lower(), m.file)] = (m.size, m.sha256)

    # -- public --------------------------------------------------------------------------------
    def download(
        self,
        model: RemoteModel,
        *,
        progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> Path:
        """Download every file of ``model``; return the path to load (its first part)."""
        paths = [f.path for f in model.files]
        listed = {f.path: f.sha256 for f in model.files}
        return self._download(model.repo_id, paths, model.revision, listed, progress, cancel)

    def download_file(
        self,
        repo_id: str,
        filename: str,
        *,
        revision: str | None = None,
        progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> Path:
        """Download ``filename`` from ``repo_id`` (all parts, when it is part of a split model)."""
        folder = str(PurePosixPath(filename).parent)
        names = model_part_names(PurePosixPath(filename).name)
        paths = [n if folder == "." else f"{folder}/{n}" for n in names]
        return self._download(repo_id, paths, revision, {}, progress, cancel)

    # -- steps ---------------------------------------------------------------------------------
    def _download(
        self,
        repo_id: str,
        paths: list[str],
        revision: str | None,
        listed: dict[str, str | None],
        progress: ProgressFn | None,
        cancel: threading.Event | None,
    ) -> Path:
        name = PurePosixPath(paths[0]).name
        report = Reporter(
            name,
            progress,
            cancel,
            action=f"download of {name}",
            interval=self.progress_interval,
            parts=len(paths),
        )
        report.check_cancel()
        report("connect", 0, message=f"looking up {name} in {repo_id}", force=True)
        self.hub.ensure_online()
        names = [PurePosixPath(p).name for p in paths]
        with store_file_locks(
            self.store.root,
            names,
            waiting=lambda n: report("connect", 0, message=waiting_message(n), force=True),
            check_cancel=report.check_cancel,
        ):  # one writer per file: a second download of it waits, then finds it installed
            return self._download_locked(repo_id, paths, revision, listed, report, name)

    def _download_locked(
        self,
        repo_id: str,
        paths: list[str],
        revision: str | None,
        listed: dict[str, str | None],
        report: Reporter,
        name: str,
    ) -> Path:
        jobs = self._plan(repo_id, paths, revision, listed)
        report.total = sum(j.size for j in jobs)
        self._check_disk(jobs, name)
        for job in jobs:
            if not job.installed:
                self._record_source(repo_id, job)
        before = 0
        for number, job in enumerate(jobs, start=1):
            if not job.installed:
                part = self.store.part_path_for(job.name)
                fetch_to_part(
                    self.hub,
                    job.meta,
                    job.size,
                    part,
                    report,
                    before=before,
                    number=number,
                    retry=self.retry,
                )
                self._verify(job, part, before, number, report)
            before += job.size
        for job in reversed(jobs):  # the first part last: it is what makes the model visible
            if not job.installed:
                self._install(job)
        report("done", report.total, part=len(jobs), message=f"{name} installed", force=True)
        return self.store.path_for(name)

    def _plan(
        self, repo_id: str, paths: list[str], revision: str | None, listed: dict[str, str | None]
    ) -> list[_Job]:
        jobs: list[_Job] = []
        for path in paths:
            meta = self.hub.file_metadata(repo_id, path, revision)
            revision = revision or meta.commit  # every part from the same commit
            jobs.append(self._job(repo_id, path, meta, listed.get(path)))
        return jobs

    def _job(self, repo_id: str, path: str, meta: RemoteFileMeta, listed: str | None) -> _Job:
        name = PurePosixPath(path).name
        pin_size, pin_sha = self._pins.get((repo_id.lower(), name), (None, None))
        hub_sha = meta.sha256 or listed
        if pin_sha and hub_sha and pin_sha != hub_sha.lower():
            raise TransferError(
                f"{name}: the Hub's SHA-256 ({hub_sha[:12]}…) differs from the catalog's pin "
                f"({pin_sha[:12]}…); the file changed upstream, so it is not downloaded"
            )
        size = meta.size if meta.size is not None else pin_size
        if size is None:
            raise TransferError(f"{name}: the Hub does not say how large it is; not downloading")
        if pin_size is not None and size != pin_size:
            raise TransferError(
                f"{name}: the Hub says {size:,} bytes, the catalog's pin {pin_size:,}; "
                "not downloading"
            )
        sha = pin_sha or (hub_sha.lower() if hub_sha else None)
        git_sha1 = None if sha else meta.git_sha1
        if sha is None and git_sha1 is None:
            raise TransferError(
                f"cannot verify {name}: the Hub gives no checksum for it, so it is not downloaded"
            )
        job = _Job(path, meta, size, sha, git_sha1)
        job.installed = self._already_installed(job)
        if not job.installed:
            self._drop_stale_part(job)
        return job

    def _already_installed(self, job: _Job) -> bool:
        final = self.store.path_for(job.name)
        if not final.is_file():
            return False
        if final.stat().st_size == job.size:
            if job.sha256 and self.store.file_sha256(final) == job.sha256:
                return True
            if job.git_sha1 and hash_file(final, git_blob=True).git_sha1 == job.git_sha1:
                return True
        raise TransferError(
            f"a different file named {job.name} is already installed; delete it first"
        )

    def _drop_stale_part(self, job: _Job) -> None:
        """Keep a ``.part`` file only if its record says it is a prefix of this very file."""
        part = self.store.part_path_for(job.name)
        if not part.exists():
            return
        old = self.store.read_part_meta(job.name)
        expected = {"size": job.size, "sha256": job.sha256, "git_sha1": job.git_sha1}
        same = bool(old) and all(old.get(k) == v for k, v in expected.items())
        if not same or part.stat().st_size > job.size:
            part.unlink()

    def _record_source(self, repo_id: str, job: _Job) -> None:
        """Write down where the ``.part`` bytes come from, so a later run can resume them."""
        record = {
            "repo_id": repo_id,
            "filename": job.path,
            "revision": job.meta.commit,
            "size": job.size,
            "sha256": job.sha256,
            "git_sha1": job.git_sha1,
        }
        self.store.write_part_meta(job.name, record)

    def _check_disk(self, jobs: list[_Job], name: str) -> None:
        remaining = 0
        for job in jobs:
            if not job.installed:
                part = self.store.part_path_for(job.name)
                remaining += job.size - (part.stat().st_size if part.exists() else 0)
        ensure_free_space(self.store.root, remaining, f"downloading {name}")

    # -- verification --------------------------------------------------------------------------
    def _verify(self, job: _Job, part: Path, before: int, number: int, report: Reporter) -> None:
        message = f"checking {job.name}"

        def hashed(done: int, total: int) -> None:
            report.check_cancel(kept_detail(job.size))
            report("verify", before + done, part=number, message=message)

        report("verify", before, part=number, message=message, force=True)
        checksum = hash_file(part, hashed, git_blob=not job.sha256)
        expected = job.sha256 or job.git_sha1 or ""
        got = checksum.sha256 if job.sha256 else checksum.git_sha1 or ""
        if got != expected:
            remove_files(part, self.store.part_meta_path_for(job.name))
            kind = "SHA-256" if job.sha256 else "git blob id"
            raise ChecksumMismatch(
                f"{job.name} is damaged: its {kind} is {got[:12]}…, expected {expected[:12]}… "
                "The download was deleted and nothing was installed; try again."
            )
        try:
            read_gguf_info(part)
        except GGUFError as e:
            remove_files(part, self.store.part_meta_path_for(job.name))
            raise TransferError(
                f"{job.name} is not a usable GGUF model ({e}); nothing was installed"
            ) from None
        job.sha256 = checksum.sha256

    def _install(self, job: _Job) -> None:
        final = self.store.path_for(job.name)
        atomic_install(self.store.part_path_for(job.name), final)
        if job.sha256:
            self.store.record_verified(final, job.sha256, f"{job.meta.repo_id}/{job.path}")
        remove_files(self.store.part_meta_path_for(job.name))
