"""The chat pane: a column of message widgets that streams the reply being generated.

While a reply streams, each token is appended as plain text (draft tokens highlighted); the
Markdown rendering is redone at most a few times a second and once at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .render import (
    CodeBlock,
    Span,
    Theme,
    add_span,
    append_text,
    code_block_at,
    render_markdown,
    render_plain,
    theme_for,
)
from .stats_text import stats_summary

RENDER_INTERVAL_MS = 300  # Markdown re-render while streaming, at most this often
ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System"}


class MessageBody(QTextBrowser):
    """A read-only text view as tall as its content (the chat pane scrolls, not the message)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.anchorClicked.connect(self._open_link)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.code: list[CodeBlock] = []
        self._fit()

    def _open_link(self, url: QUrl) -> None:
        if url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)

    def _fit(self, *_: Any) -> None:
        h = math.ceil(self.document().size().height()) + 2 * self.frameWidth()
        bar = self.horizontalScrollBar()
        if bar.maximum() > 0:
            h += bar.sizeHint().height()
        if h != self.height():
            self.setFixedHeight(max(h, 8))

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        self._fit()

    def wheelEvent(self, event: Any) -> None:
        event.ignore()  # let the chat pane scroll

    def code_at(self, pos: QPoint) -> CodeBlock | None:
        return code_block_at(self.code, self.cursorForPosition(pos).position())

    def contextMenuEvent(self, event: Any) -> None:
        menu = self.createStandardContextMenu(event.pos())
        block = self.code_at(event.pos())
        if block is not None:
            act = QAction(f"Copy code block ({block.label()})", menu)
            act.triggered.connect(lambda: QGuiApplication.clipboard().setText(block.text))
            first = menu.actions()[0] if menu.actions() else None
            if first is not None:
                menu.insertAction(first, act)
            else:
                menu.addAction(act)
        menu.exec(event.globalPos())


class MessageWidget(QFrame):
    """One message: a header (who, stats, actions) over its text."""

    def __init__(
        self,
        role: str,
        text: str = "",
        *,
        spans: Sequence[Span] = (),
        stats: dict[str, Any] | None = None,
        highlight: bool = True,
        theme: Theme,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.role = role
        self.text = text
        self.spans: list[Span] = list(spans)
        self.stats = stats
        self.highlight = highlight
        self.theme = theme
        self.streaming = False
        self.error = ""
        self._dirty = False
        self.render_count = 0
        self.setObjectName(f"message-{role}")
        self.setProperty("role", role)
        self.setFrameShape(QFrame.Shape.StyledPanel)

        self.title = QLabel(ROLE_TITLES.get(role, role.title()))
        self.title.setObjectName("messageRole")
        self.meta = QLabel()
        self.meta.setObjectName("messageMeta")
        self.meta.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_button = self._tool("Copy", "Copy this message")
        self.copy_button.clicked.connect(self.copy)
        self.code_button = self._tool("Copy code", "Copy a code block of this message")
        self.code_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.code_button.setMenu(QMenu(self.code_button))
        self.code_button.menu().aboutToShow.connect(self._fill_code_menu)
        self.edit_button = self._tool("Edit", "Edit this message and send it again")
        self.regen_button = self._tool("Regenerate", "Generate this reply again")
        for b in (self.code_button, self.edit_button, self.regen_button):
            b.hide()

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title)
        header.addWidget(self.meta, 1)
        for b in (self.code_button, self.copy_button, self.edit_button, self.regen_button):
            header.addWidget(b)
        self.body = MessageBody()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 8)
        lay.setSpacing(2)
        lay.addLayout(header)
        lay.addWidget(self.body)
        self.redraw()

    def _tool(self, text: str, tip: str) -> QToolButton:
        b = QToolButton()
        b.setText(text)
        b.setToolTip(tip)
        b.setAutoRaise(True)
        return b

    # -- content ----------------------------------------------------------------------------
    def redraw(self) -> None:
        """Redraw the whole message (Markdown for the assistant, plain text otherwise)."""
        doc = self.body.document()
        if self.role == "assistant":
            self.body.code = render_markdown(
                doc, self.text, self.spans, highlight=self.highlight, theme=self.theme
            )
        else:
            render_plain(doc, self.text, (), highlight=False, theme=self.theme)
            self.body.code = []
        if self.error:
            append_text(
                doc,
                ("\n\n" if self.text else "") + f"⚠ {self.error}",
                draft=False,
                theme=self.theme,
            )
        self.code_button.setVisible(bool(self.body.code) and not self.streaming)
        self._dirty = False
        self.render_count += 1
        self._update_meta()

    def append(self, text: str, from_draft: bool) -> None:
        """Streamed text: appended as is; the Markdown rendering catches up later."""
        if not text:
            return
        start = len(self.text)
        self.text += text
        if from_draft:
            add_span(self.spans, start, len(self.text))
        append_text(
            self.body.document(), text, draft=from_draft and self.highlight, theme=self.theme
        )
        self._dirty = True

    def redraw_if_dirty(self) -> None:
        if self._dirty:
            self.redraw()

    def set_stats(self, stats: dict[str, Any] | None) -> None:
        self.stats = stats
        self._update_meta()

    def _update_meta(self) -> None:
        if self.role == "assistant" and self.stats:
            self.meta.setText(stats_summary(self.stats))
            self.meta.setToolTip(stats_summary(self.stats, long=True))
        elif self.streaming:
            self.meta.setText("generating…")

    def set_highlight(self, on: bool) -> None:
        if on != self.highlight:
            self.highlight = on
            self.redraw()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.redraw()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text)

    def _fill_code_menu(self) -> None:
        menu = self.code_button.menu()
        menu.clear()
        for i, block in enumerate(self.body.code, 1):
            act = menu.addAction(f"Block {i} ({block.label()})")
            act.triggered.connect(
                lambda _=False, t=block.text: QGuiApplication.clipboard().setText(t)
            )


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
