"""A real CPU load for tests: busy-loop subprocesses, each spinning one core, bounded in time."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psutil

LOOP = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


BUILD_PGID = "SPECCHAT_TEST_BUILD_PGID"  # the background llama-server build (tests/remote)


@contextmanager
def background_build_paused() -> Iterator[None]:
    """Stop the llama-server build that tests/remote starts in the background (its compilers
    would take the CPU the meter's "quiet" runs must find idle), and let it go on afterwards."""
    pgid = int(os.environ.get(BUILD_PGID, "0") or 0)
    paused = False
    if pgid:
        try:
            os.killpg(pgid, signal.SIGSTOP)
            paused = True
        except OSError:  # finished meanwhile
            pass
    try:
        yield
    finally:
        if paused:
            with suppress(OSError):
                os.killpg(pgid, signal.SIGCONT)


def loops_over(share: float) -> int:
    """How many one-core loops take well over `share` of this machine (1 on 2 to 4 CPUs)."""
    return max(1, math.ceil(2 * share * (psutil.cpu_count() or 1)))


class BusyLoop:
    """`start()` launches `count` Python processes that each spin one CPU for at most
    `seconds`; `stop()` kills them (also on exit from a `with` block). Restartable."""

    def __init__(self, count: int = 1, seconds: float = 120.0) -> None:
        self.count = count
        self.seconds = seconds
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        code = LOOP.format(s=self.seconds)
        while len(self.procs) < self.count:
            self.procs.append(subprocess.Popen([sys.executable, "-c", code]))

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(30)
        self.procs = []

    def __enter__(self) -> BusyLoop:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
