"""Widgets and helpers that need Qt but no model: rendering, toggle, gauge, forms, lists."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCursor, QTextDocument

from specchat.core.decoding.runtime import ModelLoadError
from specchat.core.gguf.compat import CompatResult, IncompatibleDraftError
from specchat.core.gguf.header import GGUFError
from specchat.core.reply import Reply
from specchat.core.state.history import History
from specchat.core.state.settings import Settings
from specchat.core.types import GenerationStats, Mode, TokenEvent
from specchat.gui.chat.conversations import ConversationList
from specchat.gui.chat.input_box import InputBox
from specchat.gui.chat.mode_selector import NO_DRAFT_TIP, ModeSelector
from specchat.gui.chat.render import HAVE_PYGMENTS, align, render_markdown, runs, theme_for
from specchat.gui.chat.view import ChatView
from specchat.gui.errors import readable_error
from specchat.gui.settings_dialog import SettingsDialog
from specchat.gui.stats.gauge import SpecGauge
from specchat.gui.stats.stats_text import mode_label, stats_summary

# how long a wait for the window may take: generous, so a busy machine slows a test, never
# fails it (a passing test waits only as long as the window needs)
WAIT_MS = 120_000

REPLY = (
    "Here is the function:\n\n```python\ndef square(x):\n    return x * x\n```\n\n"
    "It returns **the square** of `x`."
)


def background_at(doc: QTextDocument, pos: int) -> QColor:
    c = QTextCursor(doc)
    c.setPosition(pos + 1)  # the format of the character before the cursor
    return c.charFormat().background().color()


def test_markdown_code_blocks_and_draft_highlights(qapp) -> None:
    theme = theme_for(qapp.palette())
    doc = QTextDocument()
    start = REPLY.index("the square")
    spans = [(start, start + len("the square"))]
    blocks = render_markdown(doc, REPLY, spans, highlight=True, theme=theme)
    assert len(blocks) == 1 and blocks[0].language == "python"
    assert blocks[0].text == "def square(x):\n    return x * x"
    text = doc.toPlainText()
    assert "```" not in text and "**" not in text
    hit = text.index("the square")
    assert background_at(doc, hit) == theme.draft_bg
    assert background_at(doc, hit + 4) == theme.draft_bg
    assert background_at(doc, text.index("It returns")) != theme.draft_bg
    if HAVE_PYGMENTS:  # keywords coloured differently from names
        c = QTextCursor(doc)
        c.setPosition(blocks[0].start + 1)
        keyword = c.charFormat().foreground().color()
        c.setPosition(blocks[0].start + 6)
        name = c.charFormat().foreground().color()
        assert keyword != name
    plain = QTextDocument()
    render_markdown(plain, REPLY, spans, highlight=False, theme=theme)
    assert background_at(plain, hit) != theme.draft_bg


def test_alignment_helpers() -> None:
    src = "a **bold** word\nand a soft break"
    dst = "a bold word and a soft break"
    m = align(src, dst)
    assert all(k >= 0 for k in m)
    assert "".join(src[k] if not src[k].isspace() else " " for k in m) == dst
    assert runs(bytearray([0, 1, 1, 0, 1])) == [(1, 3), (4, 5)]


def step(*segments: tuple[str, bool]) -> TokenEvent:
    """One decoding step's event: its text by origin (token ids do not matter here)."""
    return TokenEvent(
        text="".join(t for t, _ in segments),
        token_ids=(),
        draft_flags=(),
        stats=GenerationStats(mode="draft"),
        segments=segments,
    )


