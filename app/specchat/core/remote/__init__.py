"""Remote engines: chat through llama-server, vLLM, SGLang or any OpenAI-compatible server.

Qt-free; imports only `core.types`, `core.reply`, `core.units` and `core.state` from SpecChat.
See docs/remote.md.
"""

from __future__ import annotations

from .config import RemoteConfig, ServerKind, normalize_base_url
from .engine import RemoteEngine, RemoteModelInfo
from .errors import (
    RemoteAuthError,
    RemoteConnectError,
    RemoteDroppedError,
    RemoteError,
    RemoteHTTPError,
    RemoteProtocolError,
    RemoteTimeoutError,
    RemoteTLSError,
)
from .pair import RemotePair
from .probe import ServerInfo

__all__ = [
    "RemoteAuthError",
    "RemoteConfig",
    "RemoteConnectError",
    "RemoteDroppedError",
    "RemoteEngine",
    "RemoteError",
    "RemoteHTTPError",
    "RemoteModelInfo",
    "RemotePair",
    "RemoteProtocolError",
    "RemoteTLSError",
    "RemoteTimeoutError",
    "ServerInfo",
    "ServerKind",
    "normalize_base_url",
]
