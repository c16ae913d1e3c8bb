"""Model downloads off the GUI thread: one `DownloadThread` per file, started, cancelled and
resumed by `DownloadManager`, which writes their state into the `ModelListModel` (on the GUI
thread: a thread reports through queued signals only)."""

from __future__ import annotations

import threading
from dataclasses import replace

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.core.fetch.hub_download import DownloadCancelled, Downloader
from specchat.core.hub.client import RemoteModel, parse_quant
from specchat.core.store.store import InstalledModel, ModelStore
from specchat.gui.models.list_model import (
    DOWNLOADING,
    FAILED,
    INSTALLED,
    PAUSED,
    ModelEntry,
    ModelListModel,
    entry_from_installed,
)


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
