"""A download's or fetch's progress on one line of stderr (`models download`, `fetch-default`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from specchat.core.store.progress import Progress
from specchat.core.units import format_bytes, format_duration


class ProgressLine:
    """One progress line on stderr: rewritten in place on a terminal, every 5 s otherwise."""

    def __init__(self) -> None:
        self._last = 0.0
        self._tty = sys.stderr.isatty()
        self.used = False

    def show(self, text: str, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < (0.2 if self._tty else 5.0):
            return
        self._last = now
        self.used = True
        if self._tty:
            print("\r" + text[:110].ljust(110), end="", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def end(self) -> None:
        """Finish the line (once)."""
        if self.used and self._tty:
            print(file=sys.stderr)
        self.used = False


def progress_printer(line: ProgressLine, *, name: bool = False) -> Callable[[Progress], None]:
    """Progress of a download or fetch on one line; ``name``: start it with the file name."""

    def show(p: Progress) -> None:
        frac = f"{p.fraction:6.1%}" if p.fraction is not None else "      "
        total = format_bytes(p.total) if p.total else "?"
        speed = f"{format_bytes(p.speed)}/s" if p.speed else ""
        part = f" part {p.part}/{p.parts}" if p.parts > 1 else ""
        text = (
            f"{p.what + ' ' if name else ''}{p.phase:<8} {frac} {format_bytes(p.done):>9} of "
            f"{total:<9} {speed:>11} ETA {format_duration(p.eta)}{part}  {p.message}"
        )
        finished = p.total > 0 and p.done >= p.total
        line.show(text, final=p.phase in ("retry", "done") or finished)

    return show
