"""Resumable, verified model downloads from the Hugging Face Hub into the model store.

One download goes like this:

1. HEAD each file through huggingface_hub (``get_hf_file_metadata``): size, commit, and the
   LFS SHA-256 (the Hub's linked ETag). A catalog pin for the same repo and file must agree.
2. Check the free disk space: the bytes still to fetch plus a margin.
3. GET the bytes into ``<file>.part`` in the store with huggingface_hub's HTTP session, with a
   ``Range`` header when part of the file is already there (after a cancel, a dropped
   connection or a restart of the app: ``<file>.part.json`` records where the bytes come from).
   A dropped connection or a server error is retried with exponential back-off.
4. Hash the file (SHA-256, or the git blob id for a file kept in git) and parse its GGUF header.
   Only then is it renamed into place (:func:`atomic_install`). A file that fails is deleted.

Progress (bytes, speed, ETA) goes to a callback in the downloading thread; setting the
``cancel`` event stops the download at the next chunk and keeps the ``.part`` file.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

import httpx2
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

from .catalog import Catalog, load_catalog
from .gguf import GGUFError, read_gguf_info
from .hub import (
    HubClient,
    HubError,
    HubNotFound,
    HubOffline,
    RemoteFileMeta,
    RemoteModel,
    offline_env,
)
from .store import CHUNK_SIZE, ModelStore, atomic_install, model_part_names

__all__ = [
    "ChecksumMismatch",
    "DownloadCancelled",
    "DownloadError",
    "DownloadProgress",
    "Downloader",
    "NotEnoughDiskSpace",
    "RetryPolicy",
]

Stage = Literal["connect", "download", "retry", "verify", "done"]

DISK_MARGIN_MIN = 128 << 20  # keep at least this much free besides the download
DISK_MARGIN_FRACTION = 0.05
STREAM_CHUNK = 256 << 10
SPEED_WINDOW_S = 5.0


class DownloadError(RuntimeError):
    """A download failed; the message is meant for the user."""


class NotEnoughDiskSpace(DownloadError):
    pass


class ChecksumMismatch(DownloadError):
    pass


class DownloadCancelled(Exception):
    """The download was cancelled; its ``.part`` file is kept for resuming."""


class _Incomplete(Exception):
    """The server closed a response before all bytes came (retried like a dropped link)."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # tries per file without progress; any progress starts the count anew
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def delay(self, failures: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * 2 ** (failures - 1))


@dataclass(frozen=True)
class DownloadProgress:
    name: str  # the model's file name in the store (its first part when split)
    stage: Stage
    done_bytes: int
    total_bytes: int  # 0 while unknown
    speed_bps: float | None = None
    eta_s: float | None = None
    part: int = 1
    parts: int = 1
    message: str = ""

    @property
    def fraction(self) -> float | None:
        if self.total_bytes <= 0:
            return None
        return min(1.0, self.done_bytes / self.total_bytes)


ProgressFn = Callable[[DownloadProgress], None]


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


