"""The manager's "Recommended pairs" tab: the catalog's target/draft pairs, installed or not."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from specchat.core.placement.memory_plan import MachineMemory
from specchat.core.placement.pairing import catalog_remote, recommended_pairs
from specchat.core.placement.suggestions import PairForDevice, pair_for_device, pair_need_gb
from specchat.core.store.catalog import Catalog
from specchat.core.store.store import ModelStore
from specchat.gui.widgets import button_row


class RecommendedPairsTab(QWidget):
    chosen = Signal(object, object)  # target, draft: RemoteModel (the pair box finds installed)

    def __init__(self, catalog: Catalog, store: ModelStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.catalog, self.store = catalog, store
        self.suggested: PairForDevice | None = None
        self.list = QListWidget()
        self.list.setSpacing(4)
        self.list.itemDoubleClicked.connect(lambda _item: self.use_current())
        use = QPushButton("Use this pair")
        use.clicked.connect(self.use_current)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        layout.addLayout(button_row(use, stretch_first=True))

    def set_machine(self, machine: MachineMemory) -> None:
        """Suggest the largest pair that fits this machine's GPU (listed first, selected)."""
        gpu = machine.vram_total is not None  # the backend lists a GPU: the build offloads
        self.suggested = pair_for_device(
            self.catalog,
            offload=gpu,
            vram_free=machine.vram_free,
            ram_available=machine.ram_available,
        )
        self.fill()

    def fill(self) -> None:
        self.list.clear()
        recs = recommended_pairs(self.catalog, self.store)
        best = self.suggested.pair.id if self.suggested is not None else None
        recs.sort(key=lambda r: r.pair.id != best)  # stable: the rest keep their order
        for rec in recs:
            mark = "✓ installed" if rec.installed else "not installed"
            need = pair_need_gb(self.catalog, rec.pair)
            vram = f" · {need:g} GB on a GPU" if need else " · GPU memory unknown"
            support = rec.support
            text = f"{rec.label} — {mark}{vram}\n[{support.label}] {rec.pair.note}"
            if self.suggested is not None and rec.pair.id == best:
                text = f"★ Suggested for this machine ({self.suggested.reason})\n{text}"
            item = QListWidgetItem(text)
            item.setToolTip(support.tooltip)
            item.setData(Qt.ItemDataRole.UserRole, rec)
            self.list.addItem(item)
        if best is not None and self.list.count():
            self.list.setCurrentRow(0)

    def use_current(self) -> None:
        item = self.list.currentItem() or self.list.item(0)
        if item is not None:
            rec = item.data(Qt.ItemDataRole.UserRole)
            draft = catalog_remote(rec.draft) if rec.draft is not None else None
            self.chosen.emit(catalog_remote(rec.target), draft)
