"""The model manager dialog: find models on the Hub, download them, manage the installed ones,
and choose a target/draft pair with its compatibility verdict and memory plan shown before
anything is downloaded.

The main window opens it with ``ModelManagerDialog(parent)`` and listens to
``pairChosen(target_path, draft_path_or_empty)``. All network and disk work runs on QThreads;
what is installed or downloading lives in one `ModelListModel` (see `model_list`).
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QThread, Signal, Slot
from PySide6.QtGui import QColor, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..core.models.catalog import Catalog, CatalogModel, load_catalog
from ..core.models.download import Downloader
from ..core.models.hub import HubClient, RemoteModel, RepoSummary
from ..core.models.memory_plan import Fit, MachineMemory, file_fit, machine_memory
from ..core.models.pairing import (
    DraftSuggestion,
    HubRef,
    LocalRef,
    ModelRef,
    PairReport,
    catalog_remote,
    inspect_pair,
    pick_model,
    recommended_pairs,
    repo_hint,
    suggest_drafts,
)
from ..core.models.store import InstalledModel, ModelStore, PartialDownload
from .model_list import (
    DOWNLOADING,
    FAILED,
    PAUSED,
    DownloadManager,
    ModelListModel,
    ProgressDelegate,
    TaskRunner,
    human_size,
)

GOOD, BAD, WARN = "#1a7f37", "#cf222e", "#9a6700"
_FIT_TEXT = {Fit.FITS: ("fits", GOOD), Fit.TIGHT: ("tight", WARN), Fit.TOO_BIG: ("too big", BAD)}
Choice = Path | RemoteModel  # an installed file, or a model on the Hub


def _ref(choice: Choice) -> ModelRef:
    if isinstance(choice, Path):
        return LocalRef(choice)
    return HubRef(choice.repo_id, choice.first.path, choice.revision)


def _label(text: str = "", *, wrap: bool = True) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _colored(text: str, color: str, mark: str = "") -> str:
    return f"<span style='color:{color}'>{mark}{escape(text)}</span>"


def _find(combo: QComboBox, data: object) -> int:
    """Index of the item whose data equals ``data`` (findData compares Python objects by
    identity), or -1."""
    return next((i for i in range(combo.count()) if combo.itemData(i) == data), -1)


def _row(*widgets: QWidget, stretch_first: bool = False) -> QHBoxLayout:
    row = QHBoxLayout()
    if stretch_first:
        row.addStretch(1)
    for w in widgets:
        row.addWidget(w)
    if not stretch_first:
        row.addStretch(1)
    return row


def _setup_table(view: QTableView, stretch: tuple[int, ...]) -> None:
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


class ModelManagerDialog(QDialog):
    """Search, download, import and delete models; choose the pair to load."""

    pairChosen = Signal(str, str)  # target path, draft path or ""

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        store: ModelStore | None = None,
        hub: HubClient | None = None,
        catalog: Catalog | None = None,
        downloader: Downloader | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(980, 720)
        self.store = store or ModelStore()
        self.hub = hub or HubClient()
        self.catalog = catalog or load_catalog()
        self.machine: MachineMemory = machine_memory(probe_gpu=False)
        self.models = ModelListModel(self)
        downloader = downloader or Downloader(self.store, self.hub, catalog=self.catalog)
        self.downloads = DownloadManager(self.models, self.store, downloader, self)
        self.tasks = TaskRunner(self)
        self._check: PairReport | None = None
        self._checked_pair: tuple[Choice | None, Choice | None] | None = None
        self._load_confirmed = False

        tabs = QTabWidget()
        tabs.addTab(self._build_installed_tab(), "Installed")
        tabs.addTab(self._build_hub_tab(), "Find on the Hub")
        tabs.addTab(self._build_pairs_tab(), "Recommended pairs")
        self.tabs = tabs
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs, 1)
        layout.addWidget(self._build_pair_box())
        layout.addWidget(buttons)

        self.downloads.message.connect(self.installed_status.setText)
        self.downloads.changed.connect(self._refresh_choosers)
        self.models.dataChanged.connect(self._update_buttons)
        self.models.modelReset.connect(self._update_buttons)
        self._update_buttons()
        self.reload()
        self.tasks.run("machine", lambda: machine_memory(probe_gpu=True), self._machine_known)
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    # -- threads ------------------------------------------------------------------------------
    def running_threads(self) -> list[QThread]:
        """Task and download threads still running (for shutdown and tests)."""
        threads: list[QThread] = [*self.tasks.threads(), *self.downloads.threads()]
        return [t for t in threads if t.isRunning()]

    def shutdown(self) -> None:
        """Cancel downloads (their partial files stay, to resume) and wait for every thread.

        Closing the dialog does not stop downloads: they go on (the main window keeps the
        dialog and shows it again). This runs when the application quits.
        """
        self.downloads.shutdown()
        self.tasks.wait_all()

    def showEvent(self, event: QShowEvent) -> None:
        self.reload()  # the store may have changed while the dialog was hidden
        super().showEvent(event)

    @Slot(object)
    def _machine_known(self, machine: MachineMemory) -> None:
        self.machine = machine
        self._show_check()

    # -- installed tab --------------------------------------------------------------------------
    def _build_installed_tab(self) -> QWidget:
        view = QTableView()
        view.setModel(self.models)
        view.setItemDelegate(ProgressDelegate(view))
        _setup_table(view, stretch=(0, ModelListModel.STATUS_COLUMN))
        view.selectionModel().selectionChanged.connect(self._update_buttons)
        self.installed_view = view
        self.import_button = QPushButton("Import file…")
        self.resume_button = QPushButton("Resume")
        self.cancel_button = QPushButton("Cancel download")
        self.delete_button = QPushButton("Delete")
        self.import_button.clicked.connect(self._ask_import)
        self.resume_button.clicked.connect(lambda: self._on_selected(self.downloads.resume))
        self.cancel_button.clicked.connect(lambda: self._on_selected(self.downloads.cancel))
        self.delete_button.clicked.connect(self._ask_delete)
        row = _row(self.import_button, self.resume_button, self.cancel_button, self.delete_button)
        self.installed_status = _label(f"Model folder: {self.store.root}")
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.addWidget(view)
        layout.addLayout(row)
        layout.addWidget(self.installed_status)
        return page

    def reload(self) -> None:
        """Re-read the store on a worker thread (GGUF headers are parsed there), then refresh
        the list (running downloads stay) and what depends on it."""
        store = self.store

        def listed(result: tuple[list[InstalledModel], list[PartialDownload]]) -> None:
            self.models.set_listing(*result)
            self._refresh_choosers()

        def failed(message: str) -> None:
            self.installed_status.setText(_colored(f"Cannot read {store.root}: {message}", BAD))

        self.tasks.run(
            "reload", lambda: (store.models(), store.partial_downloads()), listed, failed
        )

    def selected_key(self) -> str | None:
        rows = self.installed_view.selectionModel().selectedRows()
        return rows[0].data(ModelListModel.KeyRole) if rows else None

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
        self.installed_status.setText(f"Importing {path.name}…")

        def imported(model: object) -> None:
            self.installed_status.setText(f"Imported {path.name}")
            self.reload()

        def failed(message: str) -> None:
            self.installed_status.setText(_colored(message, BAD))

        self.tasks.run("import", lambda: self.store.import_file(path), imported, failed)

    def _ask_delete(self) -> None:
        key = self.selected_key()
        if key is None:
            return
        answer = QMessageBox.question(self, "Delete model", f"Delete {key} from the disk?")
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_model(key)

    def delete_model(self, key: str) -> None:
        if self.downloads.is_running(key):
            self.installed_status.setText(f"{key} is downloading; cancel it first")
            return
        self.store.delete(key)
        self.models.remove(key)
        self.installed_status.setText(f"Deleted {key}")
        self._refresh_choosers()

    # -- Hub tab --------------------------------------------------------------------------------
    def _build_hub_tab(self) -> QWidget:
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search GGUF models, e.g. qwen2.5 coder")
        self.search_edit.returnPressed.connect(self.search)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        self.hub_status = _label()
        self.results = QListWidget()
        self.results.setSpacing(2)
        self.results.currentItemChanged.connect(self._repo_chosen)
        self.files = QTableWidget(0, 4)
        self.files.setHorizontalHeaderLabels(["File", "Quant", "Size", "Your machine"])
        _setup_table(self.files, stretch=(0,))
        self.files.itemSelectionChanged.connect(self._update_hub_buttons)
        split = QSplitter()
        split.addWidget(self.results)
        split.addWidget(self.files)
        split.setSizes([320, 640])
        self.use_target_button = QPushButton("Use as target")
        self.use_draft_button = QPushButton("Use as draft")
        self.download_button = QPushButton("Download")
        self.use_target_button.clicked.connect(lambda: self._use_file(target=True))
        self.use_draft_button.clicked.connect(lambda: self._use_file(target=False))
        self.download_button.clicked.connect(self._download_file)
        top = QHBoxLayout()
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.search_button)
        row = _row(
            self.use_target_button, self.use_draft_button, self.download_button, stretch_first=True
        )
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.addLayout(top)
        layout.addWidget(self.hub_status)
        layout.addWidget(split, 1)
        layout.addLayout(row)
        self._update_hub_buttons()
        return page

    def search(self, text: str | None = None) -> None:
        query = (text if isinstance(text, str) else self.search_edit.text()).strip()
        self.search_edit.setText(query)
        self.hub_status.setText(f"Searching for “{escape(query)}”…")
        self.search_button.setEnabled(False)
        self.results.clear()
        self.files.setRowCount(0)

        def found(repos: list[RepoSummary]) -> None:
            self.search_button.setEnabled(True)
            for r in repos:
                downloads = f"{r.downloads:,} downloads" if r.downloads is not None else ""
                item = QListWidgetItem(f"{r.repo_id}\n{downloads}")
                item.setData(Qt.ItemDataRole.UserRole, r.repo_id)
                self.results.addItem(item)
            n = len(repos)
            self.hub_status.setText(f"{n} repo{'s' * (n != 1)} found" if n else "Nothing found")

        def failed(message: str) -> None:
            self.search_button.setEnabled(True)
            self.hub_status.setText(_colored(message, BAD))

        self.tasks.run("search", lambda: self.hub.search(query), found, failed)

    def _repo_chosen(self, item: QListWidgetItem | None, _previous: object = None) -> None:
        if item is not None:
            self.show_repo(item.data(Qt.ItemDataRole.UserRole))

    def show_repo(self, repo_id: str) -> None:
        self.files.setRowCount(0)
        self.hub_status.setText(f"Listing the files of {escape(repo_id)}…")

        def listed(models: list[RemoteModel]) -> None:
            self.files.setRowCount(len(models))
            for row, m in enumerate(models):
                fit = file_fit(m.size, self.machine)
                fit_text, color = _FIT_TEXT.get(fit or "", ("?", WARN))
                cells = (m.display_name, m.quant or "?", human_size(m.size), fit_text)
                for column, text in enumerate(cells):
                    cell = QTableWidgetItem(text)
                    cell.setData(Qt.ItemDataRole.UserRole, m)
                    if column == 3:
                        cell.setForeground(QColor(color))
                        cell.setToolTip(self._fit_tooltip(m.size))
                    self.files.setItem(row, column, cell)
            self.hub_status.setText(f"{repo_id}: {len(models)} GGUF model(s)")
            self._update_hub_buttons()

        def failed(message: str) -> None:
            self.hub_status.setText(_colored(message, BAD))

        self.tasks.run("files", lambda: self.hub.list_models(repo_id), listed, failed)

    def _fit_tooltip(self, size: int | None) -> str:
        ram = human_size(self.machine.ram_available)
        vram = self.machine.vram_free
        gpu = f", {human_size(vram)} free VRAM" if vram is not None else ""
        return f"{human_size(size)} file; {ram} RAM available{gpu} (estimate at 4k context)"

    def selected_remote(self) -> RemoteModel | None:
        items = self.files.selectedItems()
        return items[0].data(Qt.ItemDataRole.UserRole) if items else None

    def _update_hub_buttons(self) -> None:
        chosen = self.selected_remote() is not None
        for b in (self.use_target_button, self.use_draft_button, self.download_button):
            b.setEnabled(chosen)

    def _use_file(self, *, target: bool) -> None:
        m = self.selected_remote()
        if m is not None:
            (self.set_target if target else self.set_draft)(m)

    def _download_file(self) -> None:
        m = self.selected_remote()
        if m is not None:
            self.download(m)

    def download(self, model: RemoteModel) -> str | None:
        key = self.downloads.start(model)
        if key is not None:
            self.tabs.setCurrentIndex(0)
            row = self.models.row_of(key)
            if row is not None:
                self.installed_view.selectRow(row)
        return key

    # -- recommended pairs tab ------------------------------------------------------------------
    def _build_pairs_tab(self) -> QWidget:
        self.pairs_list = QListWidget()
        self.pairs_list.setSpacing(4)
        self.pairs_list.itemDoubleClicked.connect(lambda _item: self._use_recommended())
        use = QPushButton("Use this pair")
        use.clicked.connect(self._use_recommended)
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.addWidget(self.pairs_list)
        layout.addLayout(_row(use, stretch_first=True))
        return page

    def _fill_pairs(self) -> None:
        self.pairs_list.clear()
        for rec in recommended_pairs(self.catalog, self.store):
            mark = "✓ installed" if rec.installed else "not installed"
            item = QListWidgetItem(f"{rec.label} — {mark}\n{rec.pair.note}")
            item.setData(Qt.ItemDataRole.UserRole, rec)
            self.pairs_list.addItem(item)

    def _use_recommended(self) -> None:
        item = self.pairs_list.currentItem() or self.pairs_list.item(0)
        if item is None:
            return
        rec = item.data(Qt.ItemDataRole.UserRole)
        self.set_target(catalog_remote(rec.target), check=False)  # installed ones become paths
        self.set_draft(catalog_remote(rec.draft))

    # -- pair box -------------------------------------------------------------------------------
    def _build_pair_box(self) -> QGroupBox:
        box = QGroupBox("Pair to load")
        self.target_combo = QComboBox()
        self.draft_combo = QComboBox()
        for combo in (self.target_combo, self.draft_combo):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            combo.currentIndexChanged.connect(self._pair_changed)
        self.target_combo.currentIndexChanged.connect(self._suggest)
        self.ctx_spin = QSpinBox()
        self.ctx_spin.setRange(512, 131072)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setValue(4096)
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.valueChanged.connect(self._show_check)
        self.suggestions = QComboBox()
        self.suggestions.setPlaceholderText("choose a target first")
        self.suggest_button = QPushButton("Use as draft")
        self.suggest_button.clicked.connect(self._use_suggestion)
        suggest_row = QHBoxLayout()
        suggest_row.addWidget(self.suggestions, 1)
        suggest_row.addWidget(self.suggest_button)
        self.verdict_label = _label("Choose a target and a draft.")
        self.memory_label = _label()
        self.download_pair_button = QPushButton("Download missing")
        self.download_pair_button.clicked.connect(self.download_pair)
        self.load_button = QPushButton("Load pair")
        self.load_button.setDefault(True)
        self.load_button.clicked.connect(self.load_pair)
        form = QFormLayout()
        form.addRow("Target:", self.target_combo)
        form.addRow("Draft:", self.draft_combo)
        form.addRow("Suggested drafts:", suggest_row)
        form.addRow("Context:", self.ctx_spin)
        form.addRow("Compatibility:", self.verdict_label)
        form.addRow("Memory:", self.memory_label)
        layout = QVBoxLayout(box)
        layout.addLayout(form)
        layout.addLayout(_row(self.download_pair_button, self.load_button, stretch_first=True))
        return box

    def _refresh_choosers(self) -> None:
        """Rebuild the target/draft lists from the model list, keeping Hub picks (a Hub pick
        that has been downloaded meanwhile becomes the installed file)."""
        self._fill_pairs()
        installed = [e.path for e in self.models.installed() if e.path is not None]
        old_target = self.target_combo.currentData()
        first_fill = old_target is None
        default = [self.store.path_for(m.file) for m in self._default_pair_models()]
        for combo, none_text in ((self.target_combo, None), (self.draft_combo, "(no draft)")):
            current = combo.currentData()
            if first_fill and len(default) == 2 and all(p in installed for p in default):
                current = default[0] if combo is self.target_combo else default[1]
            hub_items = [
                combo.itemData(i)
                for i in range(combo.count())
                if isinstance(combo.itemData(i), RemoteModel)
                and self.store.path_for(combo.itemData(i).name) not in installed
            ]
            combo.blockSignals(True)
            combo.clear()
            if none_text:
                combo.addItem(none_text, None)
            for path in installed:
                combo.addItem(f"{path.name} (installed)", path)
            for m in hub_items:
                combo.addItem(f"{m.name} — {m.repo_id} (Hub)", m)
            if isinstance(current, RemoteModel) and current not in hub_items:
                current = self.store.path_for(current.name)  # it has been downloaded
            combo.setCurrentIndex(max(0, _find(combo, current)))
            combo.blockSignals(False)
        if self.target_combo.currentData() != old_target:
            self._suggest()
        self._pair_changed()

    def _default_pair_models(self) -> list[CatalogModel]:
        try:
            return list(self.catalog.pair_models(self.catalog.default_pair()))
        except (KeyError, StopIteration):
            return []

    def _choose(self, combo: QComboBox, choice: Choice | None) -> None:
        if isinstance(choice, RemoteModel) and self.store.path_for(choice.name).is_file():
            choice = self.store.path_for(choice.name)
        index = _find(combo, choice)
        if index < 0 and isinstance(choice, RemoteModel):
            combo.addItem(f"{choice.name} — {choice.repo_id} (Hub)", choice)
            index = combo.count() - 1
        combo.blockSignals(True)
        combo.setCurrentIndex(max(0, index))
        combo.blockSignals(False)

    def set_target(self, choice: Choice, *, check: bool = True) -> None:
        """Make ``choice`` the target (an installed file or a Hub model)."""
        self._choose(self.target_combo, choice)
        self._suggest()
        if check:
            self._pair_changed()

    def set_draft(self, choice: Choice | None) -> None:
        """Make ``choice`` the draft (None: no draft) and check the pair."""
        self._choose(self.draft_combo, choice)
        self._pair_changed()

    def current_pair(self) -> tuple[Choice | None, Choice | None]:
        return self.target_combo.currentData(), self.draft_combo.currentData()

    def _pair_changed(self, *_: object) -> None:
        """Check the chosen pair again, unless it is the pair checked last."""
        target, draft = self.current_pair()
        if (target, draft) == self._checked_pair:
            self._update_pair_buttons()
            return
        self._checked_pair = (target, draft)
        self._check = None
        self._load_confirmed = False
        self.memory_label.clear()
        if target is None:
            self.verdict_label.setText("Choose a target (install one, or pick one on the Hub).")
            self._update_pair_buttons()
            return
        self.verdict_label.setText("Reading the model headers…")
        sizes = (self._size_of(target), self._size_of(draft) if draft is not None else None)
        t_ref, d_ref = _ref(target), (_ref(draft) if draft is not None else None)
        hub, n_ctx, machine = self.hub, self.ctx_spin.value(), self.machine

        def check() -> PairReport:
            return inspect_pair(t_ref, d_ref, n_ctx=n_ctx, sizes=sizes, machine=machine, hub=hub)

        def checked(report: PairReport) -> None:
            self._check = report
            self._show_check()

        def failed(message: str) -> None:
            self._checked_pair = None  # try again next time
            self.verdict_label.setText(_colored(f"Cannot check: {message}", BAD))
            self._update_pair_buttons()

        self.tasks.run("verdict", check, checked, failed)
        self._update_pair_buttons()

    def _size_of(self, choice: Choice) -> int | None:
        if isinstance(choice, RemoteModel):
            return choice.size
        entry = self.models.entry(choice.name)
        return entry.total if entry else None

    def _show_check(self, *_: object) -> None:
        c = self._check
        if c is None:
            return
        if c.verdict is None:
            self.verdict_label.setText("No draft: plain decoding, no speed-up.")
        else:
            color, mark = (GOOD, "✓ ") if c.verdict.ok else (BAD, "✗ ")
            self.verdict_label.setText(_colored(c.verdict.message, color, mark))
        c = self._check = c.replan(self.ctx_spin.value(), self.machine)
        fit_text, color = _FIT_TEXT[c.plan.fit]
        self.memory_label.setText(_colored(f"{fit_text}: {c.plan.summary()}", color))
        self._update_pair_buttons()

    def _update_pair_buttons(self) -> None:
        target, draft = self.current_pair()
        missing = [c for c in (target, draft) if isinstance(c, RemoteModel)]
        self.download_pair_button.setEnabled(bool(missing))
        c = self._check
        local = isinstance(target, Path) and (draft is None or isinstance(draft, Path))
        self.load_button.setEnabled(local and c is not None and c.ok)
        too_big = c is not None and not c.plan.fits
        self.load_button.setText("Load anyway" if too_big and self._load_confirmed else "Load pair")

    def download_pair(self) -> None:
        for choice in self.current_pair():
            if isinstance(choice, RemoteModel):
                self.download(choice)

    def load_pair(self) -> None:
        """Emit ``pairChosen`` for an installed, compatible pair (warn once if it won't fit)."""
        target, draft = self.current_pair()
        c = self._check
        if (
            not isinstance(target, Path)
            or c is None
            or (c.verdict is not None and not c.verdict.ok)
        ):
            return
        if not c.plan.fits and not self._load_confirmed:
            self._load_confirmed = True
            self.memory_label.setText(
                _colored("This pair will probably not fit: " + " ".join(c.plan.warnings), BAD)
                + "<br>Press “Load anyway” to try regardless."
            )
            self._update_pair_buttons()
            return
        self.pairChosen.emit(str(target), str(draft) if isinstance(draft, Path) else "")
        self.accept()

    # -- draft suggestions ----------------------------------------------------------------------
    def _suggest(self, *_: object) -> None:
        """Fill the suggested drafts for the current target (catalog first, then the Hub)."""
        target = self.target_combo.currentData()
        self.suggestions.clear()
        if target is None:
            return
        catalog, hub, store = self.catalog, self.hub, self.store

        def find() -> list[DraftSuggestion]:
            if isinstance(target, RemoteModel):
                repo = target.repo_id
            else:
                repo = repo_hint(target, catalog, store)
            return suggest_drafts(repo, catalog, hub, target_file=target.name)

        def shown(found: list[DraftSuggestion]) -> None:
            self.suggestions.clear()
            for s in found:
                self.suggestions.addItem(s.label, s)
            self.suggestions.setPlaceholderText("none found")
            self.suggestions.setCurrentIndex(0 if found else -1)

        self.tasks.run("suggest", find, shown)

    def _use_suggestion(self) -> None:
        s: DraftSuggestion | None = self.suggestions.currentData()
        if s is None:
            return
        if s.filename is not None:
            path = self.store.path_for(s.filename)
            cat = self.catalog.models.get(s.catalog_id or "")
            self.set_draft(catalog_remote(cat) if cat else path)
            return
        self.verdict_label.setText(f"Listing the files of {escape(s.repo_id)}…")

        def listed(models: list[RemoteModel]) -> None:
            chosen = pick_model(models)
            if chosen is None:
                self.verdict_label.setText(_colored(f"{s.repo_id} has no GGUF model", BAD))
            else:
                self.set_draft(chosen)

        def failed(message: str) -> None:
            self.verdict_label.setText(_colored(message, BAD))

        self.tasks.run("verdict", lambda: self.hub.list_models(s.repo_id), listed, failed)
