"""HTTP for the remote engine: one `httpx2.Client` per server, TLS always verified, every
failure turned into a `RemoteError` whose message says what happened in words (no Qt).

The API key is sent as `Authorization: Bearer …` and never appears in a message or a log line.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

from specchat.core.remote.config import RemoteConfig
from specchat.core.remote.errors import (
    RemoteAuthError,
    RemoteConnectError,
    RemoteDroppedError,
    RemoteError,
    RemoteHTTPError,
    RemoteTimeoutError,
    RemoteTLSError,
)
from specchat.core.remote.response import MAX_BODY_BYTES, json_value, media_type, read_limited

__all__ = ["RemoteClient", "StreamHandle", "translate_error"]

log = logging.getLogger(__name__)

MAX_ERROR_BODY = 4096  # characters of an error response kept for the message


def _ssl_context(config: RemoteConfig) -> ssl.SSLContext:
    """The system's trust store (plus `ca_file` when given); never an unverified context."""
    ctx = httpx2.create_ssl_context(True)
    if config.ca_file:
        ctx.load_verify_locations(cafile=config.ca_file)
    return ctx


def _user_agent() -> str:
    try:
        from importlib.metadata import version

        return f"specchat/{version('specchat')}"
    except Exception:
        return "specchat"


def _is_tls_failure(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError):
            return True
        text = str(cur)
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text and "certificate" in text:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def translate_error(exc: Exception, config: RemoteConfig, during: str = "") -> RemoteError:
    """A RemoteError that says, for people, what `exc` means for `config`'s server."""
    if isinstance(exc, RemoteError):
        return exc
    where = config.label
    doing = f" while {during}" if during else ""
    if isinstance(exc, httpx2.ConnectTimeout):
        return RemoteTimeoutError(
            f"{where} did not accept a connection within {config.connect_timeout_s:g} s"
        )
    if isinstance(exc, httpx2.ReadTimeout):
        return RemoteTimeoutError(
            f"{where} sent nothing for {config.read_timeout_s:g} s{doing} "
            "(raise the read timeout for slow servers)"
        )
    if isinstance(exc, httpx2.TimeoutException):
        return RemoteTimeoutError(f"{where} timed out{doing}")
    if isinstance(exc, (httpx2.ConnectError, httpx2.ProxyError)):
        if _is_tls_failure(exc):
            return RemoteTLSError(
                f"{where}: the TLS certificate is not trusted ({_short(exc)}). SpecChat always "
                "verifies certificates: install the server's CA in the system trust store, or "
                "give its CA file in the server's settings"
            )
        return RemoteConnectError(f"cannot reach {where}: {_short(exc)}")
    if isinstance(exc, httpx2.UnsupportedProtocol):
        return RemoteConnectError(f"{where}: unsupported URL ({_short(exc)})")
    if isinstance(exc, (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.CloseError)):
        return RemoteDroppedError(f"{where} closed the connection{doing} ({_short(exc)})")
    if isinstance(exc, httpx2.HTTPError):
        return RemoteConnectError(f"{where}: {_short(exc)}")
    if isinstance(exc, ssl.SSLError):
        return RemoteTLSError(f"{where}: TLS failed ({_short(exc)})")
    if isinstance(exc, OSError):
        return RemoteConnectError(f"cannot reach {where}: {_short(exc)}")
    return RemoteError(f"{where}: {type(exc).__name__}: {_short(exc)}")


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "…"


def _error_message(body: str) -> str:
    """The readable part of an error body: OpenAI `{"error": {"message"}}`, FastAPI
    `{"detail"}`, vLLM `{"message"}` or plain text."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if data.get(key):
                return str(data[key])
    return body.strip()[:300]


class StreamHandle:
    """An open streaming response. `close()` may be called from another thread (a stop
    request): the reading thread then gets an error, which the engine reads as the stop."""

    def __init__(self, response: httpx2.Response, config: RemoteConfig) -> None:
        self._response = response
        self._config = config
        self._lock = threading.Lock()
        self.closed = False

    @property
    def headers(self) -> httpx2.Headers:
        return self._response.headers

    @property
    def content_type(self) -> str | None:
        return self._response.headers.get("content-type")

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (decoded from gzip and the like, never held whole)."""
        try:
            yield from self._response.iter_bytes()
        except Exception as exc:
            if self.closed:
                return  # closed on purpose (a stop): end quietly
            raise translate_error(exc, self._config, "streaming the reply") from exc

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        # A thread blocked reading the socket wakes only when the socket itself is shut down
        # (closing the response from here would wait for the server's next chunk).
        try:
            stream = self._response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            log.debug("shutting the socket down failed", exc_info=True)
        try:
            self._response.close()
        except Exception:  # closing a broken stream may fail: it is closed either way
            log.debug("closing the stream failed", exc_info=True)


