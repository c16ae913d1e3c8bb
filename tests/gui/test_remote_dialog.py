"""The remote servers dialog, offscreen, against local fake servers (tests/fakeserver.py):
add, test, edit, pair, remove; keys never in the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakekeyring import MemoryKeyring
from fakeserver import FakeServer, Route, fixture

from specchat.core.state.servers import SecretStore, ServerStore
from specchat.gui.remote.connection_dialog import ConnectionDialog
from specchat.gui.remote.server_list import OkRole, remote_model_items
from specchat.gui.remote.threads import running_remote_threads

PROBE_MS = 20_000


@pytest.fixture
def ring() -> MemoryKeyring:
    return MemoryKeyring()


@pytest.fixture
def store(data_dir: Path, ring: MemoryKeyring) -> ServerStore:
    return ServerStore(data_dir / "servers.json", SecretStore(backend=ring))


@pytest.fixture
def vllm() -> Any:
    server = FakeServer(
        routes={
            ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
            ("GET", "/metrics"): Route(body=fixture("vllm_metrics_before.txt")),
            ("GET", "/version"): Route(body=fixture("vllm_version.json")),
        }
    ).start()
    yield server
    server.stop()


@pytest.fixture
def dialog(qtbot: Any, store: ServerStore) -> Any:
    d = ConnectionDialog(store)
    qtbot.addWidget(d)
    d.show()
    yield d
    d.wait_for_threads()
    assert not running_remote_threads()


def _add(d: ConnectionDialog, name: str, url: str, key: str = "") -> None:
    d.add_button.click()
    d.name_edit.setText(name)
    d.url_edit.setText(url)
    d.key_edit.setText(key)
    d.save_button.click()


def test_add_save_and_keys_stay_out_of_the_file(dialog, store, ring, data_dir) -> None:
    assert dialog.model.rowCount() == 0 and not dialog.use_button.isEnabled()
    _add(dialog, "gpu box", "gpu.example:8000/v1", key="sk-123")
    assert dialog.model.rowCount() == 1
    entry = store.entries()[0]
    assert entry.base_url == "http://gpu.example:8000" and entry.has_key
    assert "sk-123" not in (data_dir / "servers.json").read_text()
    assert list(ring.items.values()) == ["sk-123"]
    assert "Saved gpu box" in dialog.status_label.text()
    assert dialog.key_edit.text() == "" and dialog.key_edit.placeholderText() == "saved"
    assert "system keyring" in dialog.keyring_label.text()


def test_a_bad_url_is_refused_with_the_reason(dialog, store) -> None:
    _add(dialog, "bad", "ftp://nowhere")
    assert store.entries() == []
    assert "http:// or https://" in dialog.status_label.text()


def test_test_fills_models_and_marks_the_server(qtbot, dialog, store, vllm) -> None:
    _add(dialog, "vllm", vllm.url)
    with qtbot.waitSignal(dialog.testFinished, timeout=PROBE_MS) as sig:
        dialog.test_button.click()
    ok, text = sig.args
    assert ok and "vLLM" in text and "The server decides speculation" in text
    assert dialog.model_combo.findText("Qwen/Qwen2.5-Coder-7B-Instruct") >= 0
    assert dialog.model.data(dialog.model.index(0), OkRole) is True
    assert dialog.model.data(dialog.model.index(0)).startswith("✓")
    items = remote_model_items(store, dialog.model)
    assert [i.label for i in items] == ["Qwen/Qwen2.5-Coder-7B-Instruct @ vllm"]
    assert "speculation: speculative" in items[0].detail


def test_a_refused_key_is_shown(qtbot, dialog) -> None:
    denied = Route(401, json.dumps({"error": {"message": "Invalid API Key", "code": 401}}))
    server = FakeServer(routes={("GET", "/v1/models"): denied}).start()
    try:
        _add(dialog, "locked", server.url, key="wrong")
        with qtbot.waitSignal(dialog.testFinished, timeout=PROBE_MS) as sig:
            dialog.test_button.click()
    finally:
        server.stop()
    ok, text = sig.args
    assert not ok and "refused the API key" in text
    assert "refused the API key" in dialog.status_label.text()
    assert dialog.model.data(dialog.model.index(0)).startswith("✗")


def test_pairing_forgetting_the_key_and_removing(qtbot, dialog, store, ring) -> None:
    _add(dialog, "spec", "http://127.0.0.1:8081", key="k1")
    _add(dialog, "plain", "http://127.0.0.1:8082")
    dialog._select_row(dialog.model.row_of(store.find("spec").id))
    plain_id = store.find("plain").id
    dialog.off_combo.setCurrentIndex(dialog.off_combo.findData(plain_id))
    dialog.forget_key.setChecked(True)
    dialog.save_button.click()
    spec = store.find("spec")
    assert spec.off_server == plain_id and not spec.has_key and ring.items == {}
    assert [i.label for i in remote_model_items(store)] == ["server default @ spec"]
    with qtbot.waitSignal(dialog.connectRequested, timeout=1000) as sig:
        dialog.use_button.click()
    assert sig.args == [spec.id]
    dialog._select_row(dialog.model.row_of(plain_id))
    dialog.remove_button.click()
    assert [e.name for e in store.entries()] == ["spec"]
    assert store.find("spec").off_server == ""


def test_without_a_keyring_the_dialog_says_keys_last_a_session(qtbot, data_dir) -> None:
    secrets = SecretStore(backend=MemoryKeyring())
    secrets._keyring, secrets.why_not = None, "no system keyring is available"
    d = ConnectionDialog(ServerStore(data_dir / "s.json", secrets))
    qtbot.addWidget(d)
    assert "this session only" in d.keyring_label.text()
    _add(d, "box", "http://127.0.0.1:8083", key="k")
    assert d.key_edit.placeholderText() == "saved for this session"
