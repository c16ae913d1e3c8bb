"""The chat window on the real engine: streaming, the gauge, saving, modes, stop, quit."""

from __future__ import annotations

import threading
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer

from specchat.core.state.history import History
from specchat.core.types import Mode

MAX_STREAM_MS = 180_000
PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def stored(window: Any) -> list[Any]:
    with History(window.history.path) as h:
        assert h.integrity_ok()
        assert window.session.conversation_id is not None
        return h.messages(window.session.conversation_id)


class Deliveries:
    """Records the window at every step the engine delivers (after the session handled it):
    the reply's text length, the step's live token count, and what the gauge shows once it
    polls its source. Driven by the deliveries themselves, not by a clock."""

    def __init__(self, window: Any) -> None:
        self.window = window
        self.samples: list[tuple[int, int, str]] = []  # (text length, tokens so far, gauge)
        self.delivered = 0
        window.controller.token.connect(self._on_token)

    def _on_token(self, _rid: int, ev: Any) -> None:
        w = self.window
        if ev.finish_reason is not None or not w.session.streaming:
            return
        self.delivered += len(ev.token_ids)  # the step's own ids (its stats are live)
        reply = w.chat.last("assistant")
        assert w.gauge.live, "the gauge is not following the stream"
        w.gauge._poll()  # what its timer does (5 times a second): read the live figures
        shown = w.gauge.figures().get("tokens", "")
        self.samples.append((len(reply.text) if reply else 0, self.delivered, shown))

    def stop(self) -> None:
        self.window.controller.token.disconnect(self._on_token)


def test_message_streams_updates_the_gauge_and_is_saved(qtbot, make_window, send) -> None:
    w = make_window(max_tokens=40)
    w.mode_selector.buttons[Mode.DRAFT].click()
    probe = Deliveries(w)
    final = send(w, PROMPT)
    probe.stop()
    # the text arrived step by step, not at once at the end
    lengths = [s[0] for s in probe.samples]
    assert len(probe.samples) >= 4, probe.samples
    assert lengths == sorted(lengths) and len(set(lengths)) >= 4, lengths
    # the gauge, polling during the stream, showed the live count: from the second step on,
    # at least what had arrived (the engine may already be a step further)
    shown = [int(s[2]) for s in probe.samples]
    assert shown == sorted(shown), probe.samples
    assert all(s[1] <= int(s[2]) for s in probe.samples[1:]), probe.samples
    assert final.tokens == 40 and final.mode == "draft"
    assert w.gauge.figures()["acceptance"].endswith("%")
    assert w.gauge.figures()["tokens"] == "40"
    # saved with its stats
    user, reply = stored(w)
    assert (user.role, user.content) == ("user", PROMPT)
    assert reply.role == "assistant" and reply.content == w.chat.last("assistant").text
    assert reply.stats["mode"] == "draft" and reply.stats["tokens"] == 40
    assert reply.stats["tokens_per_s"] > 0 and reply.stats["acceptance_rate"] is not None
    assert reply.stats["finish_reason"] == "length"
    assert reply.draft_spans, "draft tokens were not recorded"
    assert w.conversations.ids() == [w.session.conversation_id]
    # the final rendering is Markdown: a fenced code block became a code block
    assert "```" in reply.content and w.chat.last("assistant").body.code


def test_mode_switch_between_messages_needs_no_reload(qtbot, make_window, send, engine) -> None:
    w = make_window(max_tokens=16)
    target, draft = engine.target, engine.draft
    w.mode_selector.buttons[Mode.OFF].click()
    off = send(w, "Say hello in French.")
    assert off.mode == "off" and w.gauge.figures()["acceptance"] == "off"
    w.mode_selector.buttons[Mode.DRAFT].click()
    on = send(w, "Now say it in German.")
    assert on.mode == "draft" and on.drafted > 0
    assert w.controller.engine is engine
    assert engine.target is target and engine.draft is draft
    modes = [m.stats["mode"] for m in stored(w) if m.role == "assistant"]
    assert modes == ["off", "draft"]
    assert w.settings.mode == "draft"  # the choice is remembered


