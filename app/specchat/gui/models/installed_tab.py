"""The manager's "Installed" tab: installed models and downloads in one table (read from the
`ModelListModel`), with import, resume, cancel and delete."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QMessageBox,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from specchat.core.gguf.drafters import drafter_note
from specchat.core.store.importing import import_model
from specchat.core.store.store import InstalledModel, ModelStore, PartialDownload
from specchat.gui.models.common import BAD, colored
from specchat.gui.models.list_model import (
    DOWNLOADING,
    FAILED,
    PAUSED,
    ModelListModel,
    ProgressDelegate,
)
from specchat.gui.threads.downloads import DownloadManager
from specchat.gui.threads.tasks import TaskRunner
from specchat.gui.widgets import button_row, selectable_label, setup_table


class InstalledTab(QWidget):
    listingChanged = Signal()  # the installed models may have changed

    def __init__(
        self,
        models: ModelListModel,
        downloads: DownloadManager,
        store: ModelStore,
        tasks: TaskRunner,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.models, self.downloads, self.store, self.tasks = models, downloads, store, tasks
        view = QTableView()
        view.setModel(models)
        view.setItemDelegate(ProgressDelegate(view))
        setup_table(view, stretch=(0, ModelListModel.STATUS_COLUMN))
        view.selectionModel().selectionChanged.connect(self._update_buttons)
        self.view = view
        self.import_button = QPushButton("Import file…")
        self.resume_button = QPushButton("Resume")
        self.cancel_button = QPushButton("Cancel download")
        self.delete_button = QPushButton("Delete")
        self.import_button.clicked.connect(self._ask_import)
        self.resume_button.clicked.connect(lambda: self._on_selected(downloads.resume))
        self.cancel_button.clicked.connect(lambda: self._on_selected(downloads.cancel))
        self.delete_button.clicked.connect(self._ask_delete)
        row = button_row(
            self.import_button, self.resume_button, self.cancel_button, self.delete_button
        )
        self.status = selectable_label(f"Model folder: {store.root}")
        layout = QVBoxLayout(self)
        layout.addWidget(view)
        layout.addLayout(row)
        layout.addWidget(self.status)
        downloads.message.connect(self.status.setText)
        models.dataChanged.connect(self._update_buttons)
        models.modelReset.connect(self._update_buttons)
        self._update_buttons()

    def reload(self) -> None:
        """Re-read the store on a worker thread (GGUF headers are parsed there), then refresh
        the list (running downloads stay)."""
        store = self.store

        def listed(result: tuple[list[InstalledModel], list[PartialDownload]]) -> None:
            self.models.set_listing(*result)
            self.listingChanged.emit()

        def failed(message: str) -> None:
            self.status.setText(colored(f"Cannot read {store.root}: {message}", BAD))

        self.tasks.run(
            "reload", lambda: (store.models(), store.partial_downloads()), listed, failed
        )

    def selected_key(self) -> str | None:
        rows = self.view.selectionModel().selectedRows()
        return rows[0].data(ModelListModel.KeyRole) if rows else None

    def select(self, key: str) -> None:
        row = self.models.row_of(key)
        if row is not None:
            self.view.selectRow(row)

    def _on_selected(self, action: Callable[[str], object]) -> None:
        key = self.selected_key()
        if key is not None:
            action(key)
        self._update_buttons()

    def _update_buttons(self, *_: object) -> None:
        key = self.selected_key()
        e = self.models.entry(key) if key else None
        state = e.state if e else None
        self.resume_button.setEnabled(
            state in (PAUSED, FAILED) and e is not None and bool(e.source)
        )
        self.cancel_button.setEnabled(state == DOWNLOADING)
        self.delete_button.setEnabled(e is not None and state != DOWNLOADING)

    def _ask_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", "", "GGUF (*.gguf)")
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path) -> None:
        """Validate and copy a local GGUF into the store (off the GUI thread)."""
        self.status.setText(f"Importing {path.name}…")

        def imported(model: InstalledModel) -> None:
            note = drafter_note(model.info) if model.info is not None else None
            self.status.setText(f"Imported {path.name}" + (f". {note}" if note else ""))
            self.reload()

        def failed(message: str) -> None:
            self.status.setText(colored(message, BAD))

        self.tasks.run("import", lambda: import_model(self.store, path), imported, failed)

    def _ask_delete(self) -> None:
        key = self.selected_key()
        if key is None:
            return
        answer = QMessageBox.question(self, "Delete model", f"Delete {key} from the disk?")
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_model(key)

    def delete_model(self, key: str) -> None:
        if self.downloads.is_running(key):
            self.status.setText(f"{key} is downloading; cancel it first")
            return
        self.store.delete(key)
        self.models.remove(key)
        self.status.setText(f"Deleted {key}")
        self.listingChanged.emit()
