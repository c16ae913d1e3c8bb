"""The manager's "Find on the Hub" tab: search GGUF repositories, list a repository's models
with whether each fits this machine and what speeds each up (read from the GGUF headers before
anything downloads), and pick one as target or draft, or download it: a target with a drafter
file (an MTP sidecar ``mtp-*.gguf`` or a Gemma 4 assistant) is fetched with it in one click."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from PySide6.QtCore import Qt, Signal, SignalInstance
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from specchat.core.hub.client import HubClient, RemoteModel, RepoSummary
from specchat.core.placement.memory_plan import MachineMemory, file_fit
from specchat.core.placement.repo_drafters import RepoModels, inspect_repo
from specchat.core.store.catalog import Catalog
from specchat.core.units import format_bytes, format_count
from specchat.gui.models.common import BAD, FIT_TEXT, WARN, colored
from specchat.gui.threads.tasks import TaskRunner
from specchat.gui.widgets import button_row, selectable_label, setup_table

FIT_COLUMN = 3
SUPPORT_COLUMN = 4
DRAFTER_COLUMN = 5


class HubTab(QWidget):
    targetChosen = Signal(object)  # RemoteModel
    draftChosen = Signal(object)  # RemoteModel
    downloadRequested = Signal(object)  # RemoteModel
    pairDownloadRequested = Signal(object, object)  # target, its drafter file (RemoteModels)

    def __init__(
        self,
        hub: HubClient,
        tasks: TaskRunner,
        machine: Callable[[], MachineMemory],
        parent: QWidget | None = None,
        *,
        catalog: Catalog | None = None,
    ) -> None:
        super().__init__(parent)
        self.hub, self.tasks, self._machine = hub, tasks, machine
        self.catalog = catalog
        self.listing: RepoModels | None = None
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search GGUF models, e.g. qwen2.5 coder")
        self.search_edit.returnPressed.connect(self.search)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        self.status = selectable_label()
        self.results = QListWidget()
        self.results.setSpacing(2)
        self.results.currentItemChanged.connect(self._repo_chosen)
        self.files = QTableWidget(0, 6)
        self.files.setHorizontalHeaderLabels(
            ["File", "Quant", "Size", "Your machine", "Speeds up with", "Drafter"]
        )
        setup_table(self.files, stretch=(0,))
        self.files.itemSelectionChanged.connect(self._update_buttons)
        split = QSplitter()
        split.addWidget(self.results)
        split.addWidget(self.files)
        split.setSizes([320, 640])
        self.use_target_button = QPushButton("Use as target")
        self.use_draft_button = QPushButton("Use as draft")
        self.download_button = QPushButton("Download")
        self.use_target_button.clicked.connect(lambda: self._emit_selected(self.targetChosen))
        self.use_draft_button.clicked.connect(lambda: self._emit_selected(self.draftChosen))
        self.download_button.clicked.connect(self.download_selected)
        top = QHBoxLayout()
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.search_button)
        row = button_row(
            self.use_target_button, self.use_draft_button, self.download_button, stretch_first=True
        )
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(split, 1)
        layout.addLayout(row)
        self._update_buttons()

    def search(self, text: str | None = None) -> None:
        query = (text if isinstance(text, str) else self.search_edit.text()).strip()
        self.search_edit.setText(query)
        self.status.setText(f"Searching for “{escape(query)}”…")
        self.search_button.setEnabled(False)
        self.results.clear()
        self.files.setRowCount(0)

        def found(repos: list[RepoSummary]) -> None:
            self.search_button.setEnabled(True)
            for r in repos:
                downloads = format_count(r.downloads, "download") if r.downloads is not None else ""
                item = QListWidgetItem(f"{r.repo_id}\n{downloads}")
                item.setData(Qt.ItemDataRole.UserRole, r.repo_id)
                self.results.addItem(item)
            n = len(repos)
            self.status.setText(f"{n} repo{'s' * (n != 1)} found" if n else "Nothing found")

        def failed(message: str) -> None:
            self.search_button.setEnabled(True)
            self.status.setText(colored(message, BAD))

        self.tasks.run("search", lambda: self.hub.search(query), found, failed)

    def _repo_chosen(self, item: QListWidgetItem | None, _previous: object = None) -> None:
        if item is not None:
            self.show_repo(item.data(Qt.ItemDataRole.UserRole))

    def show_repo(self, repo_id: str) -> None:
        self.files.setRowCount(0)
        self.status.setText(f"Listing the files of {escape(repo_id)}…")

        def listed(listing: RepoModels) -> None:
            self.listing = listing
            models = listing.models
            self.files.setRowCount(len(models))
            for row, m in enumerate(models):
                fit = file_fit(m.with_size, self._machine())
                fit_text, color = FIT_TEXT.get(fit or "", ("?", WARN))
                support = listing.label(m)
                drafter = m.drafter
                d_text = f"{drafter.name} ({format_bytes(drafter.size)})" if drafter else ""
                cells = (
                    m.display_name,
                    m.quant or "?",
                    format_bytes(m.size),
                    fit_text,
                    support.label if support is not None else "?",
                    d_text,
                )
                for column, text in enumerate(cells):
                    cell = QTableWidgetItem(text)
                    cell.setData(Qt.ItemDataRole.UserRole, m)
                    if column == FIT_COLUMN:
                        cell.setForeground(QColor(color))
                        cell.setToolTip(self._fit_tooltip(m.with_size))
                    elif column == SUPPORT_COLUMN and support is not None:
                        cell.setToolTip(support.tooltip)
                    elif column == DRAFTER_COLUMN and drafter is not None:
                        what = drafter.kind.label if drafter.kind else "drafter"
                        cell.setToolTip(f"{what}, from {drafter.repo_id}: fetched with the model")
                    self.files.setItem(row, column, cell)
            text = escape(f"{repo_id}: {len(models)} GGUF model(s)")
            for note in listing.notes:
                text += "<br>" + colored(note, WARN, "⚠ ")
            self.status.setText(text)
            self._update_buttons()

        def failed(message: str) -> None:
            self.status.setText(colored(message, BAD))

        catalog, hub = self.catalog, self.hub
        self.tasks.run("files", lambda: inspect_repo(hub, repo_id, catalog), listed, failed)

    def _fit_tooltip(self, size: int | None) -> str:
        machine = self._machine()
        ram = format_bytes(machine.ram_available)
        vram = machine.vram_free
        gpu = f", {format_bytes(vram)} free VRAM" if vram is not None else ""
        return f"{format_bytes(size)} file; {ram} RAM available{gpu} (estimate at 4k context)"

    def selected_remote(self) -> RemoteModel | None:
        items = self.files.selectedItems()
        return items[0].data(Qt.ItemDataRole.UserRole) if items else None

    def _update_buttons(self) -> None:
        selected = self.selected_remote()
        chosen = selected is not None
        for b in (self.use_target_button, self.use_draft_button, self.download_button):
            b.setEnabled(chosen)
        paired = selected is not None and self._runnable_drafter(selected) is not None
        self.download_button.setText("Download with its drafter" if paired else "Download")

    @staticmethod
    def _runnable_drafter(model: RemoteModel) -> RemoteModel | None:
        d = model.drafter
        return d if d is not None and d.kind is not None and d.kind.runs_in_specchat else None

    def download_selected(self) -> None:
        """Download the selected model; with its drafter file when it has one SpecChat runs."""
        m = self.selected_remote()
        if m is None:
            return
        drafter = self._runnable_drafter(m)
        if drafter is not None:
            self.pairDownloadRequested.emit(m, drafter)
        else:
            self.downloadRequested.emit(m)

    def _emit_selected(self, signal: SignalInstance) -> None:
        m = self.selected_remote()
        if m is not None:
            signal.emit(m)