def test_chat_view_streams_then_renders_markdown(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    view.add_message("user", "square?")
    w = view.begin_stream()
    reply = Reply()
    steps = [
        step((REPLY[:10], False)),
        step((REPLY[10:25], True)),
        step((REPLY[25:30], True), (REPLY[30:40], False)),
        step((REPLY[40:], False)),
    ]
    for ev in steps:
        reply.add(ev)
        w.extend(reply, ev.segments)
    assert w.text == REPLY and w.spans == [(10, 30)]
    assert w.body.toPlainText() == REPLY  # plain while streaming
    view.end_stream()
    assert "```" not in w.body.toPlainText() and w.body.code  # Markdown at the end
    assert not w.regen_button.isHidden() and not w.code_button.isHidden()
    assert not view.messages[0].edit_button.isHidden()
    w.copy()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == REPLY
    rendered = w.render_count
    view.set_highlight(False)
    assert w.render_count == rendered + 1
    view.set_busy(True)
    assert not w.regen_button.isEnabled()


def test_mode_selector_is_built_from_the_enum(qtbot) -> None:
    sel = ModeSelector()
    qtbot.addWidget(sel)
    assert list(sel.buttons) == list(Mode)
    assert sel.buttons[Mode.OFF].text() == "Off"
    assert sel.buttons[Mode.DRAFT].text() == "Draft model"
    assert sel.buttons[Mode.LOOKUP].text() == "Prompt lookup"
    assert mode_label("some_new_mode") == "Some new mode"
    chosen: list[Mode] = []
    sel.modeChosen.connect(chosen.append)
    sel.buttons[Mode.DRAFT].click()
    assert sel.mode() is Mode.DRAFT and chosen == [Mode.DRAFT]
    sel.set_draft_available(False)
    assert not sel.buttons[Mode.DRAFT].isEnabled()
    assert sel.buttons[Mode.DRAFT].toolTip() == NO_DRAFT_TIP
    assert sel.mode() is Mode.LOOKUP
    sel.set_mode(Mode.DRAFT)  # refused while disabled
    assert sel.mode() is Mode.LOOKUP


def test_gauge_shows_off_not_zero_and_the_note(qtbot) -> None:
    g = SpecGauge()
    qtbot.addWidget(g)
    g.resize(280, 360)
    assert g.figures()["acceptance"] == "—"
    g.set_stats(GenerationStats(mode="off", tokens=10, decode_s=0.5, ttft_s=0.1))
    assert g.figures()["acceptance"] == "off"
    st = GenerationStats(
        mode="draft", tokens=30, drafted=40, accepted=30, verify_steps=10, verify_tokens=40
    )
    st.draft_pos_proposed, st.draft_pos_accepted = [10, 10, 10, 10], [10, 9, 7, 4]
    st.note = "the draft was switched off for this reply"
    g.set_stats(st)
    f = g.figures()
    assert f["acceptance"] == "75%" and f["mean_accepted_length"] == "4.00"
    assert f["positions"] == [1.0, 0.9, 0.7, 0.4] and f["note"] == st.note
    assert not g.grab().isNull()  # paints without error
    # live mode polls a source on a timer and keeps the last figures at the end
    source = {"st": GenerationStats(mode="lookup", tokens=1)}
    g.follow(lambda: source["st"])
    source["st"] = GenerationStats(mode="lookup", tokens=5, drafted=4, accepted=2, verify_steps=1)
    qtbot.waitUntil(lambda: g.figures()["tokens"] == "5", timeout=WAIT_MS)
    g.stop_following()
    assert not g.live and g.figures()["acceptance"] == "50%"


def test_settings_form_refuses_out_of_range_values(qtbot) -> None:
    dlg = SettingsDialog(Settings())
    qtbot.addWidget(dlg)
    ok = dlg.buttons.button(dlg.buttons.StandardButton.Ok)
    assert ok.isEnabled() and not dlg.problems.isVisibleTo(dlg)
    dlg.temperature.setValue(20)
    assert not ok.isEnabled()
    assert "temperature must be between 0 and 10" in dlg.problems.text()
    dlg.n_ctx.setValue(100)
    assert "context size must be between 256 and 1,048,576 tokens" in dlg.problems.text()
    dlg.seed.setText("abc")
    assert "seed must be a non-negative integer" in dlg.problems.text()
    dlg.accept()
    assert dlg.result() == 0  # not accepted
    dlg.temperature.setValue(0.7)
    dlg.n_ctx.setValue(2048)
    dlg.seed.setText("42")
    assert ok.isEnabled()
    s = dlg.settings()
    assert (s.temperature, s.n_ctx, s.seed) == (0.7, 2048, 42)
    assert Settings().needs_reload(s) and s.generation_params().validate().seed == 42


def test_conversation_list_search_rename_delete_undo(qtbot, tmp_path) -> None:
    with History(tmp_path / "h.sqlite3") as h:
        ids = [h.create(t) for t in ("Sorting", "Rust lifetimes", "Sorting again")]
        panel = ConversationList(h)
        qtbot.addWidget(panel)
        assert sorted(panel.ids()) == sorted(ids)
        panel.search.setText("sort")
        assert sorted(panel.ids()) == sorted([ids[0], ids[2]])
        panel.search.clear()
        panel.rename(ids[1], "Borrowing")
        assert h.conversation(ids[1]).title == "Borrowing"
        deleted: list[int] = []
        panel.deleted.connect(deleted.append)
        panel.set_current(ids[0])
        panel.delete_current()
        assert deleted == [ids[0]] and ids[0] not in panel.ids()
        assert not panel._undo_row.isHidden()
        panel.undo_button.click()
        assert ids[0] in panel.ids() and h.conversation(ids[0]).title == "Sorting"


def test_input_box_enter_sends_and_shift_enter_breaks_the_line(qtbot) -> None:
    box = InputBox()
    qtbot.addWidget(box)
    sent: list[str] = []
    box.submitted.connect(sent.append)
    qtbot.keyClicks(box, "one")
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "two")
    assert sent == [] and box.toPlainText() == "one\ntwo"
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert sent == ["one\ntwo"]


