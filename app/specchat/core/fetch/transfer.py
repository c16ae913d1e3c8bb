"""Moving one Hub file's bytes into its ``.part`` file (for
:mod:`specchat.core.fetch.hub_download`): a GET through huggingface_hub's HTTP session, with a
``Range`` header when part of the file is already there.
A dropped connection, a short answer or a server error is retried with exponential back-off;
any progress starts the count of attempts anew. A cancel stops the transfer at the next chunk,
or at once when the connection is stalled, and keeps the ``.part`` file for resuming."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import httpx2
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

from specchat.core.hub.client import HubClient, offline_env
from specchat.core.hub.values import HubError, HubNotFound, HubOffline, RemoteFileMeta
from specchat.core.store.progress import Cancelled, Reporter, TransferError
from specchat.core.units import format_bytes

__all__ = ["RetryPolicy", "fetch_to_part", "kept_detail"]

STREAM_CHUNK = 256 << 10


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # tries per file without progress; any progress starts the count anew
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def delay(self, failures: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * 2 ** (failures - 1))


class _Incomplete(Exception):
    """The server closed a response before all bytes came (retried like a dropped link)."""


def kept_detail(have: int) -> str:
    """What a cancelled download leaves behind, for the :class:`Cancelled` message."""
    return f"{format_bytes(have)} downloaded so far are kept to resume later" if have else ""


def _size_of(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def fetch_to_part(
    hub: HubClient,
    meta: RemoteFileMeta,
    size: int,
    part: Path,
    report: Reporter,
    *,
    before: int,
    number: int,
    retry: RetryPolicy,
) -> None:
    """Bring ``part`` to the file's full ``size`` bytes (not verified here). ``before``: bytes
    of the model's earlier files, for progress; ``number``: this file's part number."""
    name = PurePosixPath(meta.filename).name
    failures = 0
    while True:
        have = _size_of(part)
        try:
            if failures:  # the CDN location may have expired
                meta = hub.file_metadata(meta.repo_id, meta.filename, meta.commit)
            _transfer(hub, meta, size, part, report, before, number)
            return
        except Cancelled:
            raise
        except Exception as e:  # classified below; anything unknown is re-raised
            report.check_cancel(kept_detail(_size_of(part)))
            reason = _retry_reason(e)
            if reason is None:
                fatal = _fatal(hub, e, meta)
                if fatal is e:
                    raise
                raise fatal from e
            now = _size_of(part)
            failures = 1 if now > have else failures + 1
            if failures >= retry.attempts:
                raise TransferError(
                    f"downloading {name} failed after {failures} attempts: {reason}. "
                    f"{format_bytes(now)} of {format_bytes(size)} are kept; download it again "
                    "to resume."
                ) from e
            delay = retry.delay(failures)
            report(
                "retry",
                before + now,
                part=number,
                message=f"{reason}; retrying in {delay:.2g} s "
                f"(attempt {failures + 1} of {retry.attempts})",
                force=True,
            )
            report.wait(delay, kept_detail(now))


def _transfer(
    hub: HubClient,
    meta: RemoteFileMeta,
    size: int,
    part: Path,
    report: Reporter,
    before: int,
    number: int,
) -> None:
    name = PurePosixPath(meta.filename).name
    have = _size_of(part)
    if have == size:
        return
    headers = hub.request_headers(meta.url)
    headers["Accept-Encoding"] = "identity"
    if have:
        headers["Range"] = f"bytes={have}-"
    report("download", before + have, part=number, message=f"downloading {name}", force=True)
    with (
        http_stream_backoff(
            "GET",
            meta.url,
            headers=headers,
            timeout=hub.timeout,
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
                report.check_cancel(kept_detail(have))
                out.write(chunk)
                have += len(chunk)
                if have > size:
                    break
                report("download", before + have, part=number, message=f"downloading {name}")
    if have > size:
        part.unlink()
        raise TransferError(
            f"{name}: the server sent more than the {size:,} bytes the Hub announced; "
            "nothing was installed"
        )
    if have < size:
        raise _Incomplete(f"the server sent {have:,} of {size:,} bytes")
    report("download", before + have, part=number, message=f"downloaded {name}", force=True)


def _retry_reason(e: BaseException) -> str | None:
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


def _fatal(hub: HubClient, e: Exception, meta: RemoteFileMeta) -> Exception:
    """The error to show for a failure that is not retried (``e`` itself if unknown)."""
    name = PurePosixPath(meta.filename).name
    if isinstance(e, (TransferError, HubError)):
        return e
    if isinstance(e, OSError) and not isinstance(e, HfHubHTTPError):
        return TransferError(f"writing {name} failed: {e.strerror or e}")
    described = hub.describe_error(e, f"downloading {name}", meta.repo_id, meta.filename)
    return e if described is None else TransferError(str(described))


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
