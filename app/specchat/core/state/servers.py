"""The user's remote servers: a small JSON list in the data directory, API keys elsewhere.

`servers.json` holds names, URLs, models and options, never a key. Keys go to the system
keyring through `keyring` (service "specchat", one entry per server id). Where no keyring
backend works (a headless Linux box without Secret Service, a sandbox), a key is kept in this
process's memory for the session only and `SecretStore.persistent` is False with the reason
in `SecretStore.why_not`, so the window can say so.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from specchat.core.state.paths import data_dir

__all__ = ["SERVERS_FILE", "SecretStore", "ServerEntry", "ServerStore"]

log = logging.getLogger(__name__)

SERVERS_FILE = "servers.json"
KEYRING_SERVICE = "specchat"
KINDS = ("auto", "llama.cpp", "vllm", "sglang", "openai")
_ID = re.compile(r"^[a-z0-9]{6,32}$")


@dataclass(frozen=True)
class ServerEntry:
    id: str
    name: str
    base_url: str
    model: str = ""
    kind: str = "auto"
    stream: bool = True
    use_metrics: bool = True
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 180.0
    ca_file: str = ""
    off_server: str = ""  # id of the same model served without speculation ("" = none)
    has_key: bool = False  # a key was stored for it (the key itself is never in this file)

    def with_(self, **changes: Any) -> ServerEntry:
        return replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerEntry | None:
        """Known keys of the right type; None when id, name or URL is missing."""
        base = {f.name: f.default for f in fields(cls) if f.name not in ("id", "name", "base_url")}
        good: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            default = base.get(f.name, "")
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
                value = float(value) if ok else value
            else:
                ok = isinstance(value, str)
            if ok:
                good[f.name] = value
        if not all(good.get(k) for k in ("id", "name", "base_url")):
            return None
        if not _ID.match(good["id"]) or good.get("kind", "auto") not in KINDS:
            return None
        return cls(**good)


class SecretStore:
    """API keys by server id: the system keyring when one works, else this session's memory."""

    def __init__(self, service: str = KEYRING_SERVICE, backend: Any = None) -> None:
        self.service = service
        self._memory: dict[str, str] = {}
        self._keyring: Any = None
        self.why_not = ""
        if backend is not None:
            self._keyring = backend
            return
        try:
            import keyring
            from keyring.backends import fail

            kr = keyring.get_keyring()
            if isinstance(kr, fail.Keyring) or getattr(kr, "priority", 1) <= 0:
                self.why_not = "no system keyring is available"
            else:
                self._keyring = keyring
        except Exception as exc:  # not installed, or a backend that fails to load
            self.why_not = f"the keyring cannot be used ({type(exc).__name__})"

    @property
    def persistent(self) -> bool:
        return self._keyring is not None

    def describe(self) -> str:
        if self.persistent:
            return "API keys are kept in the system keyring"
        return f"{self.why_not}: API keys are kept in memory for this session only"

    def _user(self, server_id: str) -> str:
        return f"server:{server_id}"

    def set(self, server_id: str, key: str) -> None:
        if self._keyring is not None:
            try:
                self._keyring.set_password(self.service, self._user(server_id), key)
                return
            except Exception as exc:  # locked, refused, broken backend: fall back, say why
                log.warning(
                    "keyring refused the key (%s): keeping it for this session only",
                    type(exc).__name__,
                )
                self.why_not = f"the system keyring refused the key ({type(exc).__name__})"
                self._keyring = None
        self._memory[server_id] = key

    def get(self, server_id: str) -> str | None:
        if server_id in self._memory:
            return self._memory[server_id]
        if self._keyring is not None:
            try:
                value = self._keyring.get_password(self.service, self._user(server_id))
                return value if isinstance(value, str) else None
            except Exception:
                log.info("keyring read failed", exc_info=True)
        return None

    def delete(self, server_id: str) -> None:
        self._memory.pop(server_id, None)
        if self._keyring is not None:
            try:
                self._keyring.delete_password(self.service, self._user(server_id))
            except Exception:  # nothing stored, or the backend refuses: nothing more to do
                log.debug("keyring delete failed", exc_info=True)


class ServerStore:
    """The server list (`servers.json`) plus its keys. Every change is saved at once."""

    def __init__(self, path: Path | None = None, secrets_store: SecretStore | None = None) -> None:
        self.path = path or data_dir() / SERVERS_FILE
        self.secrets = secrets_store or SecretStore()
        self._entries: list[ServerEntry] = self._load()

    def _load(self) -> list[ServerEntry]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        items = data.get("servers") if isinstance(data, dict) else None
        out: list[ServerEntry] = []
        for item in items if isinstance(items, list) else []:
            entry = ServerEntry.from_dict(item) if isinstance(item, dict) else None
            if entry is not None and all(e.id != entry.id for e in out):
                out.append(entry)
        return out

    def save(self) -> None:
        """Write atomically (temporary file, then rename); keys are never part of it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        payload = {"version": 1, "servers": [asdict(e) for e in self._entries]}
        tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)

    # -- queries ----------------------------------------------------------------------------
    def entries(self) -> list[ServerEntry]:
        return list(self._entries)

    def get(self, server_id: str) -> ServerEntry | None:
        return next((e for e in self._entries if e.id == server_id), None)

    def find(self, text: str) -> ServerEntry | None:
        """By id, name or URL (what a command line names)."""
        t = text.strip().rstrip("/")
        for e in self._entries:
            if t in (e.id, e.name, e.base_url.rstrip("/")):
                return e
        return None

    def api_key(self, server_id: str) -> str | None:
        entry = self.get(server_id)
        return self.secrets.get(server_id) if entry is not None and entry.has_key else None

    # -- changes ----------------------------------------------------------------------------
    def add(
        self, name: str, base_url: str, api_key: str | None = None, **options: Any
    ) -> ServerEntry:
        server_id = secrets.token_hex(6)
        entry = ServerEntry(
            id=server_id, name=name.strip() or base_url, base_url=base_url, **options
        )
        self._entries.append(entry)
        self._store_key(entry, api_key)
        return self.get(server_id) or entry

    def update(
        self, entry: ServerEntry, api_key: str | None = None, clear_key: bool = False
    ) -> ServerEntry:
        """Replace the entry with the same id. `api_key` sets a new key; `clear_key` drops it."""
        if self.get(entry.id) is None:
            raise KeyError(entry.id)
        self._entries = [entry if e.id == entry.id else e for e in self._entries]
        if clear_key:
            self.secrets.delete(entry.id)
            self._replace(entry.with_(has_key=False))
        self._store_key(self.get(entry.id) or entry, api_key)
        return self.get(entry.id) or entry

    def remove(self, server_id: str) -> bool:
        before = len(self._entries)
        self._entries = [
            e.with_(off_server="") if e.off_server == server_id else e
            for e in self._entries
            if e.id != server_id
        ]
        self.secrets.delete(server_id)
        self.save()
        return len(self._entries) < before

    def _store_key(self, entry: ServerEntry, api_key: str | None) -> None:
        if api_key:
            self.secrets.set(entry.id, api_key)
            entry = entry.with_(has_key=True)
        self._replace(entry)
        self.save()

    def _replace(self, entry: ServerEntry) -> None:
        self._entries = [entry if e.id == entry.id else e for e in self._entries]
