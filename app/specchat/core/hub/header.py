"""Reading a GGUF header on the Hub without downloading the model: HTTP range requests for the
first few megabytes of the file, growing until
:func:`~specchat.core.gguf.header.parse_gguf_prefix` has the whole header
(`HubClient.read_header` in `client.py` calls it)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import PurePosixPath
from typing import Protocol

from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

from specchat.core.gguf.header import GGUFError, NeedMoreData, parse_gguf_prefix
from specchat.core.hub.values import HubError, RemoteFileMeta, RemoteHeader
from specchat.core.units import format_bytes


class HubAccess(Protocol):
    """What reading a header needs of the Hub client (`core/hub/client.py` has it all)."""

    timeout: float

    def request_headers(self, url: str) -> dict[str, str]: ...

    def translate_errors(
        self, action: str, repo_id: str = "", filename: str = ""
    ) -> AbstractContextManager[None]: ...

    def file_metadata(
        self, repo_id: str, filename: str, revision: str | None = None
    ) -> RemoteFileMeta: ...

    def read_range(self, meta: RemoteFileMeta, start: int, end: int) -> bytes: ...


__all__ = ["read_header", "read_range"]

HEADER_FIRST_READ = 3 << 20  # a 150k-token vocabulary makes a ~6 MB header: two reads
HEADER_GROWTH = 2.0
HEADER_MAX_BYTES = 64 << 20
_STREAM_CHUNK = 256 << 10


def read_range(client: HubAccess, meta: RemoteFileMeta, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file (also correct when a server ignores Range)."""
    headers = client.request_headers(meta.url)
    headers["Range"] = f"bytes={start}-{end - 1}"
    headers["Accept-Encoding"] = "identity"
    out = bytearray()
    with (
        client.translate_errors(f"reading {meta.filename}", meta.repo_id, meta.filename),
        http_stream_backoff(
            "GET",
            meta.url,
            headers=headers,
            timeout=client.timeout,
            max_retries=2,
            base_wait_time=0.5,
            max_wait_time=2,
            retry_on_status_codes=(429, 500, 502, 503, 504),
        ) as response,
    ):
        hf_raise_for_status(response)
        skip = start if response.status_code == 200 else 0  # Range ignored: whole file
        for chunk in response.iter_bytes(_STREAM_CHUNK):
            if skip:
                cut = min(skip, len(chunk))
                chunk, skip = chunk[cut:], skip - cut
            out += chunk
            if len(out) >= end - start:
                break
    return bytes(out[: end - start])


def read_header(
    client: HubAccess,
    repo_id: str,
    filename: str,
    revision: str | None = None,
    *,
    max_bytes: int = HEADER_MAX_BYTES,
) -> RemoteHeader:
    """Parse a remote GGUF file's header from its first bytes (range requests, growing)."""
    meta = client.file_metadata(repo_id, filename, revision)
    size = meta.size
    name = PurePosixPath(filename).name
    data = bytearray()
    want = HEADER_FIRST_READ if size is None else min(HEADER_FIRST_READ, size)
    while True:
        start = len(data)
        chunk = client.read_range(meta, start, want)
        data += chunk
        if size is None and len(data) < want:
            size = len(data)  # the server had no more: that is the whole file
        try:
            info = parse_gguf_prefix(data, name=name, file_size=size)
        except NeedMoreData as e:
            if len(data) >= max_bytes:
                raise HubError(
                    f"{name}: the GGUF header is larger than {format_bytes(max_bytes)}; "
                    "not reading further"
                ) from None
            if not chunk:
                raise HubError(
                    f"{name}: the Hub sent no more data after {len(data):,} bytes"
                ) from None
            want = max(e.needed, int(len(data) * HEADER_GROWTH))
            want = min(want, max_bytes) if size is None else min(want, size, max_bytes)
            continue
        except GGUFError as e:
            raise HubError(f"{repo_id}/{filename} is not a usable GGUF file: {e}") from None
        return RemoteHeader(info, len(data), meta)
