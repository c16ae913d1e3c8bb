"""A comparison that survives a busy machine: rounds, the CPU meter and the verdict.

The comparisons run for real (the 0.5B model drafting for itself); the CPU meter of each pass
(the real busy.CpuMeter) reads the real clock and this process's real CPU time, with the other
programs' load set by the test (tests/busyload.SetLoad), so a verdict never depends on what
else the shared test machine is doing. The verdict's rules are checked on CPU figures written
out; the meter against real processes in test_busy_threads.py.
"""

from __future__ import annotations

import json
import threading
import time

import psutil
import pytest
from busyload import SetLoad

from specchat.core.bench import rounds as rounds_mod
from specchat.core.bench.compare import run_comparison
from specchat.core.bench.rounds import SPREAD_LIMIT, judge_rounds
from specchat.core.engines.local import Engine
from specchat.core.machine.busy import CpuMeter, CpuUse
from specchat.core.params import GenerationParams
from specchat.core.types import TokenEvent

PROMPT = [{"role": "user", "content": "Write a Python function that reverses a string."}]


def quiet(wall: float = 2.0) -> CpuUse:
    return CpuUse(wall_s=wall, own_s=wall * 1.9, others_s=0.01 * wall, cpus=2)


def loaded(wall: float = 2.0) -> CpuUse:
    return CpuUse(wall, wall, 0.9 * wall, 2, (("python (pid 4242)", 0.9 * wall),))


# -- the meter ------------------------------------------------------------------------------


def test_meter_counts_this_process_as_its_own() -> None:
    def spin() -> None:  # until this thread has used 0.6 s of CPU, however busy the machine
        start = time.thread_time()
        while time.thread_time() - start < 0.6:
            pass

    worker = threading.Thread(target=spin)
    with CpuMeter() as m:
        worker.start()
        worker.join()
    use = m.use
    assert use is not None and use.own_s > 0.5  # a thread of ours is ours
    assert str(psutil.Process().pid) not in " ".join(name for name, _ in use.top)


# -- the verdict ----------------------------------------------------------------------------


def test_quiet_rounds_that_agree_give_the_median_and_spread() -> None:
    v = judge_rounds([1.20, 1.10, 1.00], [[("off", quiet()), ("draft", quiet())]] * 3)
    assert v.reliable and v.reason == "" and v.middle == 1
    assert v.headline() == "×1.10 (1.00–1.20 over 3 rounds)"
    # an even count: the lower middle one, always a round that was measured
    v4 = judge_rounds([1.15, 1.0, 1.2, 1.1], [[("off", quiet())]] * 4)
    assert v4.median == 1.1 and v4.headline() == "×1.10 (1.00–1.20 over 4 rounds)"


def test_one_disturbed_run_withholds_the_figure() -> None:
    uses = [[("speculation off", quiet()), ("draft", quiet())] for _ in range(3)]
    uses[1][0] = ("speculation off", loaded())
    v = judge_rounds([1.10, 1.12, 1.08], uses)
    assert not v.reliable and v.headline() == ""
    assert "busy" in v.reason and "round 2 (speculation off)" in v.reason
    assert "unreliable" in v.reason and "close python (pid 4242)" in v.reason
    assert v.disturbed is not None and v.disturbed.round == 2
    # a server's CPU is not ours to judge: the same figures pass on agreement alone
    assert judge_rounds([1.10, 1.12, 1.08], uses, watched=False).reliable


def test_rounds_that_disagree_withhold_the_figure() -> None:
    uses = [[("off", quiet())]] * 3
    spread = SPREAD_LIMIT * 1.0 + 0.05
    v = judge_rounds([1.0, 1.0 - spread / 2, 1.0 + spread / 2], uses)
    assert not v.reliable and "disagree" in v.reason and v.headline() == ""
    assert judge_rounds([1.0, 0.95, 1.05], uses).reliable  # 10 % apart is agreement
    one = judge_rounds([1.1], uses[:1])
    assert not one.reliable and "one round" in one.reason


