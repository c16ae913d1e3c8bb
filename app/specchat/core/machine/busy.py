"""Who else used the CPU while we measured: other programs' CPU time during a run and just now.

Everything here reads counters (`Counters`): a clock, the CPU time the machine spent busy, and
the CPU time of this process's family. `MachineCounters` reads the operating system's (psutil):
the machine's busy time over all CPUs, and the time of this process, of the child processes it
started (a benchmark's llama-server peers, a native binary it ran) and of those it has already
waited for. What the machine spent beyond the family went to someone else: other programs, the
kernel's work for them, and (in a virtual machine) the host taking the CPU away ("steal").
Counting system-wide time rather than summing processes also counts processes that started and
ended between two readings.

`CpuMeter` wraps one timed run. The run was disturbed (`CpuUse.busy`) when the others used more
than `BUSY_SHARE` of the CPU time the machine had during the run (wall time × logical CPUs). A
desktop at rest stays far below it; one busy loop on a 2-CPU machine uses about half. The
processes that used the most CPU time are named (`CpuUse.top`) so that a report can say what to
close; a process that started and ended during the run is counted but not named.

`OthersBetween` says how many CPUs the others keep busy *now*: over the last `WINDOW_S` seconds
(read every `SAMPLE_S` by a background thread while the meter lives), not since some earlier
moment, so a burst that has ended (a build, a benchmark's own peer) is not taken for a busy CPU.
Programs running at a lower priority (niced, like a background build) are not counted: they
yield the CPU to ours. `threads_beside` says how many threads a CPU decode should use beside
that load: llama.cpp's threads meet at a spinning barrier after every operation, so a thread
that shares a core with a program keeping it fully busy makes the others wait for its time
slice. Measured on a 2-core machine (target 1.5B, one token): quiet, 2 threads 69 ms and 1 thread
128 ms; beside a program keeping one core busy 60 % of the time, 2 threads 107 ms; beside one
keeping a core fully busy, 2 threads 220-250 ms and 1 thread 129 ms (docs/benchmarks.md, "A busy
core").
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

__all__ = [
    "BUSY_SHARE",
    "FULL_CORE",
    "IDLE_S",
    "SAMPLE_S",
    "WINDOW_S",
    "Counters",
    "CpuMeter",
    "CpuUse",
    "MachineCounters",
    "OthersBetween",
    "Reading",
    "threads_beside",
]

BUSY_SHARE = 0.10  # others' CPU time over (wall time × CPUs) above which a run was disturbed
FULL_CORE = 0.85  # others' use of one CPU from which a decode thread beside it only waits
WINDOW_S = 0.5  # how far back OthersBetween looks: the load of the last half second is "now"
SAMPLE_S = 0.25  # how often its thread takes a reading
IDLE_S = 0.3  # the shortest window OthersBetween judges (shorter: too few clock ticks to tell)
LIST_S = 2.0  # how often MachineCounters looks for new child processes between readings
_NAMED = 3  # how many of the busiest other processes are named
_NAMED_SHARE = 0.03  # ...when each used at least this share of the machine during the run

# CPU-time fields that are not work: idle time, and guest time (already counted in user/nice).
_NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")
_NICED = (*_NOT_BUSY, "nice")  # ...and the time of lower-priority ("niced") programs

Reading = tuple[float, float, float]  # clock (s), the machine's busy CPU s, this family's CPU s


class Counters(Protocol):
    """Where the meters' readings come from (`MachineCounters`: the operating system's)."""

    cpus: int  # logical CPUs of the machine

    def read(self) -> Reading: ...


class MachineCounters:
    """The operating system's counters. "Ours" is this process, its live child processes
    (listed at every `read(relist=True)` and at most `LIST_S` apart otherwise: one listing walks
    every process of the machine) and the children it has already waited for. A child started
    after the last listing is counted from the reading that finds it, with all its CPU time so
    far: the others are then undercounted for one window, never overcounted."""

    def __init__(self, *, niced: bool = True) -> None:
        self._proc = psutil.Process(os.getpid())
        self._not_busy = _NOT_BUSY if niced else _NICED
        self._children: list[psutil.Process] = []
        self._listed = -math.inf
        self.cpus = psutil.cpu_count() or 1

    def family(self) -> set[int]:
        """The pids counted as ours at the last listing."""
        return {self._proc.pid, *(c.pid for c in self._children)}

    def read(self, relist: bool = False) -> Reading:
        now = time.perf_counter()
        if relist or now - self._listed >= LIST_S:
            # a child that ends while being listed: the last listing stays
            with contextlib.suppress(psutil.Error):
                self._children = self._proc.children(recursive=True)
            self._listed = now
        # the children before this process: one that ends and is waited for in between is
        # counted twice (others undercounted) rather than not at all. Each descendant's count
        # includes the descendants it has waited for: a compiler that a build's make runs and
        # reaps keeps its time in make's figure (counted alone, ours would shrink when it ended)
        kids = 0.0
        for c in self._children:
            try:
                t = c.cpu_times()
            except psutil.Error:  # ended: its time is in ours once it is waited for
                continue
            kids += t.user + t.system + t.children_user + t.children_system
        t = self._proc.cpu_times()
        ours = t.user + t.system + t.children_user + t.children_system + kids
        times = psutil.cpu_times()._asdict()
        busy = sum(v for k, v in times.items() if k not in self._not_busy)
        return now, busy, ours


def _others_between(start: Reading, end: Reading) -> tuple[float, float, float]:
    """Wall time, our CPU time and everyone else's from `start` to `end`."""
    ours = end[2] - start[2]
    return end[0] - start[0], ours, max(0.0, end[1] - start[1] - ours)


