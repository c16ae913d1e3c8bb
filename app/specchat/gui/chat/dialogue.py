"""The conversation on screen: send, stream, stop, regenerate, edit, save.

Ties the chat pane, the conversation database and the inference thread together. Every reply is
saved (with its stats and draft spans) when it ends, whether it finished, was stopped, failed,
or the window closed mid-reply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from specchat.core.conversation.text_input import clean_text
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.state.history import History
from specchat.core.state.settings import Settings
from specchat.core.types import FinishReason, GenerationStats, Mode, TokenEvent
from specchat.gui.chat.message import MessageWidget
from specchat.gui.chat.view import ChatView
from specchat.gui.threads.engine import EngineController
from specchat.gui.threads.requests import ModelsInfo

log = logging.getLogger(__name__)

EMPTY_MESSAGE = "Nothing to send: the message is empty."
CHANGED_ELSEWHERE = "This conversation was changed in another window; it is shown as saved now."
NOTHING_DELETED = " Nothing was deleted: try again."


@dataclass
class _Stream:
    """The reply being generated: its text and draft spans are built by the core's `Reply`."""

    rid: int
    conversation_id: int
    mode: Mode
    params: GenerationParams
    widget: MessageWidget | None  # None once the user left the conversation
    reply: Reply = field(default_factory=Reply)