# -- the comparison on a real pair (the 0.5B model drafting for itself: a third of the cost) --


def test_rounds_alternate_and_only_the_first_streams(
    small_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = small_engine
    seen: list[str] = []
    quiet = SetLoad(others=0.0)
    # how far rounds may disagree is judge_rounds' rule (tested above on written figures);
    # here every spread is agreement, so the figure is shown on any machine
    monkeypatch.setattr(rounds_mod, "SPREAD_LIMIT", float("inf"))
    result = run_comparison(
        engine,
        PROMPT,
        GenerationParams(max_tokens=8, seed=5),
        "lookup",
        on_event=lambda name, _ev: seen.append(name),
        rounds=3,
        meter=lambda: CpuMeter(counters=quiet),
    )
    assert len(result.rounds) == 3 and not result.cancelled
    assert result.off is result.rounds[0].off and result.on is result.rounds[0].on
    assert seen == ["off"] * seen.count("off") + ["on"] * seen.count("on") and seen
    for r in result.rounds:
        assert r.off.stats.tokens == r.on.stats.tokens == 8
        for p in (r.off, r.on):
            assert p.cpu is not None and p.cpu.own_s > 0 and p.cpu.wall_s >= p.stats.elapsed_s
            assert p.cpu.others_s == 0.0 and not p.cpu.busy
    v = result.verdict
    assert v is not None and v.watched and v.reliable and v.reason == ""
    # each round's speedup is its own passes' tok/s ratio, and the figure is their median
    speedups = [r.on.tokens_per_s / r.off.tokens_per_s for r in result.rounds]
    assert v.speedups == pytest.approx(speedups)
    assert v.median == sorted(v.speedups)[1]
    assert result.repeatable  # greedy, same seed: every round writes the same texts
    record = json.loads(json.dumps(result.as_dict()))
    assert len(record["rounds"]) == 3 and record["verdict"]["reliable"] is True
    assert record["speedup"] == round(v.median, 4)
    assert f"×{v.median:.2f} ({v.low:.2f}–{v.high:.2f} over 3 rounds)" in result.summary()
    print(result.summary())


def test_another_program_busy_during_the_runs_makes_the_figure_unreliable(
    small_engine: Engine,
) -> None:
    engine = small_engine
    load = SetLoad(cpus=2, others=1.0)  # another program keeps one of two CPUs busy
    result = run_comparison(
        engine,
        PROMPT,
        GenerationParams(max_tokens=8),
        "lookup",
        rounds=2,
        meter=lambda: CpuMeter(counters=load),
    )
    v = result.verdict
    assert v is not None and not v.reliable and not result.reliable
    assert "busy" in v.reason and "unreliable" in v.reason
    for p in (p for r in result.rounds for p in (r.off, r.on)):
        assert p.cpu is not None and p.cpu.busy
        assert p.cpu.others_share == pytest.approx(0.5)  # one CPU of two, the whole pass
    assert result.as_dict()["speedup"] is None and "no speedup figure" in result.summary()


def test_a_cancel_keeps_the_finished_rounds(small_engine: Engine) -> None:
    engine = small_engine
    cancel = threading.Event()

    def on_event(name: str, ev: TokenEvent) -> None:
        if name == "on" and ev.finish_reason is not None:
            cancel.set()  # the first round ends: stop before the second

    result = run_comparison(
        engine, PROMPT, GenerationParams(max_tokens=6), "lookup", on_event, cancel, rounds=3
    )
    assert result.cancelled and len(result.rounds) == 1 and not result.reliable
    assert result.on.stats.tokens == 6 and result.as_dict()["speedup"] is None


def test_zero_rounds_are_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="at least one round"):
        run_comparison(engine, PROMPT, GenerationParams(max_tokens=4), "lookup", rounds=0)
