"""Bad input and faults in the window (#14): an impossible model file (case 1), a damaged
history database (2), a conversation that outgrows the context (4), two windows on one
database (5), settings the engine changed and a draft larger than its target (6, 7), and an
empty message (8).

Chat tests run on the tiny loadable model of tests/tinymodel.py (a 256-token context, random
weights, milliseconds per reply); the pair warning in the model manager reads the real pair's
headers only.
"""

from __future__ import annotations

from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from tinymodel import write_loadable_gguf

from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.hub.client import HubClient
from specchat.core.machine.backend_info import gpu_offload_supported
from specchat.core.state.history import History
from specchat.core.store.catalog import load_catalog
from specchat.core.store.store import ModelStore
from specchat.gui.main_window import MainWindow

WAIT_MS = 60_000
# the settings of every window here (make_window of conftest.py starts from them)
TINY: dict[str, Any] = {"n_ctx": 256, "max_tokens": 6, "mode": "off", "n_threads": 1}
TURN = " ".join(["a b c"] * 12)  # ~67 tokens a turn with the template: 256 fill after 3


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiny")
    return {
        "target": write_loadable_gguf(d / "tiny.gguf"),
        "big-draft": write_loadable_gguf(d / "big.gguf", consistent=True, qwen2__block_count=4),
        "bad": write_loadable_gguf(d / "bad.gguf", qwen2__block_count=0),
    }


@pytest.fixture(scope="module")
def tiny_engine(tiny_files: dict[str, Path]) -> Iterator[Engine]:
    eng = Engine(tiny_files["target"], None, target_config=RuntimeConfig(n_ctx=256, n_threads=1))
    yield eng
    eng.close()


def _send(qtbot: Any, w: MainWindow, text: str) -> Any:
    with qtbot.waitSignal(w.session.streamFinished, timeout=WAIT_MS) as blocker:
        w.input.setPlainText(text)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    return blocker.args[0]


# -- case 1 --------------------------------------------------------------------------------------


def test_an_impossible_model_is_refused_with_its_bad_value(
    qtbot: Any, make_window: Any, tiny_files: dict[str, Path]
) -> None:
    w = make_window(engine=None, base=TINY)
    with qtbot.waitSignal(w.controller.loadFailed, timeout=WAIT_MS) as failed:
        w.loader.open_target(tiny_files["bad"])  # used to abort the whole app inside llama.cpp
    assert failed.args[0] == "target"
    assert "bad.gguf: impossible model setting qwen2.block_count = 0" in failed.args[1]
    qtbot.waitUntil(w.banner.isVisible, timeout=WAIT_MS)
    assert w.banner.kind == "error"
    assert "a model has 1 to 512 layers" in unescape(w.banner.text())


# -- case 2 --------------------------------------------------------------------------------------


def test_the_window_opens_on_a_damaged_history(
    qtbot: Any, make_window: Any, data_dir: Path
) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "history.sqlite3").write_bytes(b"garbage, not SQLite " * 100)
    # used to fail: "file is not a database", at every start
    w = make_window(engine=None, base=TINY)
    backups = list(data_dir.glob("history.sqlite3.damaged-*"))
    assert len(backups) == 1
    assert w.banner.isVisible() and w.banner.kind == "error"
    text = unescape(w.banner.text())
    assert "The conversation history" in text and "was damaged and could not be opened" in text
    assert f"It was kept as {backups[0]}" in text
    assert "a new, empty history was started" in text
    assert w.conversations.ids() == []


# -- case 4 --------------------------------------------------------------------------------------


def test_a_long_conversation_drops_its_oldest_exchanges_and_says_so(
    qtbot: Any, make_window: Any, tiny_engine: Engine
) -> None:
    w = make_window(engine=tiny_engine, base=TINY)
    for i in range(5):
        final = _send(qtbot, w, f"{TURN} {i}")
        assert final.tokens >= 1, final.note  # never "the prompt fills the context"
    assert w.banner.isVisible() and w.banner.kind == "info"
    text = unescape(w.banner.text())
    assert "oldest messages" in text and "so that the conversation fits the 256-token" in text
    assert "start a new chat with a summary, or raise the context size in Settings" in text
    with History(w.history.path) as h:  # the history keeps everything
        assert len(h.messages(w.session.conversation_id)) == 10

    # one message longer than the whole context: refused with what to do
    long = " ".join(["a b c"] * 200)
    _send(qtbot, w, long)
    assert w.banner.kind == "error"
    text = unescape(w.banner.text())
    assert "Your message is too long for the context: the message takes" in text
    assert "the context holds 256, with no room left for a reply; shorten it" in text


