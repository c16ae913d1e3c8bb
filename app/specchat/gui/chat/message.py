"""One message of the chat: its header (who, stats, actions) over its rendered text.

While a reply streams, each step's text is appended as plain text (draft text highlighted); the
Markdown rendering is redone by the chat view a few times a second and once at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from PySide6.QtCore import QPoint, Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.reply import Reply, Span
from specchat.gui.chat.render import (
    CodeBlock,
    Theme,
    append_text,
    code_block_at,
    render_markdown,
    render_plain,
)
from specchat.gui.stats.stats_text import stats_summary

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

    def extend(self, reply: Reply, segments: Iterable[tuple[str, bool]]) -> None:
        """`reply`, streaming into this message, just took `segments` (one step's text by
        origin): they are appended as plain text, the draft's highlighted; the Markdown
        rendering catches up later. The text and its draft spans are the reply's."""
        self.text, self.spans = reply.text, reply.spans
        doc = self.body.document()
        for text, from_draft in segments:
            if text:
                append_text(doc, text, draft=from_draft and self.highlight, theme=self.theme)
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
