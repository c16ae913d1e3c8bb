"""Fewer decode threads beside a program that keeps a CPU busy *now*, all of them again once it
stops, and never for this process's own children.

The rule (machine/busy.threads_beside) on measured figures; the meter's window on readings the
test writes (tests/busyload.ScriptedCpu), so the verdict is the load the test describes and not
what else the machine is doing; the operating system's counters against loops the test starts
itself, judged only by what those loops used; and the shared default pair fed a scripted load:
the reply decodes with a thread fewer, in llama.cpp's context too, and says so."""

from __future__ import annotations

import time

import llama_cpp
import pytest
from busyload import BusyLoop, ScriptedCpu

from specchat.core.machine import busy
from specchat.core.machine.busy import (
    IDLE_S,
    SAMPLE_S,
    WINDOW_S,
    CpuMeter,
    OthersBetween,
    threads_beside,
)
from specchat.core.params import GenerationParams
from specchat.core.types import GenerationStats, Mode

# the operating system counts CPU time in ticks of 10 ms: a reading's rounding (two ticks),
# and the float error of differences of tick sums (49 ticks read 0.48999999999)
TICK_S = 0.02 + 1e-9


def test_a_thread_goes_only_for_a_cpu_the_others_keep_fully_busy() -> None:
    # 2 CPUs, 2 threads: one token of the 1.5B target took 69 ms quiet, 107 ms beside a core
    # busy 60 % of the time and 220-250 ms beside a fully busy one (1 thread: 129 ms)
    assert threads_beside(0.0, 2, 2) == 2
    assert threads_beside(0.6, 2, 2) == 2
    assert threads_beside(0.9, 2, 2) == 1
    assert threads_beside(2.0, 2, 2) == 1  # never fewer than one
    # 8 logical CPUs, 4 threads: the others have four CPUs to themselves first
    assert threads_beside(4.0, 8, 4) == 4
    assert threads_beside(5.0, 8, 4) == 3
    assert threads_beside(8.0, 8, 4) == 1


def _sampled(meter: OthersBetween, cpu: ScriptedCpu, seconds: float, others: float) -> None:
    """`seconds` of a load of `others` CPUs, read every SAMPLE_S as the meter's thread does."""
    for _ in range(round(seconds / SAMPLE_S)):
        cpu.run(SAMPLE_S, others=others)
        meter.mark()


def test_the_load_of_the_last_half_second_counts_not_a_burst_that_ended() -> None:
    cpu = ScriptedCpu(cpus=2)
    meter = OthersBetween(cpu, watch=False)
    assert meter.cores() is None  # no reading yet
    cpu.run(SAMPLE_S, others=2.0)
    assert SAMPLE_S < IDLE_S and meter.cores() is None  # too short a window to tell
    _sampled(meter, cpu, 3.0, others=2.0)  # a build, or a benchmark's peer, on both CPUs
    assert meter.cores() == pytest.approx(2.0)
    _sampled(meter, cpu, 0.75, others=0.0)  # it ended three readings ago
    quiet = meter.cores()
    assert quiet == pytest.approx(0.0)  # since the burst began, others used 1.6 CPUs
    assert threads_beside(quiet, 2, 2) == 2
    # a program that keeps one CPU busy now costs a thread, whatever came before it
    _sampled(meter, cpu, 1.0, others=1.0)
    busy = meter.cores()
    assert busy == pytest.approx(1.0) and threads_beside(busy, 2, 2) == 1
    # a load that began a moment ago is less than a full core of the window (the next look
    # during the reply, half a second later, sees it whole)
    _sampled(meter, cpu, 1.0, others=0.0)
    cpu.run(0.1, others=1.0)
    assert meter.cores() == pytest.approx(0.1 / (WINDOW_S + 0.1))
    # our own work is never the others'
    _sampled(meter, cpu, 1.0, others=0.0)
    cpu.run(0.5, ours=2.0)
    assert meter.cores() == pytest.approx(0.0)


