"""The interleaved benchmark runner (no Qt); suites are read by ``suite.py``.

Every variant (a speculation mode, or a peer implementation) is measured in pairs with the
reference, SpecChat with speculation off: for each repeat and prompt the runner does ``off, A,
B, …`` (or ``off, A, off, B, …``), each run from cold KV caches, so every ratio compares runs
taken side by side and slow drift of the machine cancels out. The order of the variants turns
by one from block to block (``order="rotate"``, the default), so no variant, the reference
included, always runs right after the same other one (a peer server's heavy work, say). The
statistics live in ``report.py``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from specchat.core.bench.journal import Journal
from specchat.core.bench.results import (
    PreparedPrompt,
    RssSampler,
    RunResult,
    Variant,
    tau,
)
from specchat.core.bench.schedule import ORDERS, REFERENCE, schedule
from specchat.core.bench.suite import BenchPrompt, Suite, SuiteError, load_suite, parse_suite
from specchat.core.decoding.drafters.history_index import HistoryIndex
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.engines.local import Engine
from specchat.core.machine.busy import CpuMeter
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.types import Mode

__all__ = [
    "ORDERS",
    "REFERENCE",
    "BenchPrompt",
    "BenchRun",
    "BenchSettings",
    "EngineVariant",
    "PreparedPrompt",
    "RssSampler",
    "RunResult",
    "Suite",
    "SuiteError",
    "Variant",
    "load_suite",
    "parse_modes",
    "parse_suite",
    "run_bench",
    "schedule",
    "tau",
]

DEFAULT_MAX_TOKENS = 256
REDO_MAX = 2  # a pair with a run disturbed by other programs is run again up to twice
WARMUP_TOKENS = 8
MeterFactory = Callable[[], CpuMeter]  # measures others' CPU use during one metered run


class EngineVariant:
    """A speculation mode of SpecChat's own engine (off, draft, lookup, auto, ...)."""

    runner = "specchat"
    baseline: str | None = None
    metered = True  # it runs in this process: others' CPU use during its runs is measured

    def __init__(self, engine: Engine, mode: Mode | str) -> None:
        self.engine = engine
        self.mode = Mode.parse(mode).value
        self.label = self.mode

    def run(self, prompt: PreparedPrompt, params: GenerationParams) -> RunResult:
        self.engine.reset_caches()  # every run starts cold: a fair time to first token
        index = HistoryIndex()  # the earlier conversations this prompt comes with, or none
        index.add(prompt.history)
        index.finish()
        self.engine.use_history(index)
        with RssSampler() as rss:
            reply = Reply.collect(self.engine.generate_tokens(prompt.tokens, params, self.mode))
        st = reply.final_stats
        return RunResult.of_reply(
            self,
            prompt,
            reply,
            threads=st.threads,
            threads_wanted=st.threads_wanted,
            token_ids=reply.token_ids,
            drafted=st.drafted,
            accepted=st.accepted,
            verify_steps=st.verify_steps,
            verify_tokens=st.verify_tokens,
            host_ms_per_token=st.host_ms_per_token,
            decode_host_ms=st.decode_host_ms_per_token,
            setup_host_ms=st.setup_host_ms,
            plain_steps=st.target_steps - st.verify_steps,
            draft_pos_proposed=list(st.draft_pos_proposed),
            peak_rss_bytes=rss.peak,
            start_rss_bytes=rss.start_rss,
        )

    def close(self) -> None:
        pass


# -- the interleaved runner -----------------------------------------------------------------
OnRun = Callable[[RunResult, int, int], None]  # (result, runs done, runs in all)


@dataclass
class BenchSettings:
    repeats: int = 3
    max_tokens: int | None = None  # None: each prompt's own max_tokens, else DEFAULT_MAX_TOKENS
    params: GenerationParams = field(default_factory=GenerationParams)
    warmup: bool = True

    def validate(self) -> BenchSettings:
        if not 1 <= self.repeats <= 1000:
            raise ValueError("repeats must be between 1 and 1000")
        if self.max_tokens is not None and not 1 <= self.max_tokens <= 1_000_000:
            raise ValueError("max_tokens must be between 1 and 1,000,000")
        self.params.validate()
        return self


@dataclass
class BenchRun:
    """Everything a report needs: the suite, the variants measured and every run."""

    suite: Suite
    labels: list[str]  # variants in the order measured, REFERENCE first
    baselines: dict[str, str | None]
    runners: dict[str, str]
    runs: list[RunResult]
    settings: BenchSettings
    started_at: float
    duration_s: float
    planned_runs: int = 0
    interrupted: bool = False  # stopped early (Ctrl+C or cancel): the report is partial
    cost_curve: CostCurve | None = None  # the machine's, measured: the report's ceilings
    planner_curve: str | None = None  # what drafting was priced with: measured, flat, online
    redone_pairs: int = 0  # pairs run again because other programs took the CPU (REDO_MAX)
    order: str = "rotate"  # the schedule's (`schedule`)
    pairing: str = "block"


