"""The inference thread: one long-lived QThread whose worker owns the Engine.

The GUI never calls the engine directly. It asks `EngineController` (GUI thread) to load, generate
or compare; the controller forwards each request over a queued signal to `EngineWorker`
(gui/threads/worker.py), which runs it on the inference thread and reports back with signals
that the controller emits again on the GUI thread. A stop request sets a `threading.Event` that
the decoder checks between steps, so stopping never waits on the queue.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specchat.core.engines.curve_policy import CurvePolicy
from specchat.core.engines.local import Engine, Message
from specchat.core.params import GenerationParams
from specchat.core.types import Mode
from specchat.gui.threads.requests import GenerateRequest, LoadRequest
from specchat.gui.threads.worker import EngineWorker

_threads: set[QThread] = set()  # every inference thread started and not yet joined


def running_threads() -> list[QThread]:
    """Inference threads still running (tests fail when one outlives them)."""
    return [t for t in list(_threads) if t.isRunning()]


# The worker's signals the controller emits again on the GUI thread. A signal reaches a plain
# Python callable on the thread that emits it: a test waiting for the worker's own signal could
# see it fire between starting its timeout and entering its event loop, and wait forever.
RELAYED = (
    "loading",
    "loadFailed",
    "token",
    "finished",
    "compareEvent",
    "compareFinished",
    "failed",
    "trimmed",
    "historyIndexed",
    "curveStatus",
)


class EngineController(QObject):
    """GUI-side handle of the inference thread. One request runs at a time."""

    _requestLoad = Signal(object)
    _requestDescribe = Signal()
    _requestUnloadDraft = Signal()
    _requestHistory = Signal(object)
    _requestGenerate = Signal(int, object)
    _requestCompare = Signal(int, object)
    _requestShutdown = Signal()

    busyChanged = Signal(bool)
    # the worker's signals, emitted again on the GUI thread (RELAYED)
    loading = Signal(str)
    loadFailed = Signal(str, str)
    token = Signal(int, object)
    finished = Signal(int, object)
    compareEvent = Signal(int, str, object)
    compareFinished = Signal(int, object)
    failed = Signal(int, str)
    trimmed = Signal(int, str)
    historyIndexed = Signal(str)
    curveStatus = Signal(str)
    # the worker's `loaded`, relayed after `loading_models` turns false: whoever listens has
    # the new models in the same turn of the event loop as the flag (the worker's own signal
    # reaches each listener as a separate event, so the flag could be read false before a
    # listener had the models)
    loaded = Signal(object)

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        owns_engine: bool = True,
        curves: CurvePolicy | None = None,
        parent: QObject | None = None,
    ) -> None:
        """`curves`: when the target's cost curve is measured (default: the core's policy,
        curves kept in the data directory)."""
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._cancel = threading.Event()
        self._current: int | None = None
        self._loading = False
        self.thread_ = QThread()
        self.thread_.setObjectName("specchat-inference")
        self.worker = EngineWorker(engine, owns_engine, curves)
        self.worker.moveToThread(self.thread_)
        w = self.worker
        self._requestLoad.connect(w.load)
        self._requestDescribe.connect(w.describe)
        self._requestUnloadDraft.connect(w.unload_draft)
        self._requestHistory.connect(w.set_history)
        self._requestGenerate.connect(w.generate)
        self._requestCompare.connect(w.compare)
        self._requestShutdown.connect(w.shutdown)
        self.thread_.finished.connect(w.deleteLater)
        w.finished.connect(self._request_done)
        w.compareFinished.connect(self._request_done)
        w.failed.connect(self._request_done)
        w.loaded.connect(self._load_done)
        # what the rest of the GUI listens to, relayed after the bookkeeping above
        for name in RELAYED:
            getattr(w, name).connect(getattr(self, name))
        _threads.add(self.thread_)
        self.thread_.start()

    # -- state ------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A generation or comparison is in flight."""
        return self._current is not None

    @property
    def loading_models(self) -> bool:
        return self._loading

    @property
    def engine(self) -> Engine | None:
        """For display and tests only: never call into it from the GUI thread."""
        return self.worker.engine if self.thread_.isRunning() else None

    @Slot(int, object)
    def _request_done(self, rid: int, _payload: object) -> None:
        if rid == self._current:
            self._current = None
            self.busyChanged.emit(False)

    @Slot(object)
    def _load_done(self, info: object) -> None:
        self._loading = False
        self.loaded.emit(info)

    # -- requests ---------------------------------------------------------------------------
    def load(self, req: LoadRequest) -> None:
        self._loading = True
        self._requestLoad.emit(req)

    def describe(self) -> None:
        self._requestDescribe.emit()

    def unload_draft(self) -> None:
        self._requestUnloadDraft.emit()

    def set_history(self, db: Path | None) -> None:
        """Draft from the saved conversations in `db` (None: not at all) from now on."""
        self._requestHistory.emit(db)

    def _start(self) -> tuple[int, threading.Event]:
        if self._current is not None:
            raise RuntimeError("a reply is already being generated")
        rid = next(self._ids)
        self._cancel = threading.Event()
        self._current = rid
        self.busyChanged.emit(True)
        return rid, self._cancel

    def generate(
        self,
        messages: Sequence[Message],
        params: GenerationParams,
        mode: Mode,
        *,
        fit: bool = False,
    ) -> int:
        """Start a reply; `fit`: leave out the oldest exchanges if the conversation no longer
        fits the context (`trimmed` says which)."""
        rid, cancel = self._start()
        req = GenerateRequest(tuple(messages), params, mode, cancel, fit)
        self._requestGenerate.emit(rid, req)
        return rid

    def compare(self, messages: Sequence[Message], params: GenerationParams, mode: Mode) -> int:
        rid, cancel = self._start()
        self._requestCompare.emit(rid, GenerateRequest(tuple(messages), params, mode, cancel))
        return rid

    def stop(self) -> None:
        """Ask the running request to stop after its current step."""
        self._cancel.set()

    def shutdown(self, timeout_ms: int = 120_000) -> bool:
        """Stop any request, close the models (when owned) and join the thread."""
        if not self.thread_.isRunning():
            _threads.discard(self.thread_)
            return True
        self._cancel.set()
        self.worker.closing.set()
        self._requestShutdown.emit()
        ok = bool(self.thread_.wait(timeout_ms))
        if ok:
            _threads.discard(self.thread_)
        return ok
