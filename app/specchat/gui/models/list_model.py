"""The model list: one Qt table model that is the single source of truth for what is installed
and what is downloading, and the delegate that draws its progress bars.

Every view of models (the manager's table, the pair chooser) reads `ModelListModel`. Only
`threads.downloads.DownloadManager` changes download state, and only through the model's slots,
which run on the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
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

from specchat.core.fetch.hub_download import DownloadProgress
from specchat.core.gguf.drafters import Support
from specchat.core.gguf.info import GGUFInfo
from specchat.core.hub.client import RemoteModel, parse_quant
from specchat.core.placement.store_pairs import link_installed
from specchat.core.store.store import InstalledModel, ModelStore, PartialDownload
from specchat.core.units import format_bytes, format_duration

INSTALLED = "installed"
DOWNLOADING = "downloading"
PAUSED = "paused"  # a partial download that can be resumed
FAILED = "failed"

ModelIndex = QModelIndex | QPersistentModelIndex


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
    info: GGUFInfo | None = field(default=None, repr=False, compare=False)  # installed ones
    support: Support | None = None  # what speeds it up (installed models)
    partner: str | None = None  # its drafter file, or a drafter's target

    @property
    def support_text(self) -> str:
        if self.support is None:
            return ""
        if self.partner and self.support.speculates:
            return f"{self.support.label}: {self.partner}"
        return self.support.label

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
            speed = f"{format_bytes(self.speed)}/s" if self.speed else ""
            eta = f"{format_duration(self.eta)} left" if self.eta is not None else ""
            return " · ".join(x for x in (pct, speed, eta) if x) or self.message
        if self.state == PAUSED:
            return (
                f"paused at {pct or format_bytes(self.done)}: {self.message or 'resume to finish'}"
            )
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
        info=m.info,
    )


def entry_from_partial(p: PartialDownload) -> ModelEntry:
    return ModelEntry(p.file, PAUSED, p.total, p.have, quant=parse_quant(p.file), source=p.ref)


class ModelListModel(QAbstractTableModel):
    """Installed models and downloads, one row each, keyed by store file name."""

    COLUMNS = ("Model", "Quant", "Size", "Status", "Speeds up with")
    STATUS_COLUMN = 3
    SUPPORT_COLUMN = 4
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
            texts = (e.key, e.quant or "", format_bytes(e.total), e.status_text, e.support_text)
            return texts[index.column()]
        if role == Qt.ItemDataRole.ToolTipRole:
            if index.column() == self.SUPPORT_COLUMN and e.support is not None:
                return e.support.tooltip
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
        self._rows = self._linked(sorted(rows, key=lambda e: e.key.lower()))
        self.endResetModel()

    @staticmethod
    def _linked(rows: list[ModelEntry]) -> list[ModelEntry]:
        """Rows with their speed-up labels, installed targets paired with the installed MTP
        sidecar or assistant that fits them (core/placement/store_pairs.py)."""
        installed = [(e.key, e.info) for e in rows if e.state == INSTALLED and e.info is not None]
        links = link_installed(installed)
        out = []
        for e in rows:
            link = links.get(e.key)
            if link is not None:
                e = replace(e, support=link.support, partner=link.partner)
            out.append(e)
        return out

    def _relink(self) -> None:
        new = self._linked(self._rows)
        for row, (old, e) in enumerate(zip(self._rows, new, strict=True)):
            if (old.support, old.partner) != (e.support, e.partner):
                self._rows[row] = e
                index = self.index(row, self.SUPPORT_COLUMN)
                self.dataChanged.emit(index, index)

    def put(self, entry: ModelEntry) -> None:
        """Insert or replace the row with ``entry.key``."""
        row = self.row_of(entry.key)
        if row is None:
            row = len(self._rows)
            self.beginInsertRows(QModelIndex(), row, row)
            self._rows.append(entry)
            self.endInsertRows()
        else:
            self._rows[row] = entry
            self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.COLUMNS) - 1))
        if entry.state == INSTALLED:
            self._relink()

    def remove(self, key: str) -> None:
        row = self.row_of(key)
        if row is not None:
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._rows[row]
            self.endRemoveRows()
            self._relink()

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
