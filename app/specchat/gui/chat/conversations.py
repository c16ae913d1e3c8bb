"""The conversation list: search by title, new, rename, delete (with undo)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.state.history import History
from specchat.core.units import format_count

UNDO_MS = 10_000
POLL_MS = 1_500  # how often the list looks for changes made by another window


class ConversationList(QWidget):
    chosen = Signal(int)  # conversation id
    newRequested = Signal()
    deleted = Signal(int)  # a conversation was (soft-)deleted
    restored = Signal(int)

    def __init__(self, history: History, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversationList")
        self.history = history
        self.current: int | None = None
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search titles…")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.refresh)
        self.list = QListWidget()
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.itemClicked.connect(self._clicked)
        self.list.itemActivated.connect(self._clicked)
        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.newRequested)
        self.rename_button = QPushButton("Rename")
        self.rename_button.clicked.connect(self.rename_current)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self.delete_current)
        self.undo_label = QLabel()
        self.undo_button = QPushButton("Undo")
        self.undo_button.clicked.connect(self.undo_delete)
        self._undo_id: int | None = None
        self._undo_timer = QTimer(self)
        self._undo_timer.setSingleShot(True)
        self._undo_timer.setInterval(UNDO_MS)
        self._undo_timer.timeout.connect(self._hide_undo)

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        for b in (self.new_button, self.rename_button, self.delete_button):
            buttons.addWidget(b)
        undo = QHBoxLayout()
        undo.setContentsMargins(0, 0, 0, 0)
        undo.addWidget(self.undo_label, 1)
        undo.addWidget(self.undo_button)
        self._undo_row = QWidget()
        self._undo_row.setLayout(undo)
        self._undo_row.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(self.search)
        lay.addWidget(self.list, 1)
        lay.addWidget(self._undo_row)
        lay.addLayout(buttons)
        self.refresh()
        # Another window (or process) on the same database: show its new and renamed chats.
        self._poll = QTimer(self)
        self._poll.setInterval(POLL_MS)
        self._poll.timeout.connect(self.refresh_if_changed)
        self._poll.start()

    def refresh_if_changed(self) -> None:
        try:
            changed = self.history.changed_elsewhere()
        except Exception:  # a closed or failing database: the next action reports it
            return
        if changed:
            self.refresh()

    # -- listing ----------------------------------------------------------------------------
    def refresh(self) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for conv in self.history.conversations(self.search.text()):
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setToolTip(f"{conv.title}\n{format_count(conv.message_count, 'message')}")
            self.list.addItem(item)
            if conv.id == self.current:
                item.setSelected(True)
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        self._update_buttons()

    def set_current(self, conversation_id: int | None) -> None:
        self.current = (
            conversation_id if conversation_id is not None and conversation_id >= 0 else None
        )
        self.refresh()

    def ids(self) -> list[int]:
        return [
            int(self.list.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(self.list.count())
        ]

    def _clicked(self, item: QListWidgetItem) -> None:
        cid = int(item.data(Qt.ItemDataRole.UserRole))
        self.current = cid
        self.chosen.emit(cid)
        self._update_buttons()

    def _update_buttons(self) -> None:
        has = self.current is not None and self.current in self.ids()
        self.rename_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    # -- actions ----------------------------------------------------------------------------
    def rename_current(self) -> None:
        if self.current is None:
            return
        old = self.history.conversation(self.current).title
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=old)
        if ok and title.strip():
            self.rename(self.current, title)

    def rename(self, conversation_id: int, title: str) -> None:
        self.history.rename(conversation_id, title)
        self.refresh()

    def delete_current(self) -> None:
        if self.current is not None:
            self.delete(self.current)

    def delete(self, conversation_id: int) -> None:
        """Delete at once, with an Undo button for a few seconds."""
        title = self.history.conversation(conversation_id).title
        self.history.delete(conversation_id)
        self._undo_id = conversation_id
        self.undo_label.setText(f"Deleted “{title}”")
        self._undo_row.show()
        self._undo_timer.start()
        if self.current == conversation_id:
            self.current = None
        self.refresh()
        self.deleted.emit(conversation_id)

    def undo_delete(self) -> None:
        if self._undo_id is None:
            return
        cid, self._undo_id = self._undo_id, None
        self.history.restore(cid)
        self._hide_undo()
        self.refresh()
        self.restored.emit(cid)

    def _hide_undo(self) -> None:
        self._undo_row.hide()
        self._undo_id = None