def prepare(engine: Engine, prompt: BenchPrompt, settings: BenchSettings) -> PreparedPrompt:
    messages = prompt.messages()
    limit = settings.max_tokens or prompt.max_tokens or DEFAULT_MAX_TOKENS
    return PreparedPrompt(
        prompt,
        engine.template.render(messages),
        tuple(engine.prompt_tokens(messages)),
        limit,
        tuple(
            tuple(engine.target.tokenize(text, add_special=False, parse_special=False))
            for text in prompt.history
        ),
    )


def parse_modes(text: str | Sequence[str]) -> list[str]:
    """Mode names from "off,draft,..." (any Mode member, so new modes work as they appear).
    The reference (off) is always measured and comes first."""
    items = text.split(",") if isinstance(text, str) else list(text)
    modes = [Mode.parse(m).value for m in items if str(m).strip()]
    out = [REFERENCE]
    for m in modes:
        if m not in out:
            out.append(m)
    return out


def run_bench(
    engine: Engine,
    suite: Suite,
    modes: str | Sequence[str],
    repeats: int = 3,
    *,
    max_tokens: int | None = None,
    params: GenerationParams | None = None,
    peers: Sequence[Variant] = (),
    warmup: bool = True,
    on_run: OnRun | None = None,
    cancel: Callable[[], bool] | None = None,
    pairing: str = "block",
    order: str = "rotate",
    cost_curve: CostCurve | None = None,
    redo_busy: int = REDO_MAX,
    meter: MeterFactory = CpuMeter,
    journal: Journal | None = None,
) -> BenchRun:
    """Measure `modes` of `engine` (and any peer variants) on every prompt of `suite`.
    `cost_curve`: the machine's, measured, for the report's ceilings (the planner uses what
    the engine was given: `Engine.use_cost_curve`). `redo_busy`: how many times a pair that
    other programs disturbed is run again. `order`: see `schedule`. `journal`: where each
    measured pair is kept, and the pairs an earlier run of the same bench measured."""
    settings = BenchSettings(repeats, max_tokens, params or GenerationParams(), warmup).validate()
    mode_labels = parse_modes(modes)
    if Mode.DRAFT.value in mode_labels and not engine.has_draft:
        raise ValueError("mode draft needs a draft model, and none is loaded")
    variants: dict[str, Variant] = {m: EngineVariant(engine, m) for m in mode_labels}
    for peer in peers:
        if peer.label in variants:
            raise ValueError(f"two variants are called {peer.label!r}")
        variants[peer.label] = peer
    prompts = [prepare(engine, p, settings) for p in suite.prompts]
    bench = measure(
        variants,
        suite,
        prompts,
        settings,
        pairing=pairing,
        order=order,
        on_run=on_run,
        cancel=cancel,
        fatal=lambda v: isinstance(v, EngineVariant),
        redo_busy=redo_busy,
        meter=meter,
        journal=journal,
    )
    bench.cost_curve = cost_curve
    planner = engine.cost_curve
    bench.planner_curve = "online" if planner is None else planner.source
    return bench