@dataclass
class _Reporter:
    """Rate-limited progress with speed and ETA over a sliding window; checks cancel."""

    name: str
    callback: ProgressFn | None
    cancel: threading.Event | None
    interval: float
    total: int = 0
    parts: int = 1
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    _last: float = 0.0

    def check_cancel(self, have: int = 0) -> None:
        if self.cancel is not None and self.cancel.is_set():
            kept = f"; {_mb(have)} downloaded so far are kept to resume later" if have else ""
            raise DownloadCancelled(f"download of {self.name} cancelled{kept}")

    def __call__(
        self, stage: Stage, done: int, part: int = 1, message: str = "", force: bool = False
    ) -> None:
        now = time.monotonic()
        if stage == "download":
            self._samples.append((now, done))
            while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
                self._samples.popleft()
        else:
            self._samples.clear()
        if self.callback is None or (not force and now - self._last < self.interval):
            return
        self._last = now
        speed = eta = None
        if len(self._samples) >= 2:
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
            if t1 > t0 and b1 >= b0:
                speed = (b1 - b0) / (t1 - t0)
                if speed > 0 and self.total:
                    eta = max(0.0, (self.total - done) / speed)
        self.callback(
            DownloadProgress(
                self.name, stage, done, self.total, speed, eta, part, self.parts, message
            )
        )


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


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
        report = _Reporter(name, progress, cancel, self.progress_interval, parts=len(paths))
        report.check_cancel()
        report("connect", 0, message=f"looking up {name} in {repo_id}", force=True)
        self.hub.ensure_online()
        jobs = self._plan(repo_id, paths, revision, listed)
        report.total = sum(j.size for j in jobs)
        self._check_disk(jobs, name)
        for job in jobs:
            if not job.installed:
                self._record_source(repo_id, job)
        for number, job in enumerate(jobs, start=1):
            if not job.installed:
                self._fetch(job, number, jobs, report)
        for job in reversed(jobs):  # the first part last: it is what makes the model visible
            if not job.installed:
                self._install(job)
        report("done", report.total, len(jobs), f"{name} installed", force=True)
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
            raise DownloadError(
                f"{name}: the Hub's SHA-256 ({hub_sha[:12]}…) differs from the catalog's pin "
                f"({pin_sha[:12]}…); the file changed upstream, so it is not downloaded"
            )
        size = meta.size if meta.size is not None else pin_size
        if size is None:
            raise DownloadError(f"{name}: the Hub does not say how large it is; not downloading")
        if pin_size is not None and size != pin_size:
            raise DownloadError(
                f"{name}: the Hub says {size:,} bytes, the catalog's pin {pin_size:,}; "
                "not downloading"
            )
        sha = pin_sha or (hub_sha.lower() if hub_sha else None)
        git_sha1 = None if sha else meta.git_sha1
        if sha is None and git_sha1 is None:
            raise DownloadError(
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
            if job.git_sha1 and _hash_file(final, None)[1] == job.git_sha1:
                return True
        raise DownloadError(
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
        if not remaining:
            return
        total = sum(j.size for j in jobs)
        margin = max(DISK_MARGIN_MIN, int(total * DISK_MARGIN_FRACTION))
        free = shutil.disk_usage(self.store.root).free
        if free < remaining + margin:
            raise NotEnoughDiskSpace(
                f"not enough free disk space for {name}: it needs {_mb(remaining)} more plus "
                f"{_mb(margin)} to spare, but only {_mb(free)} is free in {self.store.root}"
            )

    # -- transfer ------------------------------------------------------------------------------
    def _fetch(self, job: _Job, number: int, jobs: list[_Job], report: _Reporter) -> None:
        """Transfer one file with retries, then verify it (a bad file is deleted)."""
        part = self.store.part_path_for(job.name)
        before = sum(j.size for j in jobs[: number - 1])
        failures = 0
        while True:
            have = part.stat().st_size if part.exists() else 0
            try:
                if failures:
                    job.meta = self.hub.file_metadata(job.meta.repo_id, job.path, job.meta.commit)
                self._transfer(job, part, before, number, report)
                break
            except DownloadCancelled:
                raise
            except Exception as e:  # classified below; anything unknown is re-raised
                report.check_cancel(part.stat().st_size if part.exists() else 0)
                reason = self._retry_reason(e)
                if reason is None:
                    fatal = self._fatal(e, job)
                    if fatal is e:
                        raise
                    raise fatal from e
                now = part.stat().st_size if part.exists() else 0
                failures = 1 if now > have else failures + 1
                if failures >= self.retry.attempts:
                    raise DownloadError(
                        f"downloading {job.name} failed after {failures} attempts: {reason}. "
                        f"{_mb(now)} of {_mb(job.size)} are kept; download it again to resume."
                    ) from e
                delay = self.retry.delay(failures)
                report(
                    "retry",
                    before + now,
                    number,
                    f"{reason}; retrying in {delay:.2g} s "
                    f"(attempt {failures + 1} of {self.retry.attempts})",
                    force=True,
                )
                if report.cancel is not None and report.cancel.wait(delay):
                    report.check_cancel(now)
                elif report.cancel is None:
                    time.sleep(delay)
        self._verify(job, part, before, number, report)

    def _transfer(self, job: _Job, part: Path, before: int, number: int, report: _Reporter) -> None:
        have = part.stat().st_size if part.exists() else 0
        if have == job.size:
            return
        headers = self.hub.request_headers(job.meta.url)
        headers["Accept-Encoding"] = "identity"
        if have:
            headers["Range"] = f"bytes={have}-"
        report("download", before + have, number, f"downloading {job.name}", force=True)
        with (
            http_stream_backoff(
                "GET",
                job.meta.url,
                headers=headers,
                timeout=self.hub.timeout,
                retry_on_exceptions=(),
                retry_on_status_codes=(),
            ) as response,
            _abort_when_cancelled(response, report.cancel),
        ):
            if response.status_code == 416 and have:  # our part is not a prefix of the file
                part.unlink()
                raise _Incomplete("the server refused to resume; starting over")
            hf_raise_for_status(response)
            if not _range_starts_at(response, have):
                part.unlink()
                raise _Incomplete("the server resumed at the wrong offset; starting over")
            if response.status_code != 206:
                have = 0  # the server ignored the Range header and sends the whole file
            with open(part, "r+b" if part.exists() else "wb") as out:
                out.seek(have)
                out.truncate()
                for chunk in response.iter_bytes(STREAM_CHUNK):
                    report.check_cancel(have)
                    out.write(chunk)
                    have += len(chunk)
                    if have > job.size:
                        break
                    report("download", before + have, number, f"downloading {job.name}")
        if have > job.size:
            part.unlink()
            raise DownloadError(
                f"{job.name}: the server sent more than the {job.size:,} bytes the Hub announced; "
                "nothing was installed"
            )
        if have < job.size:
            raise _Incomplete(f"the server sent {have:,} of {job.size:,} bytes")
        report("download", before + have, number, f"downloaded {job.name}", force=True)

    def _retry_reason(self, e: BaseException) -> str | None:
        """Why a failed attempt is worth retrying, or None when it is not."""
        if isinstance(e, _Incomplete):
            return f"the download stopped early ({e})"
        if isinstance(e, httpx2.TransportError):
            kind = "timed out" if isinstance(e, httpx2.TimeoutException) else "was lost"
            return f"the connection {kind}"
        if isinstance(e, HfHubHTTPError) and e.response is not None:
            status = e.response.status_code
            if status >= 500 or status in (408, 429):
                return f"the Hub answered HTTP {status} {e.response.reason_phrase}".rstrip()
            return None
        if isinstance(e, HubOffline):
            return None if offline_env() else str(e).split(" (")[0].rstrip(".")
        if isinstance(e, HubNotFound):
            return None
        if isinstance(e, HubError):
            return str(e)
        return None

    def _fatal(self, e: Exception, job: _Job) -> Exception:
        """The error to show for a failure that is not retried (``e`` itself if unknown)."""
        if isinstance(e, (DownloadError, HubError)):
            return e
        if isinstance(e, OSError) and not isinstance(e, HfHubHTTPError):
            return DownloadError(f"writing {job.name} failed: {e.strerror or e}")
        action = f"downloading {job.name}"
        described = self.hub.describe_error(e, action, job.meta.repo_id, job.path)
        return e if described is None else DownloadError(str(described))

    # -- verification --------------------------------------------------------------------------
    def _verify(self, job: _Job, part: Path, before: int, number: int, report: _Reporter) -> None:
        def hashed(done: int, total: int) -> None:
            report.check_cancel(job.size)
            report("verify", before + done, number, f"checking {job.name}")

        report("verify", before, number, f"checking {job.name}", force=True)
        sha256, git_sha1 = _hash_file(part, hashed)
        expected = job.sha256 or job.git_sha1 or ""
        got = sha256 if job.sha256 else git_sha1
        if got != expected:
            _remove(part, self.store.part_meta_path_for(job.name))
            kind = "SHA-256" if job.sha256 else "git blob id"
            raise ChecksumMismatch(
                f"{job.name} is damaged: its {kind} is {got[:12]}…, expected {expected[:12]}… "
                "The download was deleted and nothing was installed; try again."
            )
        try:
            read_gguf_info(part)
        except GGUFError as e:
            _remove(part, self.store.part_meta_path_for(job.name))
            raise DownloadError(
                f"{job.name} is not a usable GGUF model ({e}); nothing was installed"
            ) from None
        job.sha256 = sha256

    def _install(self, job: _Job) -> None:
        final = self.store.path_for(job.name)
        atomic_install(self.store.part_path_for(job.name), final)
        if job.sha256:
            self.store.record_verified(final, job.sha256, f"{job.meta.repo_id}/{job.path}")
        _remove(self.store.part_meta_path_for(job.name))


@contextlib.contextmanager
def _abort_when_cancelled(
    response: httpx2.Response, cancel: threading.Event | None
) -> Iterator[None]:
    """While the body streams, a cancel shuts the socket down, so that a read blocked on a
    stalled connection returns at once instead of after the read timeout."""
    if cancel is None:
        yield
        return
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if cancel.wait(0.1):
                stream = response.extensions.get("network_stream")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if isinstance(sock, socket.socket):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return

    watcher = threading.Thread(target=watch, name="download-cancel-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()


def _range_starts_at(response: httpx2.Response, have: int) -> bool:
    """A 206 answer must continue exactly where our file ends."""
    if response.status_code != 206:
        return True
    content_range = response.headers.get("Content-Range", "")
    try:
        start = int(content_range.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return False
    return start == have


def _hash_file(path: Path, progress: Callable[[int, int], None] | None) -> tuple[str, str]:
    """SHA-256 and git blob id of a file in one pass."""
    total = path.stat().st_size
    sha256 = hashlib.sha256()
    git = hashlib.sha1(f"blob {total}\0".encode(), usedforsecurity=False)
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            sha256.update(chunk)
            git.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return sha256.hexdigest(), git.hexdigest()


def _remove(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
