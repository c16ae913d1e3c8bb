"""Shared widgets and layout helpers: the in-window message banner, selectable labels, button
rows and table set-up."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableView,
    QToolButton,
    QWidget,
)


class Banner(QFrame):
    """A dismissible message above the chat (errors, first-run help): never a modal box."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.label.setOpenExternalLinks(True)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 6, 6)
        lay.addWidget(self.label, 1)
        lay.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.kind = ""
        self.hide()

    def show_message(self, html: str, kind: str = "info") -> None:
        self.kind = kind
        self.setProperty("kind", kind)
        self.style().unpolish(self)
        self.style().polish(self)
        self.label.setText(html)
        self.show()

    def text(self) -> str:
        return self.label.text()


def selectable_label(text: str = "", *, wrap: bool = True) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def button_row(*widgets: QWidget, stretch_first: bool = False) -> QHBoxLayout:
    """The widgets side by side, pushed to the left (or, with `stretch_first`, the right)."""
    row = QHBoxLayout()
    if stretch_first:
        row.addStretch(1)
    for w in widgets:
        row.addWidget(w)
    if not stretch_first:
        row.addStretch(1)
    return row


def setup_table(view: QTableView, stretch: tuple[int, ...]) -> None:
    """Whole-row single selection, no row numbers; ``stretch`` columns share the width."""
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.verticalHeader().hide()
    header = view.horizontalHeader()
    for column in range(header.count()):
        stretches = column in stretch
        mode = (
            QHeaderView.ResizeMode.Stretch if stretches else QHeaderView.ResizeMode.ResizeToContents
        )
        header.setSectionResizeMode(column, mode)
