"""Server-sent events as OpenAI-compatible servers stream them: `data: {json}` frames separated
by blank lines, ending with `data: [DONE]` (no Qt, no network: bytes or lines in, JSON objects
out).

Nothing a server sends is held whole before it is judged: a line, or an event, longer than
`MAX_EVENT_BYTES` is refused as soon as it passes the bound, so memory stays near the bound
however long the line is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from specchat.core.remote.errors import RemoteError, RemoteHTTPError, RemoteProtocolError

__all__ = ["DONE", "MAX_EVENT_BYTES", "iter_events", "iter_sse_data", "split_lines"]

DONE = "[DONE]"
MAX_EVENT_BYTES = 2 * 1024 * 1024  # one event: a chunk with logprobs is a few kB

_EOL = re.compile(rb"\r\n|\r|\n")  # the event-stream line ends (not U+2028 and friends)


def _too_long(limit: int) -> RemoteProtocolError:
    return RemoteProtocolError(
        f"the server sent an event line longer than {limit / 2**20:g} MiB: refused"
    )


def split_lines(chunks: Iterable[bytes], limit: int = MAX_EVENT_BYTES) -> Iterator[str]:
    """Lines (UTF-8, without their ends) from a byte stream cut anywhere; a line that passes
    `limit` bytes raises RemoteProtocolError before the rest of it is read."""
    buf = bytearray()
    for chunk in chunks:
        scan = max(0, len(buf) - 1)  # a CR left at the end may start a CRLF
        buf += chunk
        start = 0
        while (m := _EOL.search(buf, scan)) is not None:
            if m.group() == b"\r" and m.end() == len(buf):
                break  # wait for the next chunk: CR or CRLF
            if m.start() - start > limit:
                raise _too_long(limit)
            yield buf[start : m.start()].decode("utf-8", errors="replace")
            start = scan = m.end()
        del buf[:start]
        if len(buf) > limit + 1:
            raise _too_long(limit)
    if buf:  # the last line, without its end
        yield bytes(buf).rstrip(b"\r").decode("utf-8", errors="replace")


def iter_sse_data(lines: Iterable[str], limit: int = MAX_EVENT_BYTES) -> Iterator[str]:
    """The data of each event (its `data:` lines joined by newlines), `[DONE]` included.
    Comments (`: ping`), `event:`/`id:`/`retry:` fields and empty events are skipped; an
    event whose data passes `limit` characters raises RemoteProtocolError."""
    data: list[str] = []
    size = 0
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data, size = [], 0
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            size += len(value) + 1
            if size > limit:
                raise RemoteProtocolError(
                    f"the server sent an event longer than {limit / 2**20:g} MiB: refused"
                )
            data.append(value)
    if data:  # a stream that ends without the blank line
        yield "\n".join(data)


def iter_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Decoded JSON objects until `[DONE]`. An error object inside the stream (llama-server,
    vLLM and SGLang send `{"error": {...}}` when a reply fails after it started) raises
    RemoteHTTPError with the server's message."""
    for data in iter_sse_data(lines):
        if data.strip() == DONE:
            return
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
            raise RemoteProtocolError(
                f"the server streamed something that is not JSON: {data[:120]!r}"
            ) from None
        if not isinstance(obj, dict):
            raise RemoteProtocolError(f"the server streamed a {type(obj).__name__}, not an object")
        if "error" in obj and "choices" not in obj:
            raise stream_error(obj["error"])
        yield obj


def stream_error(err: object) -> RemoteError:
    if isinstance(err, dict):
        message = str(err.get("message") or err)
        code = err.get("code")
        status = code if isinstance(code, int) else 500
    else:
        message, status = str(err), 500
    return RemoteHTTPError(f"the server reported an error mid-reply: {message}", status)
