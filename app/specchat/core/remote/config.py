"""How to reach one OpenAI-compatible server: its address, model, key and timeouts (no Qt).

The API key travels only in memory and in the Authorization header: `repr()` hides it, and
nothing here writes it anywhere (the server list keeps keys in the system keyring, see
`specchat.core.state.servers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from urllib.parse import urlsplit, urlunsplit

__all__ = ["RemoteConfig", "ServerKind", "normalize_base_url"]


class ServerKind(str, Enum):
    """Which server software answers: it decides where the speculation figures come from."""

    AUTO = "auto"  # find out from the server (/v1/models owned_by, /props, ...)
    LLAMA_CPP = "llama.cpp"  # llama-server
    VLLM = "vllm"
    SGLANG = "sglang"
    OPENAI = "openai"  # any other OpenAI-compatible server: text only, no speculation figures

    @classmethod
    def parse(cls, value: str | ServerKind) -> ServerKind:
        if isinstance(value, ServerKind):
            return value
        text = value.strip().lower().replace("_", "-")
        aliases = {
            "llama-server": cls.LLAMA_CPP,
            "llamacpp": cls.LLAMA_CPP,
            "llama-cpp": cls.LLAMA_CPP,
            "openai-compatible": cls.OPENAI,
            "generic": cls.OPENAI,
        }
        if text in aliases:
            return aliases[text]
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(k.value for k in cls)
            raise ValueError(f"unknown server kind {value!r} (choose one of: {names})") from None

    @property
    def label(self) -> str:
        return {
            ServerKind.AUTO: "detect automatically",
            ServerKind.LLAMA_CPP: "llama.cpp (llama-server)",
            ServerKind.VLLM: "vLLM",
            ServerKind.SGLANG: "SGLang",
            ServerKind.OPENAI: "other OpenAI-compatible server",
        }[self]


def normalize_base_url(url: str) -> str:
    """The server's root URL from what a user typed: `http(s)://host[:port][/prefix]`, without a
    trailing slash or `/v1` (the API paths are added to it). Refuses other schemes and
    credentials in the URL (they would end up in logs: use the API key field)."""
    text = (url or "").strip()
    if not text:
        raise ValueError("the server URL is empty")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"the server URL must start with http:// or https://, not {url!r}")
    if parts.username or parts.password:
        raise ValueError("put the API key in the API key field, not in the URL")
    if not parts.hostname:
        raise ValueError(f"the server URL has no host name: {url!r}")
    try:
        _ = parts.port  # a bad port raises ValueError
    except ValueError:
        raise ValueError(f"the server URL has an invalid port: {url!r}") from None
    if parts.query or parts.fragment:
        raise ValueError("the server URL must not have a query (?…) or fragment (#…)")
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/models"):
        if path.endswith("/v1" + tail):
            path = path[: -len(tail)]
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme.lower(), parts.netloc, path, "", ""))


@dataclass(frozen=True)
class RemoteConfig:
    """One server. `base_url` is normalised by `validate()` (see `normalize_base_url`)."""

    base_url: str
    model: str = ""  # "" = the first model the server lists
    api_key: str | None = field(default=None, repr=False)
    kind: ServerKind = ServerKind.AUTO
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 180.0  # the longest silence allowed between two chunks
    stream: bool = True  # SGLang reports per-reply figures only without streaming
    use_metrics: bool = True  # read /metrics before and after each reply when it is served
    ca_file: str | None = None  # an extra CA bundle (PEM) to trust; TLS is always verified
    name: str = ""  # what the user calls this server

    def validate(self) -> RemoteConfig:
        problems: list[str] = []
        try:
            url = normalize_base_url(self.base_url)
        except ValueError as exc:
            problems.append(str(exc))
            url = self.base_url
        for label, value in (
            ("connect timeout", self.connect_timeout_s),
            ("read timeout", self.read_timeout_s),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 3600):
                problems.append(f"the {label} must be between 0 and 3600 seconds")
        if self.api_key is not None and any(c in self.api_key for c in "\r\n"):
            problems.append("the API key must be one line")
        if problems:
            raise ValueError("invalid server settings: " + "; ".join(problems))
        return replace(self, base_url=url, kind=ServerKind.parse(self.kind))

    @property
    def is_tls(self) -> bool:
        return self.base_url.lower().startswith("https://")

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    @property
    def is_loopback(self) -> bool:
        return self.host in ("localhost", "127.0.0.1", "::1") or self.host.startswith("127.")

    def url(self, path: str) -> str:
        """An absolute URL under the server's root (`path` starts with '/')."""
        return self.base_url.rstrip("/") + path

    @property
    def label(self) -> str:
        """What to show for this server (never the key)."""
        return self.name or self.base_url

    def with_(self, **changes: object) -> RemoteConfig:
        return replace(self, **changes)  # type: ignore[arg-type]
