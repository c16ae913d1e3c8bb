"""The saved server list: JSON without keys, keys in the keyring or (without one) in memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakekeyring import MemoryKeyring
from keyring.errors import PasswordDeleteError

from specchat.core.engines.remote_connect import config_from_entry
from specchat.core.engines.remote_pair import RemotePair
from specchat.core.state.servers import SecretStore, ServerEntry, ServerStore


class BrokenKeyring(MemoryKeyring):
    def set_password(self, service: str, user: str, password: str) -> None:
        raise RuntimeError("locked")


def test_keys_live_in_the_keyring_never_in_the_file(tmp_path: Path) -> None:
    ring = MemoryKeyring()
    store = ServerStore(tmp_path / "servers.json", SecretStore(backend=ring))
    assert store.secrets.persistent
    a = store.add("gpu box", "https://gpu.example:8000", api_key="sk-secret-1", kind="vllm")
    b = store.add("no spec", "http://gpu.example:8001")
    text = (tmp_path / "servers.json").read_text()
    assert "sk-secret-1" not in text
    assert json.loads(text)["servers"][0]["has_key"] is True
    assert ring.items == {("specchat", f"server:{a.id}"): "sk-secret-1"}
    store.update(a.with_(off_server=b.id))
    again = ServerStore(tmp_path / "servers.json", SecretStore(backend=ring))
    assert [e.name for e in again.entries()] == ["gpu box", "no spec"]
    assert again.api_key(a.id) == "sk-secret-1" and again.api_key(b.id) is None
    assert again.find("gpu box") == again.get(a.id)
    cfg = config_from_entry(again.get(a.id), again.api_key(a.id))
    assert cfg.api_key == "sk-secret-1" and cfg.kind.value == "vllm"
    again.update(again.get(a.id), clear_key=True)
    assert again.api_key(a.id) is None and ring.items == {}
    again.remove(b.id)
    assert again.get(a.id).off_server == ""  # the pairing went with the removed server


def test_forgetting_a_key_that_was_never_stored(tmp_path: Path) -> None:
    ring = MemoryKeyring()
    store = ServerStore(tmp_path / "s.json", SecretStore(backend=ring))
    e = store.add("no key", "http://127.0.0.1:8080")
    with pytest.raises(PasswordDeleteError):  # what the keyring itself does
        ring.delete_password("specchat", f"server:{e.id}")
    store.update(e, clear_key=True)  # the keyring raises; nothing to forget is no failure
    assert store.remove(e.id) and store.entries() == [] and ring.items == {}
    assert store.secrets.persistent  # and the keyring is still used


def test_without_a_keyring_keys_stay_in_memory_and_it_says_so(tmp_path: Path) -> None:
    secrets = SecretStore()
    secrets._keyring, secrets.why_not = None, "no system keyring is available"
    store = ServerStore(tmp_path / "s.json", secrets)
    e = store.add("box", "http://127.0.0.1:8080", api_key="k")
    assert store.api_key(e.id) == "k" and not store.secrets.persistent
    assert "this session only" in store.secrets.describe()
    assert '"k"' not in (tmp_path / "s.json").read_text()
    assert (
        ServerStore(tmp_path / "s.json", SecretStore(backend=MemoryKeyring())).api_key(e.id) is None
    )


def test_a_keyring_that_refuses_falls_back_to_memory(tmp_path: Path) -> None:
    store = ServerStore(tmp_path / "s.json", SecretStore(backend=BrokenKeyring()))
    e = store.add("box", "http://127.0.0.1:8080", api_key="k")
    assert store.api_key(e.id) == "k" and not store.secrets.persistent
    assert "refused" in store.secrets.why_not


def test_bad_entries_in_the_file_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    good = {"id": "abc123", "name": "ok", "base_url": "http://h:1", "stream": False}
    path.write_text(
        json.dumps(
            {"servers": [good, {"id": "x"}, {"id": "abc124", "name": "k", "base_url": "u",
                                "kind": "nonsense"}, "junk", good]}
        )
    )  # fmt: skip
    entries = ServerStore(path, SecretStore(backend=MemoryKeyring())).entries()
    assert entries == [ServerEntry(id="abc123", name="ok", base_url="http://h:1", stream=False)]


def test_a_pair_refuses_an_off_endpoint_that_speculates() -> None:
    from specchat.core.engines.remote import RemoteEngine
    from specchat.core.remote import RemoteConfig, ServerInfo, ServerKind

    info = ServerInfo(kind=ServerKind.LLAMA_CPP, model="m", speculation="draft-simple")
    on = RemoteEngine(RemoteConfig("http://127.0.0.1:9"), info=info)
    off = RemoteEngine(RemoteConfig("http://127.0.0.1:9"), info=info)
    with pytest.raises(ValueError, match="without speculation"):
        RemotePair(on, off)
