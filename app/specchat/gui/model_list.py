"""The model list: one Qt table model that is the single source of truth for what is installed
and what is downloading, the delegate that draws its progress bars, and the threads that work
off the GUI thread (downloads, and short tasks such as searches and header reads).

Every view of models (the manager's table, the pair choosers) reads `ModelListModel`. Only
`DownloadManager` changes download state, and only through the model's slots, which run on the
GUI thread: a `DownloadThread` reports through queued signals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QThread,
    Signal,
    Slot,
)
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionProgressBar,
    QStyleOptionViewItem,
    QWidget,
)

from ..core.models.download import DownloadCancelled, Downloader, DownloadProgress
from ..core.models.hub import RemoteModel, parse_quant
from ..core.models.store import InstalledModel, ModelStore, PartialDownload

INSTALLED = "installed"
DOWNLOADING = "downloading"
PAUSED = "paused"  # a partial download that can be resumed
FAILED = "failed"

ModelIndex = QModelIndex | QPersistentModelIndex


def human_size(n: int | None) -> str:
    if n is None:
        return "?"
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} KB"


def human_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass(frozen=True)
class ModelEntry:
    """One row: an installed model, or a download (running, paused or failed)."""

    key: str  # the file name in the store (the first part of a split model)
    state: str
    total: int | None = None
    done: int = 0
    speed: float | None = None
    eta: float | None = None
    path: Path | None = None  # installed models only
    quant: str | None = None
    architecture: str | None = None
    context_length: int | None = None
    vocab_size: int | None = None
    source: RemoteModel | str | None = None  # what to (re)download: listing or "repo/file"
    message: str = ""
    stage: str = ""  # of a running download: connect, download, retry, verify, done

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, self.done / self.total)

    @property
    def status_text(self) -> str:
        if self.state == INSTALLED:
            details = [d for d in (self.architecture, _ctx(self.context_length)) if d]
            return " · ".join(details) or "installed"
        pct = f"{self.fraction:.0%}" if self.fraction is not None else ""
        if self.state == DOWNLOADING and self.stage in ("connect", "retry", "verify", "done"):
            return {"connect": "connecting…", "verify": "verifying the checksum…"}.get(
                self.stage, self.message
            )
        if self.state == DOWNLOADING:
            speed = f"{self.speed / 1e6:.1f} MB/s" if self.speed else ""
            eta = f"{human_eta(self.eta)} left" if self.eta is not None else ""
            return " · ".join(x for x in (pct, speed, eta) if x) or self.message
        if self.state == PAUSED:
            return f"paused at {pct or human_size(self.done)}: {self.message or 'resume to finish'}"
        return f"failed: {self.message}"


def _ctx(n: int | None) -> str:
    return f"ctx {n:,}" if n else ""


def entry_from_installed(m: InstalledModel) -> ModelEntry:
    return ModelEntry(
        key=m.file,
        state=INSTALLED if m.ok else FAILED,
        total=m.size,
        done=m.size,
        path=m.path,
        quant=m.quant,
        architecture=m.architecture,
        context_length=m.context_length,
        vocab_size=m.vocab_size,
        message=m.error or "",
    )


def entry_from_partial(p: PartialDownload) -> ModelEntry:
    return ModelEntry(p.file, PAUSED, p.total, p.have, quant=parse_quant(p.file), source=p.ref)


class ModelListModel(QAbstractTableModel):
    """Installed models and downloads, one row each, keyed by store file name."""

    COLUMNS = ("Model", "Quant", "Size", "Status")
    STATUS_COLUMN = 3
    EntryRole = Qt.ItemDataRole.UserRole + 1
    KeyRole = Qt.ItemDataRole.UserRole + 2
    StateRole = Qt.ItemDataRole.UserRole + 3
    PathRole = Qt.ItemDataRole.UserRole + 4
    ProgressRole = Qt.ItemDataRole.UserRole + 5  # 0..1, or None while unknown

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[ModelEntry] = []

    # -- reading ---------------------------------------------------------------------------------
    def rowCount(self, parent: ModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: ModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.COLUMNS[section]
        return None

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        e = self._rows[index.row()]
        if role == self.EntryRole:
            return e
        if role == self.KeyRole:
            return e.key
        if role == self.StateRole:
            return e.state
        if role == self.PathRole:
            return str(e.path) if e.path else None
        if role == self.ProgressRole:
            return e.fraction
        if role == Qt.ItemDataRole.DisplayRole:
            return (e.key, e.quant or "", human_size(e.total), e.status_text)[index.column()]
        if role == Qt.ItemDataRole.ToolTipRole:
            return e.message or str(e.path or e.key)
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() == 2:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def entries(self) -> list[ModelEntry]:
        return list(self._rows)

    def entry(self, key: str) -> ModelEntry | None:
        row = self.row_of(key)
        return None if row is None else self._rows[row]

    def row_of(self, key: str) -> int | None:
        return next((i for i, e in enumerate(self._rows) if e.key == key), None)

    def installed(self) -> list[ModelEntry]:
        return [e for e in self._rows if e.state == INSTALLED]

    # -- writing (GUI thread only) ---------------------------------------------------------------
    def reload(self, store: ModelStore) -> None:
        """Re-read the store now (parses new GGUF headers: see `set_listing` to do that on a
        worker thread)."""
        self.set_listing(store.models(), store.partial_downloads())

    def set_listing(self, installed: list[InstalledModel], partials: list[PartialDownload]) -> None:
        """Show what the store holds; rows of running downloads are kept as they are."""
        running = {e.key: e for e in self._rows if e.state == DOWNLOADING}
        failed = {e.key: e for e in self._rows if e.state == FAILED and e.path is None}
        rows = [entry_from_installed(m) for m in installed]
        keys = {e.key for e in rows}
        for p in partials:
            if p.file not in keys:
                rows.append(running.get(p.file) or entry_from_partial(p))
                keys.add(p.file)
        for key, e in (running | failed).items():
            if key not in keys:
                rows.append(e)
        self.beginResetModel()
        self._rows = sorted(rows, key=lambda e: e.key.lower())
        self.endResetModel()

    def put(self, entry: ModelEntry) -> None:
        """Insert or replace the row with ``entry.key``."""
        row = self.row_of(entry.key)
        if row is None:
            row = len(self._rows)
            self.beginInsertRows(QModelIndex(), row, row)
            self._rows.append(entry)
            self.endInsertRows()
            return
        self._rows[row] = entry
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.COLUMNS) - 1))

    def remove(self, key: str) -> None:
        row = self.row_of(key)
        if row is not None:
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._rows[row]
            self.endRemoveRows()

    @Slot(object)
    def apply_progress(self, p: DownloadProgress) -> None:
        e = self.entry(p.name)
        if e is None or e.state != DOWNLOADING:
            return  # a late signal after a cancel or a failure
        moving = p.stage in ("download", "retry")  # verify re-reads bytes already counted
        self.put(
            replace(
                e,
                done=p.done_bytes if moving else e.done,
                total=p.total_bytes or e.total,
                speed=p.speed_bps if p.stage == "download" else None,
                eta=p.eta_s if p.stage == "download" else None,
                message=p.message,
                stage=p.stage,
            )
        )


class ProgressDelegate(QStyledItemDelegate):
    """Draws a progress bar in the status column of running and paused downloads."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: ModelIndex) -> None:
        state = index.data(ModelListModel.StateRole)
        if index.column() != ModelListModel.STATUS_COLUMN or state not in (DOWNLOADING, PAUSED):
            super().paint(painter, option, index)
            return
        widget = option.widget  # type: ignore[attr-defined]
        style = widget.style() if isinstance(widget, QWidget) else QApplication.style()
        style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, option, painter, widget)
        fraction = index.data(ModelListModel.ProgressRole)
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 3, -2, -3)  # type: ignore[attr-defined]
        bar.minimum, bar.maximum = 0, 1000
        bar.progress = int((fraction or 0) * 1000) if fraction is not None else 0
        if fraction is None and state == DOWNLOADING:
            bar.maximum = 0  # busy indicator
        bar.text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
        bar.textVisible = True
        bar.textAlignment = Qt.AlignmentFlag.AlignCenter
        state = option.state & ~QStyle.StateFlag.State_Selected  # type: ignore[attr-defined]
        bar.state = state | QStyle.StateFlag.State_Horizontal
        bar.palette = option.palette  # type: ignore[attr-defined]
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter, widget)


