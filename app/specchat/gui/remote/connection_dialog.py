"""Servers → Manage servers…: add, edit, test and remove remote servers.

The list on the left is the saved servers (`ServerListModel`); the form on the right edits
one. "Test" asks the server what it is on a background thread (models, kind, how it
speculates) and fills the model choices; "Save" stores the server (its API key in the system
keyring, or for this session only when there is none: the line at the bottom says which);
"Use this server" asks the window to connect (`connectRequested(server_id)`).
"""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.engines.remote_connect import config_from_entry
from specchat.core.remote.config import RemoteConfig, ServerKind
from specchat.core.remote.probe import ServerInfo
from specchat.core.state.servers import ServerEntry, ServerStore
from specchat.gui.remote.server_list import ServerListModel
from specchat.gui.remote.threads import ProbeThread

__all__ = ["ConnectionDialog"]

PLACEHOLDER_URL = "http://127.0.0.1:8080"

W = TypeVar("W", bound=QWidget)


def _named(widget: W, name: str) -> W:
    """`widget` with an object name (tests and style sheets find widgets by it)."""
    widget.setObjectName(name)
    return widget


class ConnectionDialog(QDialog):
    serversChanged = Signal()
    connectRequested = Signal(str)  # server id
    testFinished = Signal(bool, str)  # ok, the message shown (tests and status bars read it)

    def __init__(self, store: ServerStore | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("connectionDialog")
        self.setWindowTitle("Remote servers")
        self.store = store or ServerStore()
        self.model = ServerListModel(self.store, self)
        self._current: str | None = None  # id of the server in the form (None: a new one)
        self._probe: ProbeThread | None = None
        self._build()
        self._select_row(0 if self.model.rowCount() else -1)

    # -- layout -----------------------------------------------------------------------------
    def _build(self) -> None:
        body = QHBoxLayout()
        body.addLayout(self._build_list(), 1)
        body.addLayout(self._build_form(), 2)
        self.keyring_label = _named(QLabel(self.store.secrets.describe()), "keyringLabel")
        self.keyring_label.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        outer = QVBoxLayout(self)
        outer.addLayout(body)
        outer.addWidget(self.keyring_label)
        outer.addWidget(buttons)
        self.resize(760, 460)

    def _build_list(self) -> QVBoxLayout:
        """The saved servers, with Add and Remove."""
        self.list = _named(QListView(), "serverList")
        self.list.setModel(self.model)
        self.list.setMinimumWidth(180)
        self.list.selectionModel().currentRowChanged.connect(
            lambda cur, _prev: self._load(self.model.entry(cur.row()))
        )
        self.add_button = _named(QPushButton("Add"), "addButton")
        self.remove_button = _named(QPushButton("Remove"), "removeButton")
        self.add_button.clicked.connect(self.new_server)
        self.remove_button.clicked.connect(self.remove_current)
        left = QVBoxLayout()
        left.addWidget(self.list)
        row = QHBoxLayout()
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        left.addLayout(row)
        return left

    def _build_form(self) -> QVBoxLayout:
        """The selected server's fields, then Test / Save / Use and the status line."""
        self.name_edit = _named(QLineEdit(), "nameEdit")
        self.url_edit = _named(QLineEdit(), "urlEdit")
        self.url_edit.setPlaceholderText(PLACEHOLDER_URL)
        self.kind_combo = _named(QComboBox(), "kindCombo")
        for kind in ServerKind:
            self.kind_combo.addItem(kind.label, kind.value)
        self.model_combo = _named(QComboBox(), "modelCombo")
        self.model_combo.setEditable(True)
        line = self.model_combo.lineEdit()
        if line is not None:
            line.setPlaceholderText("the server's default")
        self.key_edit = _named(QLineEdit(), "keyEdit")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.forget_key = _named(QCheckBox("Forget the saved key"), "forgetKey")
        self.off_combo = _named(QComboBox(), "offCombo")
        self.off_combo.setToolTip(
            "The same model served without speculation. Servers that decide speculation "
            "themselves need it for Off, Compare and the benchmark."
        )
        self.stream_check = _named(QCheckBox("Stream replies"), "streamCheck")
        self.stream_check.setToolTip(
            "SGLang sends its per-reply speculation figures only with whole (unstreamed) replies"
        )
        self.metrics_check = _named(QCheckBox("Read /metrics around each reply"), "metricsCheck")
        self.timeout_spin = _named(QDoubleSpinBox(), "timeoutSpin")
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setDecimals(0)
        self.timeout_spin.setRange(1, 3600)
        self.ca_edit = _named(QLineEdit(), "caEdit")
        self.ca_edit.setPlaceholderText("system trust store only")
        form = QFormLayout()
        form.addRow("Name", self.name_edit)
        form.addRow("URL", self.url_edit)
        form.addRow("Server", self.kind_combo)
        form.addRow("Model", self.model_combo)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key_edit)
        key_row.addWidget(self.forget_key)
        form.addRow("API key", key_row)
        form.addRow("Without speculation", self.off_combo)
        form.addRow("", self.stream_check)
        form.addRow("", self.metrics_check)
        form.addRow("Read timeout", self.timeout_spin)
        form.addRow("Extra CA file", self.ca_edit)
        box = QGroupBox("Server")
        box.setLayout(form)

        self.test_button = _named(QPushButton("Test"), "testButton")
        self.save_button = _named(QPushButton("Save"), "saveButton")
        self.use_button = _named(QPushButton("Use this server"), "useButton")
        self.test_button.clicked.connect(self.test_current)
        self.save_button.clicked.connect(self.save_current)
        self.use_button.clicked.connect(self._use)
        actions = QHBoxLayout()
        actions.addWidget(self.test_button)
        actions.addStretch(1)
        actions.addWidget(self.save_button)
        actions.addWidget(self.use_button)
        self.status_label = _named(QLabel(), "statusLabel")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right = QVBoxLayout()
        right.addWidget(box)
        right.addLayout(actions)
        right.addWidget(self.status_label)
        right.addStretch(1)
        return right

    # -- the form ---------------------------------------------------------------------------
    def _select_row(self, row: int) -> None:
        if row < 0:
            self.new_server()
            return
        idx = self.model.index(row)
        self.list.selectionModel().setCurrentIndex(
            idx, QItemSelectionModel.SelectionFlag.ClearAndSelect
        )
        self._load(self.model.entry(row))

    def _fill_off_choices(self, current: str | None, selected: str) -> None:
        self.off_combo.clear()
        self.off_combo.addItem("(none)", "")
        for e in self.store.entries():
            if e.id != current:
                self.off_combo.addItem(e.name, e.id)
        self.off_combo.setCurrentIndex(max(0, self.off_combo.findData(selected)))

    def _load(self, entry: ServerEntry | None) -> None:
        if entry is None:
            return
        self._current = entry.id
        self.name_edit.setText(entry.name)
        self.url_edit.setText(entry.base_url)
        self.kind_combo.setCurrentIndex(max(0, self.kind_combo.findData(entry.kind)))
        self.model_combo.clear()
        info = self.model.info(entry.id)
        if info is not None:
            self.model_combo.addItems(list(info.models))
        self.model_combo.setEditText(entry.model)
        self.key_edit.clear()
        self.key_edit.setPlaceholderText(
            "saved" + ("" if self.store.secrets.persistent else " for this session")
            if entry.has_key
            else "none"
        )
        self.forget_key.setChecked(False)
        self.forget_key.setEnabled(entry.has_key)
        self._fill_off_choices(entry.id, entry.off_server)
        self.stream_check.setChecked(entry.stream)
        self.metrics_check.setChecked(entry.use_metrics)
        self.timeout_spin.setValue(entry.read_timeout_s)
        self.ca_edit.setText(entry.ca_file)
        self.status_label.setText(self.model.status(entry.id))
        self.remove_button.setEnabled(True)
        self.use_button.setEnabled(True)

    def new_server(self) -> None:
        """An empty form; "Save" adds it to the list."""
        self._current = None
        self.list.clearSelection()
        for edit in (self.name_edit, self.url_edit, self.key_edit, self.ca_edit):
            edit.clear()
        self.key_edit.setPlaceholderText("optional")
        self.forget_key.setChecked(False)
        self.forget_key.setEnabled(False)
        self.kind_combo.setCurrentIndex(0)
        self.model_combo.clear()
        self._fill_off_choices(None, "")
        self.stream_check.setChecked(True)
        self.metrics_check.setChecked(True)
        self.timeout_spin.setValue(180)
        self.status_label.clear()
        self.remove_button.setEnabled(False)
        self.use_button.setEnabled(False)
        self.name_edit.setFocus()

    def _form_entry(self) -> ServerEntry:
        base = self.store.get(self._current) if self._current else None
        url = self.url_edit.text().strip()
        return ServerEntry(
            id=base.id if base else "new000",
            name=self.name_edit.text().strip() or url,
            base_url=url,
            model=self.model_combo.currentText().strip(),
            kind=str(self.kind_combo.currentData()),
            stream=self.stream_check.isChecked(),
            use_metrics=self.metrics_check.isChecked(),
            read_timeout_s=float(self.timeout_spin.value()),
            connect_timeout_s=base.connect_timeout_s if base else 10.0,
            ca_file=self.ca_edit.text().strip(),
            off_server=str(self.off_combo.currentData() or ""),
            has_key=bool(base and base.has_key),
        )

    def _form_config(self) -> RemoteConfig:
        """The form as a validated RemoteConfig (the typed key, else the saved one)."""
        entry = self._form_entry()
        key = self.key_edit.text().strip() or None
        if key is None and self._current and not self.forget_key.isChecked():
            key = self.store.api_key(self._current)
        return config_from_entry(entry, key)

    # -- actions ----------------------------------------------------------------------------
    def _show(self, ok: bool, text: str) -> None:
        self.status_label.setStyleSheet("" if ok else "color: #c0392b;")
        self.status_label.setText(text)

    def save_current(self) -> bool:
        try:
            config = self._form_config()
        except ValueError as exc:
            self._show(False, str(exc))
            return False
        entry = self._form_entry().with_(base_url=config.base_url)
        key = self.key_edit.text().strip() or None
        if self._current is None:
            fields = {
                k: v
                for k, v in entry.__dict__.items()
                if k not in ("id", "name", "base_url", "has_key")
            }
            saved = self.store.add(entry.name, entry.base_url, api_key=key, **fields)
        else:
            saved = self.store.update(entry, api_key=key, clear_key=self.forget_key.isChecked())
        self.model.reload()
        self._select_row(self.model.row_of(saved.id))
        self._show(True, f"Saved {saved.name}.")
        self.serversChanged.emit()
        return True

    def remove_current(self) -> None:
        if self._current is None:
            return
        row = self.model.row_of(self._current)
        self.store.remove(self._current)
        self.model.reload()
        self.serversChanged.emit()
        self._select_row(min(row, self.model.rowCount() - 1))

    def test_current(self) -> None:
        if self._probe is not None and self._probe.isRunning():
            return
        try:
            config = self._form_config()
        except ValueError as exc:
            self._show(False, str(exc))
            self.testFinished.emit(False, str(exc))
            return
        server_id = self._current
        self._show(True, f"Testing {config.base_url}…")
        self.test_button.setEnabled(False)
        probe = ProbeThread(config, self)
        probe.succeeded.connect(lambda info: self._tested(server_id, info))
        probe.failed.connect(lambda msg: self._test_failed(server_id, msg))
        probe.finished.connect(lambda: self.test_button.setEnabled(True))
        self._probe = probe
        probe.start()

    def _tested(self, server_id: str | None, info: ServerInfo) -> None:
        text = "Connected: " + info.summary()
        if info.speculates and not info.per_request:
            text += ". The server decides speculation: give its no-speculation twin to compare."
        if server_id is not None:
            self.model.set_status(server_id, True, text, info)
        if server_id == self._current:
            typed = self.model_combo.currentText()
            self.model_combo.clear()
            self.model_combo.addItems(list(info.models))
            self.model_combo.setEditText(typed or info.model)
            self._show(True, text)
        self.testFinished.emit(True, text)

    def _test_failed(self, server_id: str | None, message: str) -> None:
        if server_id is not None:
            self.model.set_status(server_id, False, message)
        if server_id == self._current:
            self._show(False, message)
        self.testFinished.emit(False, message)

    def _use(self) -> None:
        if self._current is not None and self.save_current() and self._current:
            self.connectRequested.emit(self._current)

    # -- closing ----------------------------------------------------------------------------
    def wait_for_threads(self, timeout_ms: int = 30_000) -> None:
        if self._probe is not None:
            self._probe.wait(timeout_ms)

    def done(self, result: int) -> None:
        self.wait_for_threads()
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.wait_for_threads()
        super().closeEvent(event)
