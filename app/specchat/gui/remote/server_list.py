"""The saved servers as a Qt list model, and as entries for a model picker that shows remote
models next to local ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QObject, QPersistentModelIndex, Qt

from specchat.core.remote.config import ServerKind
from specchat.core.remote.probe import ServerInfo
from specchat.core.state.servers import ServerEntry, ServerStore

__all__ = ["RemoteModelItem", "ServerListModel", "remote_model_items"]

IdRole = Qt.ItemDataRole.UserRole + 1
StatusRole = Qt.ItemDataRole.UserRole + 2
OkRole = Qt.ItemDataRole.UserRole + 3

Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class RemoteModelItem:
    """One remote model for a model list: what to show, and the server to connect to."""

    server_id: str
    label: str  # "model @ server"
    detail: str  # URL, kind, pairing, last test result

    @property
    def key(self) -> str:
        return f"remote:{self.server_id}"


def _kind_label(kind: str) -> str:
    try:
        return ServerKind.parse(kind).label
    except ValueError:
        return kind


class ServerListModel(QAbstractListModel):
    """Rows are `ServerStore.entries()`. `set_status` records the last test of a server (kept
    for this session, shown in the tooltip and by a ✓ / ✗ before the name)."""

    def __init__(self, store: ServerStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self._entries: list[ServerEntry] = store.entries()
        self._status: dict[str, tuple[bool, str]] = {}
        self._infos: dict[str, ServerInfo] = {}

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._entries)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return None
        e = self._entries[index.row()]
        status = self._status.get(e.id)
        if role == Qt.ItemDataRole.DisplayRole:
            mark = "" if status is None else ("✓ " if status[0] else "✗ ")
            return f"{mark}{e.name}"
        if role == Qt.ItemDataRole.ToolTipRole:
            lines = [e.base_url, _kind_label(e.kind)]
            if e.model:
                lines.append(f"model: {e.model}")
            if status is not None:
                lines.append(status[1])
            return "\n".join(lines)
        if role == IdRole:
            return e.id
        if role == StatusRole:
            return None if status is None else status[1]
        if role == OkRole:
            return None if status is None else status[0]
        return None

    # -- access -----------------------------------------------------------------------------
    def reload(self) -> None:
        self.beginResetModel()
        self._entries = self.store.entries()
        self.endResetModel()

    def entry(self, row: int) -> ServerEntry | None:
        return self._entries[row] if 0 <= row < len(self._entries) else None

    def row_of(self, server_id: str) -> int:
        return next((i for i, e in enumerate(self._entries) if e.id == server_id), -1)

    def status(self, server_id: str) -> str:
        """The last test's message for a server ("" when it was not tested)."""
        found = self._status.get(server_id)
        return found[1] if found else ""

    def info(self, server_id: str) -> ServerInfo | None:
        return self._infos.get(server_id)

    def set_status(
        self, server_id: str, ok: bool, text: str, info: ServerInfo | None = None
    ) -> None:
        self._status[server_id] = (ok, text)
        if info is not None:
            self._infos[server_id] = info
        row = self.row_of(server_id)
        if row >= 0:
            idx = self.index(row)
            self.dataChanged.emit(idx, idx)


def remote_model_items(
    store: ServerStore, model: ServerListModel | None = None
) -> list[RemoteModelItem]:
    """Every saved server as a model-list entry ("model @ server"), servers used only as
    another server's no-speculation twin left out (they appear through their partner)."""
    entries = store.entries()
    twins = {e.off_server for e in entries if e.off_server}
    out: list[RemoteModelItem] = []
    for e in entries:
        if e.id in twins:
            continue
        info = model.info(e.id) if model is not None else None
        name = (info.model if info else "") or e.model or "server default"
        parts = [e.base_url, _kind_label(info.kind.value if info else e.kind)]
        if info is not None and info.speculation:
            parts.append(f"speculation: {info.speculation}")
        if e.off_server:
            twin = store.get(e.off_server)
            parts.append(f"off runs on {twin.name if twin else '?'}")
        out.append(RemoteModelItem(e.id, f"{name} @ {e.name}", ", ".join(parts)))
    return out
