"""Server-sent events as OpenAI-compatible servers stream them: `data: {json}` frames separated
by blank lines, ending with `data: [DONE]` (no Qt, no network: lines in, JSON objects out)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from specchat.core.remote.errors import RemoteError, RemoteHTTPError, RemoteProtocolError

__all__ = ["DONE", "iter_events", "iter_sse_data"]

DONE = "[DONE]"


def iter_sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each event (its `data:` lines joined by newlines), `[DONE]` included.
    Comments (`: ping`), `event:`/`id:`/`retry:` fields and empty events are skipped."""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
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
        except ValueError:
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