class RemoteClient:
    """Requests to one server. Thread-safe for separate requests (httpx2 pools connections)."""

    def __init__(
        self, config: RemoteConfig, *, transport: httpx2.BaseTransport | None = None
    ) -> None:
        self.config = config.validate()
        headers = {"User-Agent": _user_agent()}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        timeout = httpx2.Timeout(
            connect=self.config.connect_timeout_s,
            read=self.config.read_timeout_s,
            write=self.config.connect_timeout_s,
            pool=self.config.connect_timeout_s,
        )
        self._http = httpx2.Client(
            headers=headers,
            timeout=timeout,
            verify=_ssl_context(self.config) if self.config.is_tls else True,
            follow_redirects=False,
            # A proxy from the environment must not capture a server on this machine.
            trust_env=not self.config.is_loopback,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    # -- plain requests ---------------------------------------------------------------------
    def _send(
        self, method: str, path: str, timeout: float | None = None
    ) -> tuple[httpx2.Response, bytes]:
        """The response and its body, read up to MAX_BODY_BYTES (refused beyond)."""
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = timeout
        request = self._http.build_request(method, self.config.url(path), **kwargs)
        try:
            response = self._http.send(request, stream=True)
        except Exception as exc:
            raise translate_error(exc, self.config, f"requesting {path}") from exc
        try:
            self._check(response, path)
            what = f"{self.config.label}{path}'s answer"
            return response, read_limited(response.iter_bytes(), MAX_BODY_BYTES, what)
        except RemoteError:
            raise
        except Exception as exc:
            raise translate_error(exc, self.config, f"reading {path}") from exc
        finally:
            response.close()

    def _check(self, response: httpx2.Response, path: str) -> None:
        status = response.status_code
        if status < 400:
            if 300 <= status < 400:
                where = response.headers.get("location", "?")
                raise RemoteHTTPError(
                    f"{self.config.label}{path} redirects to {where}: use that URL instead", status
                )
            return
        try:  # only the start: an error page may be any size
            head = bytearray()
            for chunk in response.iter_bytes():
                head += chunk
                if len(head) >= MAX_ERROR_BODY:
                    break
            body = head[:MAX_ERROR_BODY].decode("utf-8", errors="replace")
        except Exception:
            body = ""
        detail = _error_message(body) if body else response.reason_phrase
        where = self.config.label
        if status in (401, 403):
            if self.config.api_key:
                text = f"{where} refused the API key (HTTP {status}: {detail})"
            else:
                text = f"{where} needs an API key (HTTP {status}: {detail})"
            raise RemoteAuthError(text, status)
        if status == 404:
            raise RemoteHTTPError(
                f"{where}{path} was not found (HTTP 404): is this an OpenAI-compatible server, "
                "and is the URL its root?",
                status,
            )
        raise RemoteHTTPError(f"{where}{path} failed (HTTP {status}: {detail})", status)

    def get_json(self, path: str, timeout: float | None = None) -> Any:
        """The answer as JSON; RemoteProtocolError naming what came instead."""
        response, body = self._send("GET", path, timeout=timeout)
        ctype = media_type(response.headers.get("content-type"))
        return json_value(body, ctype, f"{self.config.label}{path}")

    def get_text(self, path: str, timeout: float | None = None) -> str:
        response, body = self._send("GET", path, timeout=timeout)
        return body.decode(response.charset_encoding or "utf-8", errors="replace")

    # -- streaming --------------------------------------------------------------------------
    @contextmanager
    def stream_post(self, path: str, body: Any) -> Iterator[StreamHandle]:
        """POST and hold the response open; yields a StreamHandle (closed on exit)."""
        # identity: a compressed stream could unpack into far more than was read
        headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
        request = self._http.build_request(
            "POST", self.config.url(path), json=body, headers=headers
        )
        try:
            response = self._http.send(request, stream=True)
        except Exception as exc:
            raise translate_error(exc, self.config, f"sending the request to {path}") from exc
        handle = StreamHandle(response, self.config)
        try:
            self._check(response, path)
            yield handle
        finally:
            handle.close()
