"""When the target's cost curve is measured, reused and kept: one policy for the window,
`specchat-cli generate` and `specchat-cli bench`.

The cost curve (`decoding/pricing/cost_curve.py`) says what one decode of n tokens costs on this
machine relative to one token; Auto and Lookup size their drafts by it. Plain decoding never
needs it, so nothing waits for it: until it exists the cost model prices a verification with the
line it fits online from each reply's own target passes, and Auto's note says so
(`UNMEASURED_NOTE`).

What the policy decides:

- **Kept per model file and machine** (`curve_store.py`). A target reloaded with the same key
  (another context size, say) keeps its curve without timing anything again. A curve measured
  while other programs used the CPU (`CostCurve.disturbed`) is used, and measured again in the
  background once per window (the quieter of the two is kept).
- **The window** (`CurvePolicy.begin`, then `CurvePolicy.step` between replies): measured in the
  background after the models have loaded, in small steps, on the inference thread.
- **`generate`** (`CurvePolicy.now`): the kept curve, else measured at once before the reply (a
  one-shot command has no idle time to measure in), then kept.
- **`bench`** (`CurvePolicy.fresh`): measured afresh (a report states the curve of its own run)
  with the bench's finer points, then kept.

Why steps on the inference thread's own context, and not a thread of its own: a llama.cpp
context is not thread-safe and holds one KV cache, so nothing may decode on it beside a reply. A
second context would need the weights loaded a second time (on a GPU, twice in its memory), and
on a CPU its decode threads would meet the reply's at llama.cpp's spinning barriers: a thread
that loses its core makes the others wait (machine/busy.py), so the reply slows down and the
timings measure the contest, not the machine. So the one thread that owns the Engine measures,
one step at a time: a warm-up first, then one timed pair per step (`SETTLE` untimed one-token
decodes, a timed one-token decode and a timed decode of n tokens right after it, as
`measure_cost_curve` takes them, in its order and number), and gives its event loop back after
each. A reply asked for meanwhile waits for at most one step (the longest, 65 tokens, costs
about as much as 25 plain steps on a CPU) and the measurement goes on after it. Each step
appends its decodes to what the cache holds (filler up to 128 tokens when it holds fewer, left
in place for the next step) and cuts them off again, so a conversation's cached prefix stays.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specchat.core.decoding.choosing.backend_sampler import ROWS_MAX
from specchat.core.decoding.pricing.cost_curve import (
    GREEDY_CHAIN,
    SETTLE,
    SHORT_FACTOR,
    SHORT_N,
    CostCurve,
    CostCurveError,
    curve_from_pairs,
    filler_tokens,
    more_pairs,
    timed_decode,
)
from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.engines.curve_store import CurveStore, curve_key
from specchat.core.machine.busy import CpuMeter, MachineCounters
from specchat.core.types import GenerationStats

if TYPE_CHECKING:
    from specchat.core.engines.local import Engine

log = logging.getLogger(__name__)

# what the window and `generate` measure: batch sizes up to a lookup copy's 64 tokens (longer
# ones follow the curve's last slope), each short one 3 x REPEATS times, each long one REPEATS
MEASURE_NS = (1, 2, 3, 5, 9, 17, 33, 65)
REPEATS = 2

MEASURING = "Measuring what verifying a draft costs on this machine"
UNMEASURED_NOTE = "cost curve not measured yet: priced from this reply's own passes"


def step_sizes(ns: Sequence[int] = MEASURE_NS, repeats: int = REPEATS) -> list[int]:
    """The n of each timed step, in `measure_cost_curve`'s order: every n in every round, a
    long one (n > SHORT_N) in one round of SHORT_FACTOR (n = 1: a one-token time only)."""
    ns = sorted(set(ns) | {1})
    return [
        n
        for r in range(repeats * SHORT_FACTOR)
        for n in ns
        if not (n > SHORT_N and r % SHORT_FACTOR)
    ]


def tokens_decoded(ns: Sequence[int] = MEASURE_NS, repeats: int = REPEATS) -> int:
    """Tokens a measurement decodes at most: its warm-up and every step's (no more filler than
    128), each long batch timed as often as a short one (`more_pairs`: when one comes out of
    line)."""
    steps = step_sizes(ns, repeats)
    steps += [n for n in ns if n > SHORT_N for _ in range(repeats * (SHORT_FACTOR - 1))]
    return 128 + max(steps) + sum(SETTLE + 1 + (n if n > 1 else 0) for n in steps)


def how_long(ns: Sequence[int] = MEASURE_NS, repeats: int = REPEATS) -> str:
    """What measuring costs, in the one wording the window, the CLI's help and its notes use: a
    batch of n tokens never costs more than n plain steps, so the measurement takes no longer
    than a plain reply of as many tokens as it decodes (on a GPU far less)."""
    tokens = math.ceil(tokens_decoded(ns, repeats) / 100) * 100
    return f"no longer than a plain reply of {tokens} tokens"


def note_unmeasured(stats: GenerationStats) -> None:
    """Add `UNMEASURED_NOTE` to a reply's note (once)."""
    if UNMEASURED_NOTE not in stats.note:
        stats.note = f"{stats.note}; {UNMEASURED_NOTE}" if stats.note else UNMEASURED_NOTE