class DownloadThread(QThread):
    """Runs one download off the GUI thread; reports through signals only."""

    progressed = Signal(object)  # DownloadProgress
    succeeded = Signal(str, object)  # key, InstalledModel | None
    failed = Signal(str, str, bool)  # key, message, cancelled

    def __init__(
        self, downloader: Downloader, source: RemoteModel | str, key: str, parent: QObject
    ) -> None:
        super().__init__(parent)
        self.downloader, self.source, self.key = downloader, source, key
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def run(self) -> None:
        try:
            if isinstance(self.source, RemoteModel):
                path = self.downloader.download(
                    self.source, progress=self.progressed.emit, cancel=self._cancel
                )
            else:
                owner, name, filename = self.source.split("/", 2)
                path = self.downloader.download_file(
                    f"{owner}/{name}", filename, progress=self.progressed.emit, cancel=self._cancel
                )
            self.succeeded.emit(self.key, self.downloader.store.model(path.name))
        except DownloadCancelled as e:
            self.failed.emit(self.key, str(e), True)
        except Exception as e:  # every failure is shown in the row, none escapes the thread
            self.failed.emit(self.key, str(e) or type(e).__name__, False)


class DownloadManager(QObject):
    """Starts, cancels and resumes downloads; writes their state into the model list."""

    changed = Signal()  # a download finished, failed or was cancelled
    message = Signal(str)

    def __init__(
        self, model: ModelListModel, store: ModelStore, downloader: Downloader, parent: QObject
    ) -> None:
        super().__init__(parent)
        self.model, self.store, self.downloader = model, store, downloader
        self._threads: dict[str, DownloadThread] = {}
        self._stopped = False

    def start(self, source: RemoteModel | str) -> str | None:
        """Download a Hub model (a listing, or ``owner/repo/file.gguf``); returns its key."""
        key = source.name if isinstance(source, RemoteModel) else source.rsplit("/", 1)[-1]
        if key in self._threads or self._stopped:
            return key if key in self._threads else None
        current = self.model.entry(key)
        if current is not None and current.state == INSTALLED:
            self.message.emit(f"{key} is already installed")
            return None
        size = source.size if isinstance(source, RemoteModel) else None
        total = size if size is not None else (current.total if current else None)
        done = current.done if current else 0
        quant = source.quant if isinstance(source, RemoteModel) else parse_quant(key)
        entry = ModelEntry(key, DOWNLOADING, total, done, quant=quant, source=source)
        self.model.put(replace(entry, message="starting"))
        thread = DownloadThread(self.downloader, source, key, self)
        thread.progressed.connect(self.model.apply_progress)
        thread.succeeded.connect(self._succeeded)
        thread.failed.connect(self._failed)
        thread.finished.connect(lambda: self._reap(key))
        self._threads[key] = thread
        thread.start()
        return key

    def resume(self, key: str) -> str | None:
        e = self.model.entry(key)
        if e is None or e.source is None:
            self.message.emit(f"{key}: its source is unknown, so it cannot be resumed")
            return None
        return self.start(e.source)

    def cancel(self, key: str) -> None:
        thread = self._threads.get(key)
        if thread is not None:
            thread.cancel()

    def is_running(self, key: str) -> bool:
        return key in self._threads

    def threads(self) -> list[DownloadThread]:
        return list(self._threads.values())

    def shutdown(self, timeout_ms: int = 30_000) -> None:
        """Cancel every download, wait for its thread (the ``.part`` files stay), and start
        no more."""
        self._stopped = True
        for thread in list(self._threads.values()):
            thread.cancel()
        for thread in list(self._threads.values()):
            thread.wait(timeout_ms)

    @Slot(str, object)
    def _succeeded(self, key: str, installed: InstalledModel | None) -> None:
        if installed is not None:
            self.model.put(entry_from_installed(installed))
        else:
            self.model.reload(self.store)
        self.message.emit(f"{key} downloaded and verified")
        self.changed.emit()

    @Slot(str, str, bool)
    def _failed(self, key: str, message: str, cancelled: bool) -> None:
        e = self.model.entry(key)
        part = self.store.part_path_for(key) if key.endswith(".gguf") else None
        have = part.stat().st_size if part is not None and part.exists() else 0
        if e is not None:
            state = PAUSED if have or cancelled else FAILED
            self.model.put(
                replace(e, state=state, done=have, speed=None, eta=None, message=message)
            )
        self.message.emit(message)
        self.changed.emit()

    def _reap(self, key: str) -> None:
        thread = self._threads.pop(key, None)
        if thread is not None:
            thread.wait()
            thread.deleteLater()