def _processes(ours: set[int]) -> dict[tuple[int, str], float]:
    """CPU seconds so far of every other process we may read, by (pid, name)."""
    out: dict[tuple[int, str], float] = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        info: dict[str, Any] = p.info
        t = info.get("cpu_times")
        if p.pid in ours or t is None:
            continue
        out[p.pid, str(info.get("name") or "?")] = float(t.user + t.system)
    return out


def _busiest(
    before: dict[tuple[int, str], float], after: dict[tuple[int, str], float], least_s: float
) -> tuple[tuple[str, float], ...]:
    used = [(f"{name} (pid {pid})", after[pid, name] - s) for (pid, name), s in before.items()]
    return tuple(sorted((u for u in used if u[1] >= least_s), key=lambda u: -u[1])[:_NAMED])


@dataclass(frozen=True)
class CpuUse:
    """CPU time during one run: ours and everyone else's."""

    wall_s: float
    own_s: float  # this process's CPU time (all its threads) and its child processes'
    others_s: float  # CPU time the machine spent on anything else
    cpus: int  # logical CPUs of the machine
    top: tuple[tuple[str, float], ...] = ()  # busiest others: ("name (pid N)", CPU seconds)

    @property
    def others_share(self) -> float:
        """Others' CPU time as a share of what the machine had during the run (0..1)."""
        capacity = self.wall_s * self.cpus
        return min(1.0, self.others_s / capacity) if capacity > 0 else 0.0

    @property
    def busy(self) -> bool:
        return self.others_share > BUSY_SHARE

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 4),
            "own_cpu_s": round(self.own_s, 3),
            "others_cpu_s": round(self.others_s, 3),
            "others_share": round(self.others_share, 4),
            "cpus": self.cpus,
            "busy": self.busy,
            "busiest_others": [[name, round(s, 2)] for name, s in self.top],
        }