# -- a measurement in steps -------------------------------------------------------------------
@dataclass
class Measurement:
    """One measurement of the curve for `key`, taken a step at a time on whatever runtime holds
    that model (a reload with the same key goes on where it was). `step(rt)` runs the next
    step; `curve` is set once the last one ran."""

    key: str | None
    ns: tuple[int, ...] = MEASURE_NS
    repeats: int = REPEATS
    curve: CostCurve | None = None
    done: int = 0  # steps taken (the warm-up included)
    _sizes: list[int] = field(default_factory=list)
    _ones: list[float] = field(default_factory=list)
    _pairs: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    _warm: weakref.ref[ModelRuntime] | None = None  # the runtime warmed up last
    _wall_s: float = 0.0
    _others_s: float = 0.0
    _cpus: int = 1
    _counters: MachineCounters | None = None

    def __post_init__(self) -> None:
        self.ns = tuple(sorted(set(self.ns) | {1}))
        if self.ns[-1] > ROWS_MAX:
            raise CostCurveError(f"a decode returns at most {ROWS_MAX} rows, not {self.ns[-1]}")
        if self.repeats < 1:
            raise CostCurveError("repeats must be at least 1")
        self._sizes = step_sizes(self.ns, self.repeats)
        self._pairs = {n: [] for n in self.ns if n > 1}

    @property
    def total(self) -> int:
        """Steps in all: the warm-up and one per timed pair."""
        return 1 + len(self._sizes)

    @property
    def finished(self) -> bool:
        return self.curve is not None

    def status(self) -> str:
        """What the window says while it measures in the background."""
        return (
            f"{MEASURING}, between replies (step {self.done} of {self.total}); until then "
            "Auto prices drafts from each reply's own passes."
        )

    def step(self, rt: ModelRuntime) -> CostCurve | None:
        """Run the next step on `rt` (a warm-up first on a runtime not warmed up yet); returns
        the curve after the last one. Raises CostCurveError when the context has no room."""
        if self.curve is not None:
            return self.curve
        top = self.ns[-1]
        if top + 2 > rt.n_ctx:
            raise CostCurveError(f"no room to measure the cost curve: {top + 2} > {rt.n_ctx}")
        tok = filler_tokens(rt)
        n0 = len(rt.cache)
        if n0 + top + 2 > rt.n_ctx:  # a long conversation: measure on the filler alone
            rt.truncate(0)
            n0 = len(rt.cache)
        base = max(n0, min(len(tok), rt.n_ctx - top - 2))
        own_chain = rt.sampler.active
        rt.use_sampler(GREEDY_CHAIN)  # the chain a greedy request verifies with, in the graph
        try:
            if n0 < base:  # a step of its own, left in place; a reply cuts it off
                rt.decode(tok[: base - n0], logits_for="none")
                return None
            warm = self._warm() if self._warm is not None else None
            if warm is not rt:  # buffers sized, weights touched
                rt.decode(tok[:top], logits_for="all")
                rt.truncate(base)
                self._warm = weakref.ref(rt)
                if self.done == 0:
                    self.done = 1
                    return None
            self._timed_pair(rt, tok, self._sizes[self.done - 1])
            rt.truncate(base)
        finally:
            rt.use_sampler(own_chain)
        self.done += 1
        if self.done == self.total and (more := more_pairs(self._pairs, self.repeats)):
            self._sizes += [more[0]] * more[1]  # a batch timed out of line: timed again
        if self.done == self.total:
            capacity = self._wall_s * self._cpus
            share = min(1.0, self._others_s / capacity) if capacity > 0 else None
            self.curve = curve_from_pairs(self._ones, self._pairs, share)
        return self.curve

    def _timed_pair(self, rt: ModelRuntime, tok: Sequence[int], n: int) -> None:
        """SETTLE one-token decodes, then a timed one and (n > 1) a timed one of n tokens
        right after it, with other programs' use of the CPU meanwhile."""
        if self._counters is None:
            self._counters = MachineCounters()
        with CpuMeter(counters=self._counters) as meter:
            for _ in range(SETTLE):
                rt.decode(tok[:1], logits_for="last")
            one = timed_decode(rt, tok[1:2], "last")
            self._ones.append(one)
            if n > 1:
                self._pairs[n].append((one, timed_decode(rt, tok[2 : 2 + n], "all")))
        if meter.use is not None:
            self._wall_s += meter.use.wall_s
            self._others_s += meter.use.others_s
            self._cpus = meter.use.cpus

    def drain(self, rt: ModelRuntime) -> CostCurve:
        """Every step left, one after another."""
        curve = self.curve
        while curve is None:
            curve = self.step(rt)
        return curve


