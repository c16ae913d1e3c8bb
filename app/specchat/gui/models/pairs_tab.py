"""The manager's "Recommended pairs" tab: the catalog's target/draft pairs, installed or not."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from ...core.models.catalog import Catalog
from ...core.models.pairing import catalog_remote, recommended_pairs
from ...core.models.store import ModelStore
from ..widgets import button_row


class RecommendedPairsTab(QWidget):
    chosen = Signal(object, object)  # target, draft: RemoteModel (the pair box finds installed)

    def __init__(self, catalog: Catalog, store: ModelStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.catalog, self.store = catalog, store
        self.list = QListWidget()
        self.list.setSpacing(4)
        self.list.itemDoubleClicked.connect(lambda _item: self.use_current())
        use = QPushButton("Use this pair")
        use.clicked.connect(self.use_current)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        layout.addLayout(button_row(use, stretch_first=True))

    def fill(self) -> None:
        self.list.clear()
        for rec in recommended_pairs(self.catalog, self.store):
            mark = "✓ installed" if rec.installed else "not installed"
            item = QListWidgetItem(f"{rec.label} — {mark}\n{rec.pair.note}")
            item.setData(Qt.ItemDataRole.UserRole, rec)
            self.list.addItem(item)

    def use_current(self) -> None:
        item = self.list.currentItem() or self.list.item(0)
        if item is not None:
            rec = item.data(Qt.ItemDataRole.UserRole)
            self.chosen.emit(catalog_remote(rec.target), catalog_remote(rec.draft))
