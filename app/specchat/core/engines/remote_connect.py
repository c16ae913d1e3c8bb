"""From the saved server list to a connected engine (no Qt)."""

from __future__ import annotations

from specchat.core.engines.remote import RemoteEngine
from specchat.core.engines.remote_pair import RemotePair
from specchat.core.remote.client import RemoteClient
from specchat.core.remote.config import RemoteConfig, ServerKind
from specchat.core.remote.probe import ServerInfo, probe_server
from specchat.core.state.servers import ServerEntry, ServerStore

__all__ = ["config_from_entry", "connect", "connect_entry", "check_connection"]


def config_from_entry(entry: ServerEntry, api_key: str | None = None) -> RemoteConfig:
    return RemoteConfig(
        base_url=entry.base_url,
        model=entry.model,
        api_key=api_key or None,
        kind=ServerKind.parse(entry.kind),
        connect_timeout_s=entry.connect_timeout_s,
        read_timeout_s=entry.read_timeout_s,
        stream=entry.stream,
        use_metrics=entry.use_metrics,
        ca_file=entry.ca_file or None,
        name=entry.name,
    ).validate()


def check_connection(config: RemoteConfig) -> ServerInfo:
    """Probe the server (models, kind, speculation) and hang up. Raises RemoteError/ValueError."""

    client = RemoteClient(config)
    try:
        return probe_server(client)
    finally:
        client.close()


def connect(config: RemoteConfig, off: RemoteConfig | None = None) -> RemoteEngine | RemotePair:
    """An engine for `config`; with `off` (the same model without speculation), a pair."""
    engine = RemoteEngine(config)
    if off is None:
        return engine
    try:
        return RemotePair(engine, RemoteEngine(off))
    except BaseException:
        engine.close()
        raise


def connect_entry(store: ServerStore, server_id: str) -> RemoteEngine | RemotePair:
    """The engine for a saved server (paired with its `off_server` when it has one)."""
    entry = store.get(server_id)
    if entry is None:
        raise KeyError(f"no saved server with id {server_id!r}")
    config = config_from_entry(entry, store.api_key(entry.id))
    off_entry = store.get(entry.off_server) if entry.off_server else None
    off = config_from_entry(off_entry, store.api_key(off_entry.id)) if off_entry else None
    return connect(config, off)