class ChatSession(QObject):
    conversationChanged = Signal(int)  # the conversation shown (-1: a new, unsaved one)
    historyChanged = Signal()  # titles or order in the list may have changed
    streamStarted = Signal()
    streamFinished = Signal(object)  # final GenerationStats (or None)
    error = Signal(str)
    notice = Signal(str, str)  # text, "info" (a banner) or "status" (the status bar)

    def __init__(
        self,
        view: ChatView,
        history: History,
        engine: EngineController,
        *,
        settings: Callable[[], Settings],
        mode: Callable[[], Mode],
        models: Callable[[], ModelsInfo],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.view = view
        self.history = history
        self.engine = engine
        self._settings = settings
        self._mode = mode
        self._models = models
        self.conversation_id: int | None = None
        self.system_prompt = ""
        self.editing = False
        self.live_stats: GenerationStats | None = None
        self._stream: _Stream | None = None
        self._shown_ids: list[int] = []  # the stored messages on screen, to notice other writers
        engine.token.connect(self._on_token)
        engine.finished.connect(self._on_finished)
        engine.failed.connect(self._on_failed)
        engine.trimmed.connect(self._on_trimmed)
        view.regenerateRequested.connect(self.regenerate)

    @property
    def streaming(self) -> bool:
        return self._stream is not None

    # -- conversations ----------------------------------------------------------------------
    def new_conversation(self) -> None:
        """An empty chat; it is saved when its first message is sent."""
        self._detach()
        self.conversation_id = None
        self.system_prompt = ""
        self.editing = False
        self._shown_ids = []
        self.view.clear()
        self.conversationChanged.emit(-1)

    def open(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            return
        conv = self.history.conversation(conversation_id)
        self._detach()
        self.conversation_id = conv.id
        self.system_prompt = conv.system_prompt
        self.editing = False
        self.view.clear()
        for m in conv.messages:
            self.view.add_message(m.role, m.content, spans=m.draft_spans, stats=m.stats)
        self._shown_ids = [m.id for m in conv.messages]
        self.conversationChanged.emit(conv.id)

    def _reload_if_changed(self, more: str = "") -> bool:
        """Another window (sharing the database) changed this conversation since it was shown:
        show it as stored now, and say so. True when it was reloaded."""
        cid = self.conversation_id
        if cid is None or self._stream is not None or not self.history.exists(cid):
            return False
        if [m.id for m in self.history.messages(cid)] == self._shown_ids:
            return False
        self.conversation_id = None  # open() again
        self.open(cid)
        self.notice.emit(CHANGED_ELSEWHERE + more, "info")
        return True

    def set_system_prompt(self, text: str) -> None:
        if text == self.system_prompt:
            return
        self.system_prompt = text
        if self.conversation_id is not None:
            self.history.set_system_prompt(self.conversation_id, text)

    def _detach(self) -> None:
        """Leaving the conversation shown: a reply in progress stops and is saved off-screen."""
        if self._stream is not None:
            self._stream.widget = None
            self.engine.stop()

    # -- sending ----------------------------------------------------------------------------
    def send(self, text: str) -> bool:
        if self.engine.busy:
            return False
        cleaned = clean_text(text)
        if cleaned.empty:
            self.notice.emit(EMPTY_MESSAGE, "status")
            return False
        text = cleaned.text.strip()
        if self.engine.engine is None:
            self.error.emit("No model is loaded yet.")
            return False
        if cleaned.note:
            self.notice.emit(f"Your message: {cleaned.note}.", "status")
        self._reload_if_changed()  # another window wrote here: append after what it wrote
        if self.conversation_id is None or not self.history.exists(self.conversation_id):
            self.conversation_id = self.history.create(system_prompt=self.system_prompt)
            self._shown_ids = []
            self.conversationChanged.emit(self.conversation_id)
        if self.editing:
            self._drop_from_last_user()
            self.editing = False
        msg = self.history.add_message(self.conversation_id, "user", text)
        self._shown_ids.append(msg.id)
        self.view.add_message("user", msg.content)
        self.historyChanged.emit()
        self._generate()
        return True

    def regenerate(self) -> None:
        if self.engine.busy or self.conversation_id is None:
            return
        if self._reload_if_changed(NOTHING_DELETED):  # never delete another window's writes
            return
        msgs = self.history.messages(self.conversation_id)
        if not msgs:
            return
        if msgs[-1].role == "assistant":
            self.history.delete_messages_from(self.conversation_id, msgs[-1].id)
            self._shown_ids = [m.id for m in msgs[:-1]]
            if self.view.messages and self.view.messages[-1].role == "assistant":
                self.view.remove_last(1)
        self._generate()

    def begin_edit(self) -> str | None:
        """Start editing the last user message; returns its text (None if there is none)."""
        if self.engine.busy or self.conversation_id is None:
            return None
        if self._reload_if_changed(NOTHING_DELETED):
            return None
        users = [m for m in self.history.messages(self.conversation_id) if m.role == "user"]
        if not users:
            return None
        self.editing = True
        return users[-1].content

    def cancel_edit(self) -> None:
        self.editing = False

    def _drop_from_last_user(self) -> None:
        assert self.conversation_id is not None
        msgs = self.history.messages(self.conversation_id)
        idx = max((i for i, m in enumerate(msgs) if m.role == "user"), default=None)
        if idx is None:
            return
        self.history.delete_messages_from(self.conversation_id, msgs[idx].id)
        self._shown_ids = [m.id for m in msgs[:idx]]
        self.view.remove_last(len(msgs) - idx)

    def _generate(self) -> None:
        assert self.conversation_id is not None
        conv = self.history.conversation(self.conversation_id)
        messages = conv.chat_messages()
        if not messages or messages[-1]["role"] != "user":
            return
        params = self._settings().generation_params()
        mode = self._mode()
        widget = self.view.begin_stream()
        rid = self.engine.generate(messages, params, mode, fit=True)
        self._stream = _Stream(rid, conv.id, mode, params, widget)
        self.live_stats = GenerationStats(mode=mode.value)
        self.view.set_busy(True)
        self.streamStarted.emit()

    def stop(self) -> None:
        if self._stream is not None:
            self.engine.stop()

    # -- the stream -------------------------------------------------------------------------
    @Slot(int, object)
    def _on_token(self, rid: int, ev: TokenEvent) -> None:
        s = self._stream
        if s is None or rid != s.rid:
            return
        s.reply.add(ev)
        if s.widget is not None:
            s.widget.extend(s.reply, ev.segments)
        self.live_stats = ev.stats

    @Slot(int, object)
    def _on_finished(self, rid: int, _final: TokenEvent | None) -> None:
        s = self._stream
        if s is not None and rid == s.rid:
            self._finish("")  # the final event came through _on_token too

    @Slot(int, str)
    def _on_trimmed(self, rid: int, notice: str) -> None:
        s = self._stream
        if s is not None and rid == s.rid:
            self.notice.emit(notice, "info")

    @Slot(int, str)
    def _on_failed(self, rid: int, message: str) -> None:
        s = self._stream
        if s is not None and rid == s.rid:
            self._finish(message)
            self.error.emit(message)

    def _record(self, s: _Stream, stats: GenerationStats) -> dict[str, Any]:
        """What is saved with the reply: its figures, how it ended, the models and settings."""
        record: dict[str, Any] = stats.to_dict()
        record["finish_reason"] = (s.reply.finish_reason or FinishReason.CANCELLED).value
        models = self._models()
        if models.target is not None:
            record["target"] = models.target.name
        if models.draft is not None and s.mode is Mode.DRAFT:
            record["draft"] = models.draft.name
        record["params"] = s.params.to_dict()
        return record

    def _finish(self, error: str) -> None:
        s = self._stream
        if s is None:
            return
        self._stream = None
        stats = s.reply.stats or GenerationStats(mode=s.mode.value)  # no step came
        record = self._record(s, stats)
        text = s.reply.text
        if text and self.history.exists(s.conversation_id):
            msg = self.history.add_message(
                s.conversation_id, "assistant", text, stats=record, draft_spans=s.reply.spans
            )
            if s.conversation_id == self.conversation_id:
                self._shown_ids.append(msg.id)
            self.historyChanged.emit()
        if s.widget is not None:
            s.widget.error = error
            s.widget.set_stats(record)
            self.view.end_stream()
            if not text and not error:
                self.view.remove_last(1)  # stopped before the first token
        self.view.set_busy(False)
        self.live_stats = stats
        self.streamFinished.emit(stats)

    def save_partial(self) -> None:
        """The window is closing: keep what streamed so far (the thread has been joined)."""
        self._finish("")