# -- the policy -------------------------------------------------------------------------------
class CurvePolicy:
    """When the target's curve is measured and where it comes from (the module's docstring).

    `pace(steps_done)`: whether the next background step may run now (None: always); a caller
    that returns False is asked again later (the window's test holds a measurement in progress
    with it, to look at the window meanwhile)."""

    def __init__(
        self,
        store: CurveStore | None = None,
        pace: Callable[[int], bool] | None = None,
    ) -> None:
        self.store = store if store is not None else CurveStore()
        self.pace = pace
        self._running: dict[str | None, Measurement] = {}
        self._retried: set[str | None] = set()  # keys whose disturbed curve is measured again

    def begin(self, engine: Engine) -> Measurement | None:
        """A target was loaded: price with its kept curve at once, and return the measurement
        to take in the background (None: nothing to measure). Until it finishes the engine
        prices with the cost model's online line (or the disturbed kept curve)."""
        key = curve_key(engine)
        kept = self.store.get(key)
        engine.use_cost_curve(kept)
        if kept is not None and not kept.disturbed:
            return None
        if kept is not None and key in self._retried:
            return None  # measured again once in this process: that one is kept
        self._retried.add(key)
        m = self._running.get(key)
        if m is None or m.finished:
            m = self._running[key] = Measurement(key)
        return m

    def may_step(self, m: Measurement) -> bool:
        return self.pace is None or self.pace(m.done)

    def step(self, engine: Engine, m: Measurement) -> bool:
        """One background step on `engine` (between replies); True once the curve is measured
        (and in use, and kept) or cannot be (the online line stays)."""
        try:
            curve = engine.measure_step(m.step)
        except CostCurveError:
            log.info("the cost curve cannot be measured here", exc_info=True)
            self._running.pop(m.key, None)
            return True
        if curve is None:
            return False
        self._finish(engine, m, curve)
        return True

    def _finish(self, engine: Engine, m: Measurement, curve: CostCurve) -> None:
        self._running.pop(m.key, None)
        kept = self.store.get(m.key)
        if kept is None or _quieter(curve, kept):
            self.store.put(m.key, curve)
        else:
            curve = kept
        engine.use_cost_curve(curve)

    def now(self, engine: Engine, on_start: Callable[[str], None] | None = None) -> CostCurve:
        """The kept curve, else one measured at once (`on_start` hears what is happening):
        for a command that asks Auto or Lookup for one reply. In use on return."""
        key = curve_key(engine)
        kept = self.store.get(key)
        if kept is not None:
            engine.use_cost_curve(kept)
            return kept
        if on_start is not None:
            on_start(f"{MEASURING[0].lower()}{MEASURING[1:]}, once per model file ({how_long()})…")
        m = Measurement(key)
        curve = engine.measure_step(m.drain)
        self._finish(engine, m, curve)
        return curve

    def fresh(self, engine: Engine, k_max: int) -> CostCurve:
        """Measured now with `k_max + 1` the longest decode (the bench's points, finer than the
        window's), kept, and in use; whatever was kept before."""
        curve = engine.measure_cost_curve(k_max=k_max)
        self.store.put(curve_key(engine), curve)
        engine.use_cost_curve(curve)
        return curve


def _quieter(new: CostCurve, old: CostCurve) -> bool:
    """Whether `new` was measured with less of the CPU taken by other programs than `old`."""
    shares = [1.0 if s is None else s for s in (new.others_share, old.others_share)]
    return shares[0] <= shares[1]
