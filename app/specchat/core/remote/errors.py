"""What can go wrong talking to a server, each with a message a person can act on."""

from __future__ import annotations

__all__ = [
    "RemoteAuthError",
    "RemoteConnectError",
    "RemoteDroppedError",
    "RemoteError",
    "RemoteHTTPError",
    "RemoteProtocolError",
    "RemoteTLSError",
    "RemoteTimeoutError",
]


class RemoteError(RuntimeError):
    """Any failure of a remote engine. `reason` is a short machine-readable word."""

    reason = "error"


class RemoteConnectError(RemoteError):
    """The server could not be reached (refused, unknown host, network down)."""

    reason = "connect"


class RemoteTLSError(RemoteConnectError):
    """The TLS handshake failed, usually an untrusted (self-signed) certificate."""

    reason = "tls"


class RemoteAuthError(RemoteError):
    """The server refused the request's credentials (HTTP 401 or 403)."""

    reason = "auth"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RemoteTimeoutError(RemoteError):
    """The server took longer than the configured timeout."""

    reason = "timeout"


class RemoteHTTPError(RemoteError):
    """Any other error status; `status` is the HTTP code."""

    reason = "http"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RemoteProtocolError(RemoteError):
    """The server answered something that is not the OpenAI-compatible API."""

    reason = "protocol"


class RemoteDroppedError(RemoteError):
    """The connection ended in the middle of a streamed reply."""

    reason = "dropped"