def measure(
    variants: dict[str, Variant],
    suite: Suite,
    prompts: Sequence[PreparedPrompt],
    settings: BenchSettings,
    *,
    pairing: str = "block",
    order: str = "rotate",
    on_run: OnRun | None = None,
    cancel: Callable[[], bool] | None = None,
    fatal: Callable[[Variant], bool] = lambda v: False,
    redo_busy: int = REDO_MAX,
    meter: MeterFactory = CpuMeter,
    journal: Journal | None = None,
) -> BenchRun:
    """Run the schedule over `variants` (the reference first): warm-up, then every planned run.
    A variant's failure skips that run unless `fatal(variant)` (SpecChat's own engine: a bug
    there must not hide); Ctrl+C or `cancel` keeps what was measured so far. A pair in which
    other programs took more than busy.BUSY_SHARE of the CPU during one of its metered runs
    is run again (at most REDO_MAX times; what the last try measured is kept, marked busy).
    `meter` makes the CPU meter of each metered run. A pair `journal` holds is taken from it,
    not measured; each pair measured is added to it."""
    labels = list(variants)
    plan = schedule(prompts, labels, settings.repeats, pairing, order)
    started, t0 = time.time(), time.perf_counter()
    pairs = {item[3] for item in plan}
    kept: dict[int, list[RunResult]] = {}  # pairs an earlier run of the same bench measured
    if journal is not None:
        kept = {n: measured for n in pairs if (measured := journal.done(n)) is not None}
    if settings.warmup and len(kept) < len(pairs):
        # Touch every model's weights once (they are mmapped) so the first pair is not cold.
        short = settings.params.with_(max_tokens=WARMUP_TOKENS)
        for v in variants.values():
            if getattr(v, "needs_warmup", True):
                v.run(prompts[0], short)
    tries = _PairTries(variants, settings, fatal, meter, redo_busy, on_run, cancel, len(plan))
    runs: list[RunResult] = []
    interrupted = False
    done = 0
    got: list[RunResult] = []  # the pair being measured
    try:
        for number, taken in groupby(plan, key=lambda item: item[3]):  # a pair: side by side
            pair_plan = list(taken)
            if number in kept:  # measured by an earlier run of the same bench
                runs += kept[number]
            else:
                got = []
                tries.measure(pair_plan, done, got)
                if journal is not None:
                    journal.add(number, got)
                runs += got
                got = []
            done += len(pair_plan)
    except (KeyboardInterrupt, _Cancelled):  # Ctrl+C or cancel: keep what was measured so far
        interrupted = True
        runs += got
    return BenchRun(
        suite=suite,
        labels=labels,
        baselines={lab: v.baseline for lab, v in variants.items()},
        runners={lab: v.runner for lab, v in variants.items()},
        runs=runs,
        settings=settings,
        started_at=started,
        duration_s=time.perf_counter() - t0,
        planned_runs=len(plan),
        interrupted=interrupted,
        redone_pairs=tries.redone,
        order=order,
        pairing=pairing,
    )


class _Cancelled(Exception):
    pass


@dataclass
class _PairTries:
    """Measures one pair of the schedule, its runs side by side, and again while other
    programs disturb it (at most `redo_busy` times)."""

    variants: dict[str, Variant]
    settings: BenchSettings
    fatal: Callable[[Variant], bool]
    meter: MeterFactory
    redo_busy: int
    on_run: OnRun | None
    cancel: Callable[[], bool] | None
    total: int  # runs planned (for `on_run`)
    redone: int = 0  # pairs run again, all told

    def measure(
        self,
        pair_plan: Sequence[tuple[int, PreparedPrompt, str, int]],
        done: int,
        got: list[RunResult],
    ) -> None:
        """The pair's runs into `got` (what its last try measured, so far if interrupted).
        `done`: runs before this pair."""
        for attempt in range(self.redo_busy + 1):
            got.clear()
            for rep, prompt, label, pair in pair_plan:
                if self.cancel is not None and self.cancel():
                    raise _Cancelled
                variant = self.variants[label]
                result = _run_one(variant, prompt, self.settings, self.fatal, self.meter)
                if result is None:
                    continue
                result.repeat, result.pair = rep, pair
                got.append(result)
                if self.on_run is not None:
                    self.on_run(result, done + len(got), self.total)
            busy = [r for r in got if r.busy]
            if not busy or attempt == self.redo_busy:
                return
            self.redone += 1
            last = attempt + 1 == self.redo_busy
            print(_again(busy[0], last), file=sys.stderr, flush=True)


def _run_one(
    variant: Variant,
    prompt: PreparedPrompt,
    settings: BenchSettings,
    fatal: Callable[[Variant], bool],
    meter_factory: MeterFactory = CpuMeter,
) -> RunResult | None:
    """One run; None when a variant that may fail (a peer) failed (said on stderr). A variant
    that runs in this process or its children (`metered`: SpecChat's modes, the llama.cpp
    peers) has other programs' CPU use during the run measured (a remote server's is not)."""
    p = settings.params.with_(max_tokens=prompt.max_tokens)
    meter = meter_factory() if getattr(variant, "metered", False) else None
    try:
        if meter is None:
            return variant.run(prompt, p)
        with meter:
            result = variant.run(prompt, p)
    except Exception as exc:  # a peer's own bug must not end the whole run
        if fatal(variant):
            raise
        name = f"{prompt.prompt.id} {variant.label}"
        print(f"{name}: failed, skipped ({exc})", file=sys.stderr, flush=True)
        return None
    use = meter.use
    if use is not None:
        result.others_share = use.others_share
        result.busiest = tuple(name for name, _ in use.top)
    return result


def _again(run: RunResult, last_try: bool) -> str:
    who = f" ({', '.join(run.busiest)})" if run.busiest else ""
    share = run.others_share or 0.0
    last = " (last try)" if last_try else ""
    return (
        f"{run.prompt_id} {run.label}: other programs used {share:.0%} of the CPU{who}; "
        f"running this pair again{last}"
    )
