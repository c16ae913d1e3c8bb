"""The inference thread's side: `EngineWorker` owns the Engine and runs every request there.

Each slot runs on the inference thread and reports back with signals (the controller,
gui/threads/engine.py, relays them to the GUI thread). After a target loads, the worker
reports the models at once and measures the target's cost curve in the background, one short
step at a time between requests, as the core's curve policy says
(core/engines/curve_policy.py): a request asked for meanwhile waits for one step at most.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from specchat.core.bench.compare import run_comparison
from specchat.core.conversation.context_fit import WINDOW_ADVICE, PromptTooLongError, fit_for_engine
from specchat.core.engines.curve_policy import CurvePolicy, Measurement
from specchat.core.engines.history_feed import HistoryFeed
from specchat.core.engines.local import Engine
from specchat.gui.errors import readable_error
from specchat.gui.threads.requests import GenerateRequest, LoadRequest, ModelsInfo

log = logging.getLogger(__name__)

PACE_MS = 250  # how soon a measurement step the curve policy held back is asked for again
# how long after a load the measurement starts: the window settles and the lookup history is
# indexed (on a thread of its own) before the measuring decodes take the CPU
START_MS = 2_000


class EngineWorker(QObject):
    """Lives on the inference thread; every slot runs there."""

    loading = Signal(str)  # what is being loaded, for the status bar
    loaded = Signal(object)  # ModelsInfo
    loadFailed = Signal(str, str)  # which ("target" | "draft"), readable message
    token = Signal(int, object)  # request id, TokenEvent (every event, the last one included)
    finished = Signal(int, object)  # request id, the final TokenEvent
    compareEvent = Signal(int, str, object)  # request id, "off" | "on", TokenEvent
    compareFinished = Signal(int, object)  # request id, CompareResult
    failed = Signal(int, str)  # request id, readable message
    trimmed = Signal(int, str)  # request id, what was left out to fit the context (context_fit)
    historyIndexed = Signal(str)  # what the lookup history index holds, once it is built
    curveStatus = Signal(str)  # the cost curve being measured, and how far ("" when not)
    _nextStep = Signal()  # the next measurement step, queued behind the requests asked before

    def __init__(
        self,
        engine: Engine | None = None,
        owns_engine: bool = True,
        curves: CurvePolicy | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        self._owns = owns_engine
        self.closing = threading.Event()  # set by the controller on shutdown
        self._history = HistoryFeed(self.historyIndexed.emit)  # the lookup history index
        self.curves = curves if curves is not None else CurvePolicy()
        self.measuring: Measurement | None = None  # the target's curve, being measured
        self._step_asked = False  # a step is queued or timed: ask for none more
        # queued, though emitted on this thread: each step returns to the event loop first
        self._nextStep.connect(self._measure_step, Qt.ConnectionType.QueuedConnection)

    # -- models -----------------------------------------------------------------------------
    def info(self) -> ModelsInfo:
        if self.engine is None:
            return ModelsInfo()
        d = self.engine.describe()
        notices = tuple(getattr(self.engine, "notices", ()))
        return ModelsInfo(d["target"], d["draft"], notices, getattr(self.engine, "head_name", None))

    @Slot()
    def describe(self) -> None:
        self.loaded.emit(self.info())

    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        if self.closing.is_set():
            return
        eng = self.engine
        reload_target = (
            eng is None
            or eng.target.path.resolve() != Path(req.target).resolve()
            or eng.target.config != req.target_config
        )
        if reload_target:
            self.loading.emit(f"Loading target {Path(req.target).name}…")
            try:
                new = Engine(req.target, None, target_config=req.target_config)
            except Exception as exc:  # keep what was loaded; the app stays usable
                log.info("target load failed", exc_info=True)
                self.loadFailed.emit("target", readable_error(exc, Path(req.target)))
                self.loaded.emit(self.info())
                return
            self._history.stop()  # it tokenises with the old target
            old, old_owned = self.engine, self._owns
            self.engine, self._owns = new, True
            if old is not None and old_owned:
                old.close()
            self._history.start(new, req.history_db)
            self.measuring = self.curves.begin(new)  # the kept curve, else one to measure
        eng = self.engine
        assert eng is not None
        if req.draft is None:
            eng.unload_draft()
        elif (
            reload_target
            or eng.draft is None
            or eng.draft.path.resolve() != Path(req.draft).resolve()
            or eng.draft.config != req.draft_config
        ):
            self.loading.emit(f"Loading draft {Path(req.draft).name}…")
            try:
                eng.load_draft(req.draft, req.draft_config)
            except Exception as exc:
                log.info("draft load failed", exc_info=True)
                self.loadFailed.emit("draft", readable_error(exc, Path(req.draft)))
        self.loaded.emit(self.info())
        self._measure_later(START_MS)

    # -- the cost curve, between requests ----------------------------------------------------
    def _measure_later(self, delay_ms: int = 0) -> None:
        """Queue the next step of the curve's measurement, if one is under way (behind every
        request already asked: each runs first), or time it `delay_ms` from now."""
        m = self.measuring
        if m is None or self._step_asked or self.closing.is_set():
            return
        self._step_asked = True
        self.curveStatus.emit(m.status())
        if delay_ms:
            QTimer.singleShot(delay_ms, self._measure_step)
        else:
            self._nextStep.emit()

    @Slot()
    def _measure_step(self) -> None:
        self._step_asked = False
        m, engine = self.measuring, self.engine
        if m is None or engine is None or self.closing.is_set():
            return
        if not self.curves.may_step(m):  # held back: ask again in a moment
            self._step_asked = True
            QTimer.singleShot(PACE_MS, self._measure_step)
            return
        try:
            finished = self.curves.step(engine, m)
        except Exception:  # the cost model's online line serves instead
            log.info("could not measure the cost curve", exc_info=True)
            finished = True
        if finished:
            self.measuring = None
            self.curveStatus.emit("")
        else:
            self._measure_later()

    @Slot(object)
    def set_history(self, db: Path | None) -> None:
        """The lookup history setting changed: on (`db`, indexed anew) or off, at once."""
        if self.engine is not None:
            self._history.switch(self.engine, db)

    @Slot()
    def unload_draft(self) -> None:
        if self.engine is not None:
            self.engine.unload_draft()
        self.loaded.emit(self.info())

    # -- generation -------------------------------------------------------------------------
    def _cancelled(self, req: GenerateRequest) -> bool:
        return req.cancel.is_set() or self.closing.is_set()

    @Slot(int, object)
    def generate(self, rid: int, req: GenerateRequest) -> None:
        try:
            self._generate(rid, req)
        finally:
            self._measure_later()

    def _generate(self, rid: int, req: GenerateRequest) -> None:
        if self.engine is None:
            self.failed.emit(rid, "No model is loaded.")
            return
        last = None
        parts: list[str] = []
        messages = list(req.messages)
        if req.fit:
            try:
                fitted = fit_for_engine(
                    self.engine, messages, max_tokens=req.params.max_tokens, advice=WINDOW_ADVICE
                )
            except PromptTooLongError as exc:
                self.failed.emit(rid, f"Your message is {exc}.")
                return
            except Exception:  # counting failed: let generate() report what is wrong
                log.info("could not fit the conversation to the context", exc_info=True)
            else:
                messages = fitted.messages
                if fitted.notice:
                    self.trimmed.emit(rid, fitted.notice)
        try:
            for ev in self.engine.generate(
                messages, req.params, req.mode, lambda: self._cancelled(req)
            ):
                last = ev
                parts.append(ev.text)
                self.token.emit(rid, ev)
        except Exception as exc:
            log.info("generation failed", exc_info=True)
            self.failed.emit(rid, readable_error(exc))
            return
        self.finished.emit(rid, last)
        if parts:
            self._history.remember(self.engine, [messages[-1]["content"], "".join(parts)])

    @Slot(int, object)
    def compare(self, rid: int, req: GenerateRequest) -> None:
        try:
            self._compare(rid, req)
        finally:
            self._measure_later()

    def _compare(self, rid: int, req: GenerateRequest) -> None:
        if self.engine is None:
            self.failed.emit(rid, "No model is loaded.")
            return
        try:
            result = run_comparison(
                self.engine,
                req.messages,
                req.params,
                req.mode,
                on_event=lambda name, ev: self.compareEvent.emit(rid, name, ev),
                cancel=lambda: self._cancelled(req),
            )
        except Exception as exc:
            log.info("comparison failed", exc_info=True)
            self.failed.emit(rid, readable_error(exc))
            return
        self.compareFinished.emit(rid, result)

    @Slot()
    def shutdown(self) -> None:
        """Last request on the thread: close the models (when ours) and end the event loop."""
        self._history.stop()
        if self.engine is not None and self._owns:
            self.engine.close()
        self.engine = None
        thread = QThread.currentThread()
        if thread is not None:
            thread.quit()