def test_errors_read_like_sentences(tmp_path) -> None:
    from pathlib import Path

    p = Path("/models/x.gguf")
    assert "is not a usable GGUF model" in readable_error(GGUFError("truncated"), p)
    incompatible = IncompatibleDraftError(CompatResult(False, "vocab_size", "vocab sizes differ"))
    text = readable_error(incompatible, p)
    assert "cannot be used as a draft" in text and "vocab sizes differ" in text
    assert readable_error(ModelLoadError("llama.cpp could not load x")).endswith(".")
    assert "Unexpected error (KeyError)" in readable_error(KeyError("k"))


def test_stats_summary() -> None:
    record = {"mode": "draft", "tokens_per_s": 31.25, "drafted": 10, "accepted": 7, "tokens": 20}
    assert stats_summary(record) == "Draft model · 31.2 tok/s · 70% accepted"
    record.update(finish_reason="cancelled", ttft_s=0.25, target="big.gguf")
    long = stats_summary(record, long=True)
    assert "stopped" in long and "first token 250 ms" in long and "target big.gguf" in long
    assert "20 tokens" in long
    one = {"mode": "off", "tokens": 1, "tokens_per_s": 4.0, "ttft_s": 0.25}
    assert "· 1 token" in stats_summary(one, long=True)  # not "1 tokens"
    off = {"mode": "off", "tokens": 11, "tokens_per_s": 10.0}
    assert stats_summary(off) == "speculation off · 10.0 tok/s"
    # a full record as saved today reads the same
    st = GenerationStats(mode="lookup", tokens=21, drafted=8, accepted=2, decode_s=2.0)
    assert stats_summary(st.to_dict()) == "Prompt lookup · 10.0 tok/s · 25% accepted"
    # a reply that decoded with fewer threads than loaded says so, briefly (the header's width)
    st.threads, st.threads_wanted = 1, 2
    assert stats_summary(st.to_dict()).endswith("25% accepted · 1 of 2 threads, CPU busy")
    assert "1 of 2 threads: another program keeps a CPU busy" in stats_summary(
        st.to_dict(), long=True
    )
    st.threads = 2  # every thread: nothing to say
    assert "threads" not in stats_summary(st.to_dict(), long=True)


@pytest.mark.parametrize("dark", [False, True])
def test_themes_follow_the_palette(qapp, dark: bool) -> None:
    from PySide6.QtGui import QPalette

    pal = QPalette(qapp.palette())
    pal.setColor(QPalette.ColorRole.Window, QColor("#202124" if dark else "#f4f4f4"))
    assert theme_for(pal).dark is dark
