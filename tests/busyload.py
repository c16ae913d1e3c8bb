"""CPU load for tests: busy-loop subprocesses, each spinning one core, bounded in time; and
scripted counters for the meters, so a test judges only the load it describes."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
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
    `seconds`; `stop()` kills them (also on exit from a `with` block). Restartable.
    `detached`: the loops are not this process's children (started through a shell that exits
    at once), so a meter counts them as another program's; otherwise they are ours."""

    def __init__(self, count: int = 1, seconds: float = 120.0, detached: bool = False) -> None:
        self.count = count
        self.seconds = seconds
        self.detached = detached
        self.procs: list[psutil.Process] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _launch(self, code: str) -> psutil.Process:
        if not self.detached:
            return psutil.Process(subprocess.Popen([sys.executable, "-c", code]).pid)
        shell = 'nohup "$0" -c "$1" >/dev/null 2>&1 & echo $!'
        out = subprocess.run(
            ["sh", "-c", shell, sys.executable, code], capture_output=True, text=True, check=True
        )
        return psutil.Process(int(out.stdout.split()[-1]))

    def start(self) -> None:
        code = LOOP.format(s=self.seconds)
        while len(self.procs) < self.count:
            self.procs.append(self._launch(code))

    def cpu_s(self) -> float:
        """CPU seconds the loops have used so far (those still running)."""
        total = 0.0
        for p in self.procs:
            with suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def stop(self) -> None:
        for p in self.procs:
            with suppress(psutil.Error):
                p.kill()
        for p in self.procs:
            with suppress(psutil.Error):
                p.wait(30)
        self.procs = []

    def __enter__(self) -> BusyLoop:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ScriptedCpu:
    """Counters for busy.CpuMeter and busy.OthersBetween whose readings the test writes: a
    clock that moves only when `run` says so, and the CPU time other programs and this process
    used meanwhile. A meter fed by it judges exactly the load the test describes, whatever else
    the machine is doing."""

    def __init__(self, cpus: int = 2) -> None:
        self.cpus = cpus
        self.now = 0.0
        self.busy = 0.0  # the machine's busy CPU seconds
        self.ours = 0.0  # this process's (and its children's)

    def run(self, seconds: float, others: float = 0.0, ours: float = 0.0) -> None:
        """`seconds` pass while other programs keep `others` CPUs busy and we keep `ours`."""
        self.now += seconds
        self.busy += (others + ours) * seconds
        self.ours += ours * seconds

    def read(self) -> tuple[float, float, float]:
        return self.now, self.busy, self.ours


class SetLoad:
    """Counters on the real clock with this process's real CPU time, and other programs' load
    as the test sets it (`others`, in CPUs, changed at any moment from any thread): a meter fed
    by it times real runs and sees exactly the other programs the test describes."""

    def __init__(self, cpus: int = 2, others: float = 0.0) -> None:
        self.cpus = cpus
        self._proc = psutil.Process()
        self._lock = threading.Lock()
        self._rate = others
        self._since = time.perf_counter()
        self._others_s = 0.0

    def _advance(self) -> float:
        now = time.perf_counter()
        self._others_s += self._rate * (now - self._since)
        self._since = now
        return now

    @property
    def others(self) -> float:
        return self._rate

    @others.setter
    def others(self, cpus: float) -> None:
        with self._lock:
            self._advance()
            self._rate = cpus

    def read(self) -> tuple[float, float, float]:
        with self._lock:
            now = self._advance()
            t = self._proc.cpu_times()
            ours = t.user + t.system
            return now, ours + self._others_s, ours
