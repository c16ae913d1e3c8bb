"""Fewer decode threads beside a program that keeps a CPU busy, all of them again once it stops.

The rule (machine/busy.threads_beside) on figures measured on the 2-core machine it was written
on; then the shared default pair with a real busy loop (tests/busyload.py) before and during a
reply: that reply decodes with a thread fewer, in llama.cpp's context too, and says so; the
reply after the loop stopped has every thread again. Not a timing test: what is checked is how
many threads the models decode with, which the engine reads from the CPU counters."""

from __future__ import annotations

import time

import llama_cpp
import pytest
from busyload import BusyLoop, background_build_paused

from specchat.core.machine.busy import IDLE_S, OthersBetween, threads_beside
from specchat.core.types import GenerationParams, GenerationStats, Mode


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


def test_others_are_measured_between_marks_and_not_over_a_short_gap() -> None:
    meter = OthersBetween()
    assert meter.cores() is None  # no mark yet
    meter.mark()
    assert meter.cores() is None  # too short a gap to tell
    with background_build_paused(), BusyLoop(count=1, seconds=30):
        meter.mark()
        time.sleep(3 * IDLE_S)
        busy = meter.cores()
    assert busy is not None and busy >= 0.85, busy  # the loop kept a CPU busy


def _reply(engine, mode: Mode = Mode.OFF) -> GenerationStats:
    params = GenerationParams(max_tokens=4, temperature=0.0)
    events = list(engine.generate([{"role": "user", "content": "Say hi."}], params, mode))
    return events[-1].stats


def test_a_busy_cpu_takes_a_thread_away_until_it_is_free(engine) -> None:
    wanted = engine.target.n_threads
    if wanted < 2:
        pytest.skip("one thread: none to take away")
    loops = OthersBetween().cpus - wanted + 1  # one on a 2-CPU machine
    ctx = engine.target._ctx_ptr
    try:
        with background_build_paused():
            _reply(engine)
            with BusyLoop(count=loops, seconds=60):
                time.sleep(3 * IDLE_S)
                busy = _reply(engine, Mode.DRAFT)
                in_llama = llama_cpp.llama_n_threads(ctx)
                draft_threads = engine.draft.threads
            time.sleep(3 * IDLE_S)
            quiet = _reply(engine)
    finally:
        for rt in (engine.target, engine.draft):
            rt.use_threads(rt.n_threads)  # whatever happened, the next test gets every thread
    assert (busy.threads, busy.threads_wanted) == (wanted - 1, wanted)
    assert in_llama == wanted - 1 and draft_threads == wanted - 1
    assert busy.threads_note.startswith(f"{wanted - 1} of {wanted} threads")
    assert (quiet.threads, quiet.threads_note) == (wanted, "")
    assert llama_cpp.llama_n_threads(ctx) == wanted


def test_threads_stay_as_loaded_when_fitting_is_off(engine) -> None:
    wanted = engine.target.n_threads
    if wanted < 2:
        pytest.skip("one thread: none to take away")
    engine.fit_threads = False
    try:
        with background_build_paused(), BusyLoop(count=OthersBetween().cpus - wanted + 1):
            time.sleep(3 * IDLE_S)
            busy = _reply(engine)
    finally:
        engine.fit_threads = True
    assert (busy.threads, busy.threads_note) == (wanted, "")
