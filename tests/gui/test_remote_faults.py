"""Issue 20 in the window's parts: a server's impossible figures and a server that ignores
max_tokens, shown by the same chat session, message line, gauge and history the main window
uses (wired as `MainWindow._connect` wires them), on the inference thread, against local fake
servers (tests/fakeserver.py).

The main window itself does not take a remote engine yet (its models panel and loader read a
local model's file, size and threads), so the parts are assembled here around a real
`EngineController` running a real `RemoteEngine`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakeserver import FakeServer, Route, chat_chunk, endless_chunks, fixture, llama_routes

from specchat.core.engines.remote import RemoteEngine
from specchat.core.remote import RemoteConfig
from specchat.core.state.history import History
from specchat.core.state.settings import Settings
from specchat.core.types import GenerationStats, Mode
from specchat.gui.chat.column import ChatColumn
from specchat.gui.chat.dialogue import ChatSession
from specchat.gui.stats.gauge import SpecGauge
from specchat.gui.threads.engine import EngineController
from specchat.gui.threads.requests import ModelsInfo

WAIT_MS = 60_000
NOTE = "the server's draft figures are inconsistent (accepted 9999 of 3 drafted): not shown"


class RemoteChat:
    """The window's chat parts around one remote engine."""

    def __init__(self, engine: RemoteEngine, history: History, max_tokens: int) -> None:
        self.engine = engine
        self.history = history
        settings = Settings(max_tokens=max_tokens, mode="draft")
        self.controller = EngineController(engine, owns_engine=False)
        self.column = ChatColumn()
        self.chat = self.column.chat
        self.gauge = SpecGauge()
        target = engine.describe()["target"]
        self.session = ChatSession(
            self.chat,
            history,
            self.controller,
            settings=lambda: settings,
            mode=lambda: Mode.DRAFT,
            models=lambda: ModelsInfo(target=target),  # type: ignore[arg-type]
        )
        s = self.session  # as MainWindow._connect does
        s.streamStarted.connect(lambda: self.gauge.follow(lambda: s.live_stats))
        s.streamFinished.connect(lambda st: self.gauge.stop_following(st))
        self.polled: list[dict[str, Any]] = []  # what the gauge showed at each streamed piece
        self.controller.token.connect(self._on_token)

    def _on_token(self, _rid: int, ev: Any) -> None:
        if ev.finish_reason is None and self.gauge.live:
            self.gauge._poll()  # what its timer does: read the live figures
            self.polled.append(self.gauge.figures())

    def send(self, qtbot: Any, text: str) -> GenerationStats:
        with qtbot.waitSignal(self.session.streamFinished, timeout=WAIT_MS) as blocker:
            assert self.session.send(text)
        return blocker.args[0]

    def saved_reply(self) -> Any:
        assert self.session.conversation_id is not None
        return self.history.messages(self.session.conversation_id)[-1]

    def close(self) -> None:
        assert self.controller.shutdown()
        self.column.close()
        self.engine.close()


@pytest.fixture
def remote_chat(qtbot: Any, data_dir: Any) -> Iterator[Callable[..., RemoteChat]]:
    made: list[tuple[RemoteChat, FakeServer]] = []
    history = History(data_dir / "history.sqlite3")

    def make(routes: dict, max_tokens: int = 32) -> RemoteChat:
        server = FakeServer(routes=routes).start()
        engine = RemoteEngine(RemoteConfig(server.url, use_metrics=False))
        rc = RemoteChat(engine, history, max_tokens)
        qtbot.addWidget(rc.column)
        qtbot.addWidget(rc.gauge)
        made.append((rc, server))
        return rc

    yield make
    for rc, server in made:
        rc.close()
        server.stop()
    history.close()


def test_impossible_draft_figures_never_reach_the_gauge_the_line_or_the_history(
    qtbot: Any, remote_chat: Any
) -> None:
    bad = {"prompt_n": 5, "predicted_n": -7, "draft_n": 3, "draft_n_accepted": 9999}
    words = ["Hello", ",", " world", "!"]
    chunks = [chat_chunk(w, timings=bad) for w in words]
    chunks += [chat_chunk(finish="stop"), "data: [DONE]\n\n"]
    rc = remote_chat(llama_routes(Route(chunks=chunks)))
    final = rc.send(qtbot, "hi")
    # the gauge: no acceptance while the reply streamed, none after, and the note
    assert rc.polled and all(f["acceptance"] == "—" for f in rc.polled), rc.polled
    shown = rc.gauge.figures()
    assert shown["acceptance"] == "—" and shown["accepted"] == "0/0"
    assert NOTE in shown["note"] and "predicted_n = -7" in shown["note"]
    assert final.drafted == 0 and final.tokens == 4
    # the line under the reply, and its tooltip with the note
    widget = rc.chat.last("assistant")
    assert widget is not None and widget.text == "Hello, world!"
    assert "accepted" not in widget.meta.text() and "3333" not in widget.meta.text()
    assert NOTE in widget.meta.toolTip()
    # the saved message
    saved = rc.saved_reply()
    assert saved.role == "assistant" and saved.content == "Hello, world!"
    assert saved.stats["drafted"] == 0 and saved.stats["acceptance_rate"] is None
    assert saved.stats["figures"] == "none" and NOTE in saved.stats["note"]


def test_a_reply_cut_at_the_clients_limit_is_kept(qtbot: Any, remote_chat: Any) -> None:
    route = Route(chunks=endless_chunks(id="x" * 1000))
    routes = {
        ("GET", "/v1/models"): Route(body=fixture("vllm_models.json")),
        ("POST", "/v1/chat/completions"): route,
    }
    rc = remote_chat(routes, max_tokens=20)
    final = rc.send(qtbot, "hi")
    expected = "".join(f"w{i} " for i in range(20))
    assert final.tokens == 20 and rc.gauge.figures()["tokens"] == "20"
    note = "the server ignored max_tokens (20): SpecChat closed the stream at the limit"
    assert note in rc.gauge.figures()["note"]
    widget = rc.chat.last("assistant")
    assert widget is not None and widget.text == expected and not widget.error
    assert "length limit" in widget.meta.text()
    saved = rc.saved_reply()
    assert saved.content == expected and saved.stats["finish_reason"] == "length"
    assert saved.stats["tokens"] == 20 and note in saved.stats["note"]
    assert route.done.wait(60) and route.broken  # the client hung up
