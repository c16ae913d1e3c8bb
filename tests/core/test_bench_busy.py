"""The bench against a busy machine: a pair during which another program took the CPU is run
again, and what stays disturbed is marked in the report.

What is tested is the runner's bookkeeping, so the variants are stand-ins and the CPU meter of
each run (the real busy.CpuMeter) reads counters the stand-ins write (tests/busyload.ScriptedCpu):
a run "disturbed" by another program is one the test says was, never one that the machine's
other work happened to disturb. The meter against real processes: test_busy_threads.py."""

from __future__ import annotations

from benchsuite import TWO_PROMPTS
from busyload import ScriptedCpu

from specchat.core.bench.report import build_report
from specchat.core.bench.report_md import to_markdown
from specchat.core.bench.runner import (
    BenchSettings,
    PreparedPrompt,
    RunResult,
    measure,
)
from specchat.core.machine.busy import BUSY_SHARE, CpuMeter
from specchat.core.params import GenerationParams

SUITE = TWO_PROMPTS
BUSY_S, QUIET_S = 0.6, 0.3


class StandIn:
    """A variant that runs in this process, decoding on one CPU of the scripted machine `cpu`;
    on the calls listed in `busy_calls` another program keeps the other CPU busy for the
    whole run."""

    runner = "stand-in"
    baseline = None
    metered = True

    def __init__(
        self, label: str, cpu: ScriptedCpu, busy_calls: set[int] | None = None, every: bool = False
    ):
        self.label = self.mode = label
        self.cpu = cpu
        self.busy_calls = busy_calls or set()
        self.every = every
        self.calls = 0

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        self.calls += 1
        if self.every or self.calls in self.busy_calls:
            self.cpu.run(BUSY_S, others=self.cpu.cpus - 1.0, ours=1.0)
        else:
            self.cpu.run(QUIET_S, ours=1.0)
        tps = 10.0 if self.label == "off" else 11.0
        return RunResult.of(self, prompt, tokens=4, token_ids=[1, 2, 3, 4], tokens_per_s=tps)

    def close(self) -> None:
        pass


def _prompts(ids: tuple[str, ...] = ("a", "b")) -> list[PreparedPrompt]:
    return [PreparedPrompt(p, p.prompt, (1, 2), 4) for p in SUITE.prompts if p.id in ids]


def _alternate(off: StandIn, auto: StandIn, ids: tuple[str, ...], repeats: int = 1, **kw):
    settings = BenchSettings(repeats=repeats, warmup=False)
    return measure(
        {"off": off, "auto": auto},
        SUITE,
        _prompts(ids),
        settings,
        order="fixed",
        meter=lambda: CpuMeter(counters=off.cpu),
        **kw,
    )


def test_a_pair_another_program_disturbed_is_run_again() -> None:
    cpu = ScriptedCpu()
    off, auto = StandIn("off", cpu, busy_calls={1}), StandIn("auto", cpu)
    seen: list[tuple[str, str, int]] = []
    bench = _alternate(
        off,
        auto,
        ("a", "b"),
        pairing="alternate",
        on_run=lambda r, done, total: seen.append((r.prompt_id, r.label, done)),
    )
    # the first pair ran twice (its off run was disturbed), the second once
    assert (off.calls, auto.calls) == (3, 3)
    assert seen == [("a", "off", 1), ("a", "auto", 2), ("a", "off", 1), ("a", "auto", 2)] + [
        ("b", "off", 3),
        ("b", "auto", 4),
    ]
    assert bench.redone_pairs == 1
    assert [(r.prompt_id, r.label, r.pair) for r in bench.runs] == [
        ("a", "off", 0),
        ("a", "auto", 0),
        ("b", "off", 1),
        ("b", "auto", 1),
    ]
    assert all(r.others_share == 0.0 and not r.busy for r in bench.runs)
    report = build_report(bench, models={}, argv=["specchat-cli", "bench"])
    assert report["redone_pairs"] == 1
    assert all(rec["busy_runs"] == 0 for rec in report["records"])
    md = to_markdown(report)
    assert "1 pair(s) were run again" in md and "stayed disturbed" not in md
    assert "⚠" not in md


def test_a_pair_that_stays_disturbed_is_kept_and_marked() -> None:
    cpu = ScriptedCpu()
    off, auto = StandIn("off", cpu, every=True), StandIn("auto", cpu)
    bench = _alternate(off, auto, ("a",), pairing="alternate", redo_busy=1)
    assert (off.calls, auto.calls) == (2, 2)  # one try and one more, then kept
    assert bench.redone_pairs == 1 and len(bench.runs) == 2
    busy_off = bench.runs[0]
    # one of the two CPUs taken by the other program for the whole run
    assert busy_off.busy and busy_off.others_share == 0.5 > BUSY_SHARE
    assert not bench.runs[1].busy
    report = build_report(bench, models={}, argv=["specchat-cli", "bench"])
    auto_rec = next(r for r in report["records"] if r["mode"] == "auto")
    assert auto_rec["busy_runs"] == 1  # its paired off run
    assert auto_rec["others_cpu_share_max"] == busy_off.others_share
    md = to_markdown(report)
    assert "1 run(s) stayed disturbed" in md and "1.10× ⚠" in md


def test_a_quiet_machine_runs_every_pair_once() -> None:
    cpu = ScriptedCpu()
    off, auto = StandIn("off", cpu), StandIn("auto", cpu)
    bench = _alternate(off, auto, ("a",), repeats=2, pairing="alternate")
    assert (off.calls, auto.calls) == (2, 2) and bench.redone_pairs == 0
    report = build_report(bench, models={}, argv=["specchat-cli", "bench"])
    auto_rec = next(r for r in report["records"] if r["mode"] == "auto")
    assert (auto_rec["speedup_low"], auto_rec["speedup_high"]) == (1.1, 1.1)
    md = to_markdown(report)
    assert "| a | code | auto |" in md and "1.10× (1.10–1.10)" in md
    assert "- other programs: at most 0.0% of the CPU during any run" in md
