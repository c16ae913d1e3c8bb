"""Short background tasks (searches, header reads, imports), each on its own QThread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal


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