class _Reads(ScriptedCpu):
    """A scripted machine that counts how often it was read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self) -> tuple[float, float, float]:
        self.reads += 1
        return super().read()


def test_the_meters_thread_reads_while_it_lives_and_stops_when_closed() -> None:
    cpu = _Reads()
    meter = OthersBetween(cpu)  # with its thread
    deadline = time.monotonic() + 60.0
    while cpu.reads < 3 and time.monotonic() < deadline:
        time.sleep(SAMPLE_S)
    assert cpu.reads >= 3  # nobody called mark() or cores(): the thread read
    meter.close()
    time.sleep(SAMPLE_S)  # a read in progress when close() came may still finish
    closed = cpu.reads
    time.sleep(4 * SAMPLE_S)
    assert cpu.reads == closed


def _spent_inside(meter: CpuMeter, loops: BusyLoop, least_s: float) -> float:
    """Run `meter` until the loops have used `least_s` CPU seconds inside it; returns what they
    used from just after it started to just before it ended (at most what they used in it)."""
    with meter:
        inner0 = loops.cpu_s()
        deadline = time.monotonic() + 120.0
        while loops.cpu_s() - inner0 < least_s and time.monotonic() < deadline:
            time.sleep(0.05)
        return loops.cpu_s() - inner0


def test_another_programs_loop_is_counted_as_others() -> None:
    with BusyLoop(count=1, seconds=180, detached=True) as loops:
        inner = _spent_inside(meter := CpuMeter(), loops, 0.5)
    use = meter.use
    assert use is not None and inner >= 0.5
    assert use.others_s >= inner - TICK_S  # all it used is others' time, whatever else ran
    assert use.others_share >= (inner - TICK_S) / (use.wall_s * use.cpus)


def test_the_busiest_others_are_named_most_first() -> None:
    before = {(1, "cc1plus"): 10.0, (2, "dpkg"): 5.0, (3, "idle"): 1.0, (4, "python"): 0.0}
    after = {(1, "cc1plus"): 10.5, (2, "dpkg"): 6.5, (3, "idle"): 1.005, (4, "python"): 0.9}
    assert busy._busiest(before, after, least_s=0.01) == (
        ("dpkg (pid 2)", pytest.approx(1.5)),
        ("python (pid 4)", pytest.approx(0.9)),
        ("cc1plus (pid 1)", pytest.approx(0.5)),
    )
    assert [name for name, _ in busy._busiest(before, after, least_s=0.6)] == [
        "dpkg (pid 2)",
        "python (pid 4)",
    ]


def test_a_child_process_of_ours_is_never_others() -> None:
    """A benchmark's llama-server peer is its child: its CPU time is ours, not another
    program's (it made SpecChat's next reply start with a thread fewer)."""
    with BusyLoop(count=1, seconds=180) as loops:
        pid = loops.pids[0]
        inner = _spent_inside(meter := CpuMeter(), loops, 0.5)
    use = meter.use
    assert use is not None and inner >= 0.5
    assert inner - TICK_S <= use.own_s  # this process idled: the child's time is ours
    assert f"(pid {pid})" not in " ".join(name for name, _ in use.top)


def _reply(engine, mode: Mode = Mode.OFF) -> GenerationStats:
    params = GenerationParams(max_tokens=4, temperature=0.0)
    events = list(engine.generate([{"role": "user", "content": "Say hi."}], params, mode))
    return events[-1].stats


def test_a_busy_cpu_takes_a_thread_away_until_it_is_free(engine, monkeypatch) -> None:
    wanted = engine.target.n_threads
    if wanted < 2:
        pytest.skip("one thread: none to take away")
    cpu = ScriptedCpu(cpus=wanted)  # no spare CPU: a fully busy one meets our threads
    meter = OthersBetween(cpu, watch=False)
    monkeypatch.setattr(engine, "_others", meter)
    ctx = engine.target._ctx_ptr
    try:
        meter.mark()
        _sampled(meter, cpu, 1.0, others=1.0)
        busy = _reply(engine, Mode.DRAFT)
        in_llama = llama_cpp.llama_n_threads(ctx)
        draft_threads = engine.draft.threads
        _sampled(meter, cpu, 1.0, others=0.0)
        quiet = _reply(engine)
    finally:
        for rt in (engine.target, engine.draft):
            rt.use_threads(rt.n_threads)  # whatever happened, the next test gets every thread
    assert (busy.threads, busy.threads_wanted) == (wanted - 1, wanted)
    assert in_llama == wanted - 1 and draft_threads == wanted - 1
    assert busy.threads_note.startswith(f"{wanted - 1} of {wanted} threads")
    assert (quiet.threads, quiet.threads_note) == (wanted, "")
    assert llama_cpp.llama_n_threads(ctx) == wanted


def test_threads_stay_as_loaded_when_fitting_is_off(engine, monkeypatch) -> None:
    wanted = engine.target.n_threads
    if wanted < 2:
        pytest.skip("one thread: none to take away")
    cpu = ScriptedCpu(cpus=wanted)
    meter = OthersBetween(cpu, watch=False)
    monkeypatch.setattr(engine, "_others", meter)
    monkeypatch.setattr(engine, "fit_threads", False)
    meter.mark()
    _sampled(meter, cpu, 1.0, others=float(wanted))
    busy = _reply(engine)
    assert (busy.threads, busy.threads_note) == (wanted, "")


_BUILD = """
import subprocess, sys, time
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.15: pass"
for _ in range(8):
    subprocess.run([sys.executable, "-c", burn], check=True)
    with open(sys.argv[1], "a") as f:
        f.write("x\\n")
time.sleep(120)
"""


def test_the_time_of_a_childs_own_finished_children_stays_ours(tmp_path) -> None:
    """A build the test suite starts (make running compilers, each waited for by make, not by
    us): while the child lives, each grandchild that ended keeps its CPU time in ours, through
    the child's own count of its waited-for children. Fails if only each descendant's own time
    is summed (the test suite's llama-server build then made this process's CPU time shrink,
    own_s -0.19 s, and its compilers look like another program's)."""
    import subprocess
    import sys

    done = tmp_path / "done"
    done.touch()
    child = subprocess.Popen([sys.executable, "-c", _BUILD, str(done)])
    try:
        deadline = time.monotonic() + 120.0
        while not done.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        with (meter := CpuMeter(name_processes=False)):
            start = len(done.read_text().split())
            while len(done.read_text().split()) < start + 4 and time.monotonic() < deadline:
                time.sleep(0.02)
            end = len(done.read_text().split())
        assert child.poll() is None  # (still running: none of its time reached ours by a wait)
    finally:
        child.kill()
        child.wait()
    use = meter.use
    assert use is not None and end >= start + 4
    inside = end - start - 1  # grandchildren that ran wholly inside the meter's window
    assert use.own_s >= inside * 0.15 - 2 * TICK_S, (use, start, end)