class CpuMeter:
    """`with CpuMeter() as m: run()`; then `m.use` says who used the CPU meanwhile.
    `counters`: where the readings come from (default: the operating system's, and then the
    busiest other processes are named unless `name_processes` is False)."""

    def __init__(self, name_processes: bool = True, counters: Counters | None = None) -> None:
        self._machine: MachineCounters | None = None
        if counters is None:
            counters = self._machine = MachineCounters()
        self.counters: Counters = counters
        self.name_processes = name_processes and self._machine is not None
        self.use: CpuUse | None = None
        self._start: Reading = (0.0, 0.0, 0.0)
        self._before: dict[tuple[int, str], float] = {}

    def _read(self) -> Reading:
        if self._machine is not None:
            return self._machine.read(relist=True)
        return self.counters.read()

    def __enter__(self) -> CpuMeter:
        self._start = self._read()
        if self._machine is not None and self.name_processes:
            self._before = _processes(self._machine.family())
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._read()
        wall_s, own_s, others_s = _others_between(self._start, end)
        cpus = self.counters.cpus
        top: tuple[tuple[str, float], ...] = ()
        if self._machine is not None and self.name_processes:
            after = _processes(self._machine.family())
            before = {k: v for k, v in self._before.items() if k in after}
            top = _busiest(before, after, max(0.01, _NAMED_SHARE * wall_s * cpus))
        self.use = CpuUse(wall_s, own_s, others_s, cpus, top)


def threads_beside(others_cores: float, cpus: int, wanted: int) -> int:
    """Threads for a CPU decode that wants `wanted` threads on a machine of `cpus` logical CPUs
    while other programs keep `others_cores` CPUs busy: one fewer for every CPU our threads
    need that the others keep (nearly) fully busy, never fewer than one."""
    spare = max(0, cpus - wanted)  # CPUs the others may use without meeting our threads
    taken = int(max(0.0, others_cores - spare) + (1.0 - FULL_CORE))
    return max(1, wanted - taken)


class OthersBetween:
    """How many CPUs other programs keep busy now: `cores()` is their busy time per second
    over the last `WINDOW_S` (CPUs' worth; None until `IDLE_S` of readings exist). Readings are
    taken by `mark()`, by `cores()` itself and, with `watch`, every `SAMPLE_S` by a daemon
    thread while this object lives (`close()` stops it sooner). `counters` default to the
    operating system's without niced programs; this process and its child processes are never
    others."""

    def __init__(self, counters: Counters | None = None, *, watch: bool = True) -> None:
        self.counters: Counters = counters or MachineCounters(niced=False)
        self.cpus = self.counters.cpus  # logical CPUs of the machine
        self._readings: list[Reading] = []  # oldest first: one WINDOW_S old or more, then newer
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if watch:
            thread = threading.Thread(
                target=_watch, args=(weakref.ref(self), self._stop), name="cpu-others", daemon=True
            )
            thread.start()
            weakref.finalize(self, self._stop.set)

    def mark(self) -> None:
        """Take a reading now."""
        with self._lock:
            self._add(self.counters.read())

    def _add(self, now: Reading) -> None:
        rs = self._readings
        rs.append(now)
        old = [i for i, r in enumerate(rs) if now[0] - r[0] >= WINDOW_S]
        if old:  # the newest reading a window old is the oldest one needed
            del rs[: old[-1]]

    def cores(self) -> float | None:
        with self._lock:
            now = self.counters.read()
            rs = self._readings
            start = next((r for r in reversed(rs) if now[0] - r[0] >= WINDOW_S), None)
            if start is None and rs and now[0] - rs[0][0] >= IDLE_S:
                start = rs[0]
            self._add(now)
        if start is None:
            return None
        wall, _, others = _others_between(start, now)
        return others / wall

    def close(self) -> None:
        """Stop the reading thread (readings then come only from mark() and cores())."""
        self._stop.set()


def _watch(ref: weakref.ref[OthersBetween], stop: threading.Event) -> None:
    """OthersBetween's reading thread: holds the meter only while reading, so the meter's end
    ends it."""
    while not stop.wait(SAMPLE_S):
        meter = ref()
        if meter is None:
            return
        meter.mark()
        del meter
