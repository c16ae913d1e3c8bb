"""OpenAI-compatible servers (llama-server, vLLM, SGLang): the HTTP client, the event stream,
the speculation figures. The engines built on them are in `core/engines/remote.py`.

Qt-free; imports only `core.types`, `core.reply`, `core.units` and `core.state` from SpecChat.
See docs/remote.md.
"""

from __future__ import annotations

from specchat.core.remote.config import RemoteConfig, ServerKind, normalize_base_url
from specchat.core.remote.errors import (
    RemoteAuthError,
    RemoteConnectError,
    RemoteDroppedError,
    RemoteError,
    RemoteHTTPError,
    RemoteProtocolError,
    RemoteTimeoutError,
    RemoteTLSError,
)
from specchat.core.remote.probe import ServerInfo

__all__ = [
    "RemoteAuthError",
    "RemoteConfig",
    "RemoteConnectError",
    "RemoteDroppedError",
    "RemoteError",
    "RemoteHTTPError",
    "RemoteProtocolError",
    "RemoteTLSError",
    "RemoteTimeoutError",
    "ServerInfo",
    "ServerKind",
    "normalize_base_url",
]