# -- case 5 --------------------------------------------------------------------------------------


def test_two_windows_on_one_history(qtbot: Any, make_window: Any, tiny_engine: Engine) -> None:
    a = make_window(engine=tiny_engine, base=TINY)
    b = make_window(engine=tiny_engine, base=TINY)
    _send(qtbot, a, "first from A")
    cid = a.session.conversation_id
    assert cid is not None
    qtbot.waitUntil(lambda: b.conversations.ids() == [cid], timeout=WAIT_MS)  # no click needed
    b.open_conversation(cid)
    assert len(b.chat.messages) == 2
    _send(qtbot, a, "second from A")  # B still shows the first exchange only
    with History(a.history.path) as h:
        before = [(m.role, m.content) for m in h.messages(cid)]
    assert len(before) == 4

    b.session_regenerate()  # would delete A's newest reply and answer in its place
    assert not b.session.streaming
    assert "changed in another window" in unescape(b.banner.text())
    assert len(b.chat.messages) == 4  # shown as stored
    with History(a.history.path) as h:
        assert [(m.role, m.content) for m in h.messages(cid)] == before
        assert h.integrity_ok()
    _send(qtbot, b, "third from B")  # now in step: appends after A's messages
    with History(a.history.path) as h:
        assert [m.role for m in h.messages(cid)] == ["user", "assistant"] * 3


# -- cases 6 and 7 -------------------------------------------------------------------------------


def test_gauge_and_status_bar_name_what_the_engine_changed(
    qtbot: Any, make_window: Any, tiny_files: dict[str, Path]
) -> None:
    asked = RuntimeConfig(n_ctx=1_000_000, n_threads=1024, n_gpu_layers=-1)
    eng = Engine(tiny_files["target"], tiny_files["big-draft"], target_config=asked)
    try:
        w = make_window(engine=eng, base=TINY)
        notices = w.gauge.figures()["notices"]
        assert any(n.startswith("context 1,000,000 tokens cut to 256") for n in notices)
        assert any(n.startswith("threads 1,024 lowered to") for n in notices)
        if not gpu_offload_supported():
            assert any(n.startswith("GPU layers -1 (all) ignored") for n in notices)
        assert any(
            n.startswith("the draft (") and "is larger than the target" in n for n in notices
        ), notices
        status = w.statusBar().currentMessage()
        assert "— note: " in status and "context 1,000,000 tokens cut to 256" in status
        assert "were the two swapped?" in w.gauge.toolTip()
        w.close()
    finally:
        eng.close()


def test_model_manager_warns_about_a_swapped_pair(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_paths: tuple[Path, Path]
) -> None:
    from specchat.gui.models.manager import ModelManagerDialog

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # headers are local; suggestions stay offline
    store = ModelStore(tmp_path / "store")
    for path in model_paths:
        (store.root / path.name).symlink_to(path)
    dlg = ModelManagerDialog(None, store=store, hub=HubClient(), catalog=load_catalog())
    qtbot.addWidget(dlg)
    dlg.show()
    try:
        pair = dlg.pair_box
        qtbot.waitUntil(lambda: "✓" in pair.verdict_label.text(), timeout=WAIT_MS)  # listed
        assert "swapped" not in pair.verdict_label.text()  # the default pair, the right way
        pair.set_target(store.root / model_paths[1].name)  # the 0.5B as the target
        pair.set_draft(store.root / model_paths[0].name)
        qtbot.waitUntil(lambda: "swapped?" in pair.verdict_label.text(), timeout=WAIT_MS)
        text = unescape(pair.verdict_label.text())
        assert "✓ the draft fits the target" in text
        assert "⚠ the draft (1.78 B parameters) is larger than the target (0.63 B" in text
    finally:
        dlg.close()
        dlg.shutdown()


# -- case 8 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["   ", "\u200b\u200b\n"])
def test_an_empty_message_is_not_sent(
    qtbot: Any, make_window: Any, tiny_engine: Engine, text: str
) -> None:
    w = make_window(engine=tiny_engine, base=TINY)
    with qtbot.assertNotEmitted(w.session.streamStarted):
        w.input.setPlainText(text)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    assert w.chat.messages == [] and w.session.conversation_id is None
    assert w.statusBar().currentMessage() == "Nothing to send: the message is empty."
