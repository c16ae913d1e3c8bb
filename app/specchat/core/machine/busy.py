"""Who else used the CPU while we measured: other processes' CPU time during a run (psutil).

`CpuMeter` wraps one timed run. It reads the machine's busy CPU time (all CPUs, from the
operating system's counters) and this process's own CPU time at both ends; what the machine
spent beyond this process went to someone else: other programs, the kernel's work for them,
and (in a virtual machine) the host taking the CPU away ("steal"). Counting system-wide time
rather than summing processes also counts processes that started and ended during the run.

The run was disturbed (`CpuUse.busy`) when the others used more than `BUSY_SHARE` of the CPU
time the machine had during the run (wall time × logical CPUs). A desktop at rest stays far
below it (a few tenths of a percent on the machine this was written on); one busy loop on a
2-CPU machine uses about half.

The processes that used the most CPU time are named (`CpuUse.top`) so that a report can say
what to close; a process that started and ended between the two readings is counted but not
named.

`OthersBetween` measures the same between two runs (from the end of one reply to the start of
the next, while this process is idle), and `threads_beside` says how many threads a CPU decode
should use beside that load: llama.cpp's threads meet at a spinning barrier after every
operation, so a thread that shares a core with a program keeping it fully busy makes the others
wait for its time slice. On the 2-core machine this was written on (target 1.5B, one token):
quiet, 2 threads 69 ms and 1 thread 128 ms; beside a program keeping one core busy 60 % of the
time, 2 threads 107 ms; beside one keeping a core fully busy, 2 threads 220-250 ms and 1 thread
129 ms (docs/benchmarks.md, "A busy core").
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = ["BUSY_SHARE", "FULL_CORE", "CpuMeter", "CpuUse", "OthersBetween", "threads_beside"]

BUSY_SHARE = 0.10  # others' CPU time over (wall time × CPUs) above which a run was disturbed
FULL_CORE = 0.85  # others' use of one CPU from which a decode thread beside it only waits
IDLE_S = 0.3  # the shortest gap between runs that OthersBetween measures
_NAMED = 3  # how many of the busiest other processes are named
_NAMED_SHARE = 0.03  # ...when each used at least this share of the machine during the run

# CPU-time fields that are not work: idle time, and guest time (already counted in user/nice).
_NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")


_NICED = (*_NOT_BUSY, "nice")  # ...and the time of lower-priority ("niced") programs


def _machine_busy_s(not_busy: tuple[str, ...] = _NOT_BUSY) -> float:
    times = psutil.cpu_times()._asdict()
    return sum(v for k, v in times.items() if k not in not_busy)


def _own_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


_Reading = tuple[float, float, float]  # wall clock, the machine's busy CPU time, this process's


def _reading(proc: psutil.Process, not_busy: tuple[str, ...] = _NOT_BUSY) -> _Reading:
    return time.perf_counter(), _machine_busy_s(not_busy), _own_s(proc)


def _between(start: _Reading, end: _Reading) -> tuple[float, float, float]:
    """Wall time, this process's CPU time and everyone else's from `start` to `end`."""
    own_s = end[2] - start[2]
    return end[0] - start[0], own_s, max(0.0, end[1] - start[1] - own_s)


def _processes(own_pid: int) -> dict[tuple[int, str], float]:
    """CPU seconds so far of every other process we may read, by (pid, name)."""
    out: dict[tuple[int, str], float] = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        info: dict[str, Any] = p.info
        t = info.get("cpu_times")
        if p.pid == own_pid or t is None:
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
    """CPU time during one run: this process's and everyone else's."""

    wall_s: float
    own_s: float  # this process's CPU time (all its threads)
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
    """`with CpuMeter() as m: run()`; then `m.use` says who used the CPU meanwhile."""

    def __init__(self, name_processes: bool = True) -> None:
        self.name_processes = name_processes
        self.use: CpuUse | None = None
        self._proc = psutil.Process(os.getpid())
        self._start: _Reading = (0.0, 0.0, 0.0)
        self._before: dict[tuple[int, str], float] = {}

    def __enter__(self) -> CpuMeter:
        if self.name_processes:
            self._before = _processes(self._proc.pid)
        self._start = _reading(self._proc)
        return self

    def __exit__(self, *exc: object) -> None:
        wall_s, own_s, others_s = _between(self._start, _reading(self._proc))
        cpus = psutil.cpu_count() or 1
        top: tuple[tuple[str, float], ...] = ()
        if self.name_processes:
            after = _processes(self._proc.pid)
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
    """Other programs' CPU use between this process's runs: `mark()` when a run ends,
    `cores()` when the next one starts (CPUs' worth of busy time per second of the gap; None
    when there was no mark or the gap was shorter than IDLE_S). Programs running at a lower
    priority (niced, like a background build) are not counted: they yield the CPU to ours."""

    def __init__(self) -> None:
        self._proc = psutil.Process(os.getpid())
        self._mark: _Reading | None = None
        self.cpus = psutil.cpu_count() or 1  # logical CPUs of the machine

    def mark(self) -> None:
        self._mark = _reading(self._proc, _NICED)

    def cores(self) -> float | None:
        if self._mark is None:
            return None
        gap, _, others_s = _between(self._mark, _reading(self._proc, _NICED))
        return others_s / gap if gap >= IDLE_S else None