def test_stop_mid_stream_then_regenerate(qtbot, make_window, send) -> None:
    w = make_window(max_tokens=400)
    w.mode_selector.buttons[Mode.LOOKUP].click()
    with qtbot.waitSignal(w.session.streamFinished, timeout=MAX_STREAM_MS) as blocker:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(w.chat.last("assistant").text) > 20, timeout=MAX_STREAM_MS)
        qtbot.keyClick(w, Qt.Key.Key_Escape)  # Esc stops
    stopped = blocker.args[0]
    assert stopped.tokens < 400
    _, partial = stored(w)
    assert partial.stats["finish_reason"] == "cancelled" and partial.content
    assert w.stop_button.isEnabled() is False and w.send_button.isEnabled()

    w.settings = w.settings.with_(max_tokens=12)
    with qtbot.waitSignal(w.session.streamFinished, timeout=MAX_STREAM_MS):
        qtbot.keyClick(w, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    msgs = stored(w)
    assert [m.role for m in msgs] == ["user", "assistant"]  # replaced, not added
    assert msgs[1].stats["finish_reason"] in ("length", "stop")
    assert msgs[1].stats["tokens"] <= 12
    assert [m.role for m in w.chat.messages] == ["user", "assistant"]


def test_edit_and_resend_the_last_message(qtbot, make_window, send) -> None:
    w = make_window(max_tokens=8)
    send(w, "Name a colour.")
    send(w, "Name a fruit.")
    w.chat.last("user").edit_button.click()
    assert w.input.toPlainText() == "Name a fruit." and w.session.editing
    send(w, "Name a vegetable.")
    contents = [(m.role, m.content) for m in stored(w)]
    assert [c for r, c in contents if r == "user"] == ["Name a colour.", "Name a vegetable."]
    assert len(contents) == 4
    assert [m.role for m in w.chat.messages] == ["user", "assistant", "user", "assistant"]


def test_quit_mid_stream_stops_cleanly_and_keeps_the_text(qtbot, make_window, send, engine) -> None:
    w = make_window(max_tokens=400)
    w.input.setPlainText(PROMPT)
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(w.chat.last("assistant").text) > 20, timeout=MAX_STREAM_MS)
    conv = w.session.conversation_id
    path = w.history.path
    shown = w.chat.last("assistant").text
    w.close()
    assert not w.controller.thread_.isRunning()
    with History(path) as h:
        assert h.integrity_ok()
        user, reply = h.messages(conv)
    assert reply.content.startswith(shown) and reply.stats["finish_reason"] == "cancelled"
    assert reply.stats["tokens"] < 400
    # the shared engine is free and consistent for whoever comes next
    from specchat.core.params import GenerationParams

    events = list(
        engine.generate([{"role": "user", "content": "Hi"}], GenerationParams(max_tokens=3))
    )
    assert events[-1].stats.tokens == 3


def test_generation_runs_off_the_gui_thread(qtbot, make_window, send, engine, monkeypatch) -> None:
    """The engine is driven from the inference thread, and the GUI's event loop keeps turning
    meanwhile (its timer keeps firing). How long its longest pause was is printed, not judged:
    that is a timing, and this machine is shared."""
    threads: list[threading.Thread] = []
    real = engine.generate

    def spy(*args, **kw):
        threads.append(threading.current_thread())
        yield from real(*args, **kw)

    monkeypatch.setattr(engine, "generate", spy)
    w = make_window(max_tokens=40)
    w.mode_selector.buttons[Mode.DRAFT].click()
    # a 5 ms timer fires whenever the event loop is free (a zero-interval one would spin a
    # core beside the generation)
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: w.session.streaming and ticks.append(time.perf_counter()))
    timer.start(5)
    # what the window hears arrives on the GUI thread, also where the listener is a plain
    # function (not a QObject's slot, which Qt would queue to its own thread anyway)
    heard: list[threading.Thread] = []
    c = w.controller
    c.token.connect(lambda *_: heard.append(threading.current_thread()))
    c.finished.connect(lambda *_: heard.append(threading.current_thread()))
    send(w, "List five prime numbers and explain why each is prime.")
    timer.stop()
    assert threads and all(t is not threading.main_thread() for t in threads)
    assert heard and all(t is threading.main_thread() for t in heard)
    assert ticks, "the GUI's event loop did not run while the reply was generated"
    gap = max((b - a for a, b in zip(ticks, ticks[1:], strict=False)), default=0.0)
    print(f"longest pause of the event loop while streaming: {1000 * gap:.1f} ms")


def test_new_chat_and_switching_conversations(qtbot, make_window, send) -> None:
    w = make_window(max_tokens=6)
    send(w, "First chat.")
    first = w.session.conversation_id
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert w.session.conversation_id is None and w.chat.messages == []
    w.system_prompt.setText("Answer in one word.")
    w.system_prompt.editingFinished.emit()
    send(w, "Second chat.")
    second = w.session.conversation_id
    assert second != first and w.history.conversation(second).system_prompt == "Answer in one word."
    assert set(w.conversations.ids()) == {first, second}
    w.open_conversation(first)
    assert [m.text for m in w.chat.messages][0] == "First chat."
    assert w.system_prompt.text() == ""
