"""The chat pane: a column of message widgets that streams the reply being generated.

While a reply streams, its message shows the text as it comes (see `message.MessageWidget`); the
Markdown rendering is redone at most a few times a second and once at the end.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from specchat.core.reply import Span
from specchat.gui.chat.message import MessageWidget
from specchat.gui.chat.render import theme_for

RENDER_INTERVAL_MS = 300  # Markdown re-render while streaming, at most this often


class ChatView(QScrollArea):
    """The message column. Keeps the newest text in view unless the user scrolled up."""

    editRequested = Signal()
    regenerateRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._inner = QWidget()
        self._inner.setObjectName("chatColumn")
        self._column = QVBoxLayout(self._inner)
        self._column.setContentsMargins(12, 12, 12, 12)
        self._column.setSpacing(10)
        self._placeholder = QLabel()
        self._placeholder.setObjectName("chatPlaceholder")
        self._placeholder.setWordWrap(True)
        self._placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._placeholder.setTextFormat(Qt.TextFormat.RichText)
        self._placeholder.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self._placeholder.setOpenExternalLinks(True)
        self._column.addWidget(self._placeholder)
        self._column.addStretch(1)
        self.setWidget(self._inner)
        self.messages: list[MessageWidget] = []
        self.highlight = True
        self.busy = False
        self.theme = theme_for(self.palette())
        self._stick = True
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self.verticalScrollBar().valueChanged.connect(self._scrolled)
        self._timer = QTimer(self)
        self._timer.setInterval(RENDER_INTERVAL_MS)
        self._timer.timeout.connect(self._rerender)
        self._streaming: MessageWidget | None = None
        self._last_render = 0.0

    # -- messages ---------------------------------------------------------------------------
    def clear(self) -> None:
        self.end_stream()
        for w in self.messages:
            self._column.removeWidget(w)
            w.deleteLater()
        self.messages = []
        self._update_placeholder()

    def add_message(
        self,
        role: str,
        text: str,
        *,
        spans: Sequence[Span] = (),
        stats: dict[str, Any] | None = None,
    ) -> MessageWidget:
        w = MessageWidget(
            role, text, spans=spans, stats=stats, highlight=self.highlight, theme=self.theme
        )
        w.edit_button.clicked.connect(self.editRequested)
        w.regen_button.clicked.connect(self.regenerateRequested)
        self._column.insertWidget(self._column.count() - 1, w)
        self.messages.append(w)
        self._stick = True
        self._update_placeholder()
        self._update_actions()
        return w

    def remove_last(self, count: int = 1) -> None:
        for _ in range(min(count, len(self.messages))):
            w = self.messages.pop()
            if w is self._streaming:
                self.end_stream()
            self._column.removeWidget(w)
            w.deleteLater()
        self._update_placeholder()
        self._update_actions()

    def last(self, role: str | None = None) -> MessageWidget | None:
        for w in reversed(self.messages):
            if role is None or w.role == role:
                return w
        return None

    # -- streaming --------------------------------------------------------------------------
    def begin_stream(self) -> MessageWidget:
        w = self.add_message("assistant", "")
        w.streaming = True
        w._update_meta()
        self._streaming = w
        self._timer.start()
        return w

    def end_stream(self) -> None:
        self._timer.stop()
        w, self._streaming = self._streaming, None
        if w is not None:
            w.streaming = False
            w.redraw()
        self._update_actions()

    def _rerender(self) -> None:
        w = self._streaming
        if w is None:
            return
        # Long replies re-render less often, so streaming stays cheap.
        interval = RENDER_INTERVAL_MS / 1000 * max(1.0, len(w.text) / 4000)
        now = time.monotonic()
        if now - self._last_render >= interval:
            self._last_render = now
            w.redraw_if_dirty()

    # -- state ------------------------------------------------------------------------------
    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._update_actions()

    def set_highlight(self, on: bool) -> None:
        self.highlight = on
        for w in self.messages:
            w.set_highlight(on)

    def set_placeholder(self, html: str) -> None:
        self._placeholder.setText(html)
        self._update_placeholder()

    def _update_placeholder(self) -> None:
        self._placeholder.setVisible(not self.messages and bool(self._placeholder.text()))

    def _update_actions(self) -> None:
        last_user = self.last("user")
        last = self.messages[-1] if self.messages else None
        for w in self.messages:
            w.edit_button.setVisible(w is last_user)
            w.edit_button.setEnabled(not self.busy)
            w.regen_button.setVisible(w is last and w.role == "assistant" and not w.streaming)
            w.regen_button.setEnabled(not self.busy)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            theme = theme_for(self.palette())
            if theme.dark != self.theme.dark:
                self.theme = theme
                for w in self.messages:
                    w.set_theme(theme)

    # -- scrolling --------------------------------------------------------------------------
    def _scrolled(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._stick = value >= bar.maximum() - 24

    def _follow(self, _min: int, maximum: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(maximum)