class TaskThread(QThread):
    """Runs one function off the GUI thread and hands back its result or error message."""

    done = Signal(object)
    error = Signal(str)

    def __init__(self, fn: Callable[[], Any], parent: QObject) -> None:
        super().__init__(parent)
        self._fn = fn

    def run(self) -> None:
        try:
            self.done.emit(self._fn())
        except Exception as e:  # shown to the user; nothing escapes the thread
            self.error.emit(str(e) or type(e).__name__)


class TaskRunner(QObject):
    """Short tasks on their own threads. Tasks share a *slot* name ("search", "verdict"…):
    only the latest task of a slot reports back, so a slow old answer never wins."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self._tasks: set[TaskThread] = set()
        self._latest: dict[str, TaskThread] = {}
        self._stopped = False

    def run(
        self,
        slot: str,
        fn: Callable[[], Any],
        on_done: Callable[[Any], None],
        on_error: Callable[[str], None] | None = None,
    ) -> TaskThread | None:
        """Start ``fn`` on a new thread (None once :meth:`wait_all` has run)."""
        if self._stopped:
            return None
        task = TaskThread(fn, self)
        self._latest[slot] = task

        def done(result: object) -> None:
            if self._latest.get(slot) is task:
                on_done(result)

        def error(message: str) -> None:
            if self._latest.get(slot) is task and on_error is not None:
                on_error(message)

        task.done.connect(done)
        task.error.connect(error)
        task.finished.connect(lambda: self._reap(task))
        self._tasks.add(task)
        task.start()
        return task

    def _reap(self, task: TaskThread) -> None:
        self._tasks.discard(task)
        task.wait()
        task.deleteLater()

    def threads(self) -> list[TaskThread]:
        return list(self._tasks)

    def wait_all(self, timeout_ms: int = 30_000) -> None:
        """Wait for every task and start no more (their answers are dropped)."""
        self._stopped = True
        self._latest.clear()
        for task in list(self._tasks):
            task.wait(timeout_ms)
