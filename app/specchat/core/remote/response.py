"""What a server's answer is, before any of it is believed (no Qt; bytes in, objects out).

A chat reply should be an event stream (or, for whole replies, one JSON object). A captive
portal, a proxy's login page or a misrouted URL answers 200 with something else: that is named
by its content type and first bytes, cut short, instead of being read as an empty stream.
Bodies are read with a bound (`MAX_BODY_BYTES`, event lines `sse.MAX_EVENT_BYTES`) and refused
once they pass it, without being held whole.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from specchat.core.remote.errors import RemoteHTTPError, RemoteProtocolError
from specchat.core.remote.sse import iter_events, split_lines

__all__ = [
    "MAX_BODY_BYTES",
    "json_object",
    "json_value",
    "media_type",
    "read_limited",
    "reply_body",
    "what_came",
]

MAX_BODY_BYTES = 16 * 1024 * 1024  # a whole reply, /metrics, /props: far below this
HEAD_BYTES = 256  # read to tell what a body is
SHOWN_CHARS = 80  # of it, shown in a message
_SSE_STARTS = (b"data:", b":", b"event:", b"id:", b"retry:")


def media_type(content_type: str | None) -> str:
    """ "text/event-stream; charset=utf-8" -> "text/event-stream"."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _is_json(ctype: str) -> bool:
    return ctype == "application/json" or ctype.endswith("+json")


def what_came(ctype: str, head: bytes) -> str:
    """The content type and the first bytes, cut short: `text/html ('<html><title>Log…')`."""
    text = " ".join(head[: SHOWN_CHARS * 4].decode("utf-8", errors="replace").split())
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 1] + "…"
    kind = ctype or "no content type"
    return f"{kind} ({text!r})" if text else f"{kind} (an empty body)"


def read_limited(chunks: Iterable[bytes], limit: int, what: str) -> bytes:
    """All of `chunks`, refused (RemoteProtocolError) as soon as they pass `limit` bytes."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            raise RemoteProtocolError(f"{what} is longer than {limit / 2**20:g} MiB: refused")
    return bytes(buf)


def json_value(body: bytes, ctype: str, label: str) -> Any:
    """`body` as JSON, or RemoteProtocolError naming what it is instead."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise RemoteProtocolError(
            f"{label} answered with {what_came(ctype, body)}, not JSON"
        ) from None


def json_object(body: bytes, ctype: str, label: str) -> dict[str, Any]:
    """`body` as a JSON object, or RemoteProtocolError naming what it is instead; an
    OpenAI-style error object raises RemoteHTTPError with the server's message."""
    obj = json_value(body, ctype, label)
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"{label} answered with a JSON {type(obj).__name__}")
    err = obj.get("error")
    if err and "choices" not in obj:
        message = err.get("message") if isinstance(err, Mapping) else err
        code = err.get("code") if isinstance(err, Mapping) else None
        status = code if isinstance(code, int) and not isinstance(code, bool) else 500
        raise RemoteHTTPError(f"{label} reported an error: {str(message)[:300]}", status)
    return obj


def _head(chunks: Iterator[bytes]) -> bytes:
    head = bytearray()
    for chunk in chunks:
        head += chunk
        if len(head) >= HEAD_BYTES:
            break
    return bytes(head)


def reply_body(
    content_type: str | None, chunks: Iterable[bytes], label: str, stream: bool
) -> dict[str, Any] | Iterator[dict[str, Any]]:
    """A chat reply's body: the streamed chunks (an iterator) for an event stream, one object
    for JSON (a server that ignored `stream` either way is read as what it sent). Anything
    else raises RemoteProtocolError naming it."""
    ctype = media_type(content_type)
    it = iter(chunks)
    if ctype == "text/event-stream":
        return iter_events(split_lines(it))
    if _is_json(ctype):
        return json_object(read_limited(it, MAX_BODY_BYTES, f"{label}'s reply"), ctype, label)
    head = _head(it)
    rest = itertools.chain([head], it)
    start = head.lstrip()
    if start.startswith(_SSE_STARTS):  # an event stream under another name
        return iter_events(split_lines(rest))
    if start.startswith(b"{"):  # JSON under another name
        return json_object(read_limited(rest, MAX_BODY_BYTES, f"{label}'s reply"), ctype, label)
    expected = "an event stream" if stream else "JSON"
    raise RemoteProtocolError(f"{label} answered with {what_came(ctype, head)}, not {expected}")
