"""Talking to servers off the GUI thread: testing a connection, connecting an engine.

Both are one-shot QThreads that report through signals (delivered on the GUI thread). Every
thread started here is tracked, so a dialog or a window can wait for them on close and tests
can check that none is left running.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QThread, Signal

from specchat.core.engines.remote_connect import check_connection, connect_entry
from specchat.core.remote.config import RemoteConfig
from specchat.core.state.servers import ServerStore

__all__ = ["ConnectThread", "ProbeThread", "running_remote_threads", "wait_remote_threads"]

log = logging.getLogger(__name__)

_threads: set[QThread] = set()


def running_remote_threads() -> list[QThread]:
    return [t for t in list(_threads) if t.isRunning()]


def wait_remote_threads(timeout_ms: int = 30_000) -> bool:
    """Wait for every remote thread (a probe waits at most its connect + read timeouts)."""
    ok = True
    for t in list(_threads):
        ok = bool(t.wait(timeout_ms)) and ok
    return ok


class _OneShot(QThread):
    failed = Signal(str)  # a readable message

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        _threads.add(self)
        self.finished.connect(lambda: _threads.discard(self))


class ProbeThread(_OneShot):
    """Ask a server what it is (`ServerInfo`) without keeping the connection."""

    succeeded = Signal(object)  # ServerInfo

    def __init__(self, config: RemoteConfig, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.config = config

    def run(self) -> None:
        try:
            info = check_connection(self.config)
        except Exception as exc:  # shown in the dialog; nothing escapes the thread
            log.info("server test failed: %s", exc)
            self.failed.emit(str(exc) or type(exc).__name__)
            return
        self.succeeded.emit(info)


class ConnectThread(_OneShot):
    """Build the engine for a saved server (a RemoteEngine, or a RemotePair when the server
    has a no-speculation twin). The receiver owns the engine and must close it."""

    connected = Signal(object)  # RemoteEngine | RemotePair

    def __init__(self, store: ServerStore, server_id: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store, self.server_id = store, server_id

    def run(self) -> None:
        try:
            engine = connect_entry(self.store, self.server_id)
        except Exception as exc:
            log.info("connecting failed: %s", exc)
            self.failed.emit(str(exc) or type(exc).__name__)
            return
        self.connected.emit(engine)
