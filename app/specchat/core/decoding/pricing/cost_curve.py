"""The target's cost curve: what one `llama_decode` of n tokens costs, relative to one token.

On a CPU a batch is far from free (decoding is compute-bound: on 2 cores 9 tokens cost ~7.5x
one token); on a GPU it is cheaper but not free: an H100 running the 1.5B target through
llama.cpp measured 2.2 one-token decodes for 2 tokens, 4.8 for 33 and 7.4 for 65 (a one-token
decode replays a captured CUDA graph, a batch after plain steps runs without one, and a greedy
reply's argmax chain in the graph costs more per row; docs/gpu.md).
The curve decides how long a draft is worth verifying, and it bounds
what speculation can gain: with tau tokens per target pass, a pass of n tokens has to cost
less than tau one-token passes to win anything.

`measure_cost_curve` times real decodes of n tokens appended to the runtime's cache (on a
filler context when the cache is short, so attention has something to read), each right after a
one-token decode timed with it (as a verification follows plain steps; that one after two
others, so that a GPU backend replays its captured one-token graph as plain decoding does),
and cuts the cache back to what it held before. Each n's cost is the median of its pairs'
ratios: a slow spell of the machine slows both halves of a pair, and one slow one-token decode
cannot shift every ratio (with the fastest of three, one such decode priced every batch ~10 %
too cheap here).
`CostCurve.flat()` is an idealised GPU: every n costs one token's time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from specchat.core.decoding.choosing.backend_sampler import GREEDY, ROWS_MAX, SamplerSpec
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.machine.busy import BUSY_SHARE, CpuMeter

MEASURED = "measured"
FLAT = "flat"
CURVE_CHOICES = (MEASURED, FLAT)
KEY_POINTS = (2, 5, 9, 17, 33, 65)  # the figures doctor and the reports show

_FILLER = 128  # context tokens the timed decodes sit on when the cache holds fewer


class CostCurveError(ValueError):
    pass


@dataclass(frozen=True)
class CostCurve:
    """Relative cost of one decode of n tokens, cost(n) / cost(1), at the measured n; between
    them linear, beyond the last one the slope over the last half of the measured range (one
    segment's slope is noise: llama.cpp's CPU kernels change at some batch sizes, and a curve
    measured to 17 here was flat from 11 to 15, so its last segment priced 65 tokens at 14.7
    decodes where they cost 24), never below the last point."""

    points: tuple[tuple[int, float], ...]  # (n, relative cost), n ascending, starting (1, 1.0)
    source: str = MEASURED  # MEASURED or FLAT
    t1_s: float | None = None  # seconds of a one-token decode when it was measured
    others_share: float | None = None  # other programs' share of the CPU while it was measured

    def __post_init__(self) -> None:
        ns = [n for n, _ in self.points]
        if not ns or ns[0] != 1 or ns != sorted(set(ns)):
            raise CostCurveError("a cost curve starts at n = 1 and has ascending, distinct n")
        if any(not c > 0.0 for _, c in self.points):
            raise CostCurveError("a cost curve's relative costs must be positive")

    @classmethod
    def flat(cls) -> CostCurve:
        """Verifying n tokens costs what one does (a GPU running a small model)."""
        return cls(((1, 1.0),), FLAT)

    @property
    def is_flat(self) -> bool:
        return self.source == FLAT

    def rel(self, n: int) -> float:
        """cost(n) / cost(1)."""
        pts = self.points
        if n <= 1 or len(pts) == 1:
            return 1.0
        for (n0, c0), (n1, c1) in zip(pts, pts[1:], strict=False):
            if n <= n1:
                return c0 + (c1 - c0) * (n - n0) / (n1 - n0)
        n1, c1 = pts[-1]
        n0 = max(1, n1 // 2) if n1 >= 4 else pts[-2][0]
        c0 = self.rel(n0)
        return c1 + max(0.0, (c1 - c0) / (n1 - n0)) * (n - n1)

    def table(self, up_to: int) -> list[float]:
        """[rel(0)=1, rel(1), ..., rel(up_to)]: the planner's lookup table."""
        return [1.0] + [self.rel(n) for n in range(1, up_to + 1)]

    def key_points(self, up_to: int | None = None) -> list[tuple[int, float]]:
        """The figures worth showing: n = 2, 5, 9, 17, ... within the measured range."""
        top = up_to if up_to is not None else self.points[-1][0]
        return [(n, self.rel(n)) for n in KEY_POINTS if n <= max(top, 1)]

    def describe(self, up_to: int | None = None) -> str:
        if self.is_flat:
            return "flat (verifying n tokens costs one token's time: an idealised GPU)"
        pts = ", ".join(f"{n} → {c:.2f}" for n, c in self.key_points(up_to))
        t1 = f"; one token {self.t1_s * 1000:.1f} ms" if self.t1_s else ""
        return f"cost of a decode of n tokens relative to one: {pts}{t1}{self.warning()}"

    @property
    def disturbed(self) -> bool:
        return self.others_share is not None and self.others_share > BUSY_SHARE

    def warning(self) -> str:
        """What to make of a curve measured while other programs used the CPU."""
        if not self.disturbed:
            return ""
        return (
            f" (measured while other programs used {self.others_share:.0%} of the CPU: not "
            "this machine's quiet curve, and a busy CPU's curve usually comes out flatter; it "
            "is measured again when the CPU is quiet)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "t1_ms": None if self.t1_s is None else self.t1_s * 1000,
            "points": [[n, c] for n, c in self.points],
            "others_share": self.others_share,
        }


def passes_by_length(draft_pos_proposed: Sequence[int]) -> list[int]:
    """Verification passes per draft length from the per-position counts: position i was
    proposed by every pass that drafted more than i tokens, so passes with exactly k drafted
    tokens = proposed[k - 1] - proposed[k]. Returns counts for k = 1, 2, ..."""
    p = list(draft_pos_proposed) + [0]
    return [max(0, p[i] - p[i + 1]) for i in range(len(p) - 1)]


def decode_cost(curve: CostCurve, draft_pos_proposed: Sequence[int], plain_steps: int) -> float:
    """The target's passes after the first token, in one-token decodes."""
    by_k = passes_by_length(draft_pos_proposed)
    return plain_steps + sum(c * curve.rel(k + 1) for k, c in enumerate(by_k, start=1))


def ceiling(
    curve: CostCurve, tokens: int, draft_pos_proposed: Sequence[int], plain_steps: int
) -> float | None:
    """The speedup over plain decoding the passes made allow on this curve, drafting and host
    work free: (tokens after the first) / (their passes' cost in one-token decodes)."""
    cost = decode_cost(curve, draft_pos_proposed, plain_steps)
    return None if tokens < 2 or cost <= 0.0 else (tokens - 1) / cost


SHORT_N, SHORT_FACTOR = 9, 3  # batches of up to SHORT_N tokens are timed 3x as often
# untimed one-token decodes before the timed one: after a batch, llama.cpp's CUDA backend runs
# the first one-token graph directly and captures a CUDA graph on the second (H100, 1.5B:
# 2.96 ms), replaying it from the third on, as plain decoding does (1.85 ms)
SETTLE = 2
# what a default request (greedy) verifies with: its argmax in the graph, which costs more per
# row than raw logits on a GPU (H100, 65 rows: 14.2 ms against 10.0)
GREEDY_CHAIN = SamplerSpec(GREEDY)


def default_ns(k_max: int) -> list[int]:
    """n = 1..k+1: one by one up to 9, every other one up to 17, then a few points (the curve
    is smooth there and long decodes take a while), within the rows one decode may return."""
    top = min(k_max + 1, ROWS_MAX)
    ns = list(range(1, min(top, 9) + 1))
    ns += [n for n in (11, 13, 15, 17, 25, 33, 49, 65) if 9 < n <= top]
    if ns[-1] != top:
        ns.append(top)
    return ns


def filler_tokens(rt: ModelRuntime) -> list[int]:
    """The tokens the timed decodes use (and sit on): the same text for every runtime."""
    text = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. "
    tokens = rt.tokenize(text, add_special=False) or [rt.bos_id]
    return (tokens * (_FILLER // len(tokens) + 1))[:_FILLER]


def timed_decode(rt: ModelRuntime, tokens: Sequence[int], logits_for: str) -> float:
    """Seconds `rt` spent in llama_decode for these tokens (the wall clock where it counts none)."""
    before, t0 = rt.llama_s, time.perf_counter()
    rt.decode(tokens, logits_for=logits_for)
    spent = rt.llama_s - before
    return spent if spent > 0 else time.perf_counter() - t0


def measure_cost_curve(
    rt: ModelRuntime,
    ns: Sequence[int] | None = None,
    repeats: int = 3,
    *,
    k_max: int = 8,
    rows: str = "all",
    sampler: SamplerSpec | None = None,
) -> CostCurve:
    """Time `llama_decode` of n tokens for each n, each paired with the one-token decode just
    before it (itself after SETTLE others, the steady shape of plain steps); n's relative cost is
    the median of its pairs' ratios, the one-token time the median of all pairs'. Short batches
    (n <= SHORT_N: cheap to time, and what Auto's short drafts are decided on) get
    SHORT_FACTOR x `repeats` pairs: with 3 pairs, n = 2 came out anywhere in 1.63-2.13 from one
    measurement to the next; with 9, in 1.86-1.93. So does a longer batch whose median came out
    below a shorter one's. The cache ends as it began. `rows`: "all"
    (logits for every row, as a verification asks) or "last" (a prompt's shape, what llama.cpp's
    own tools time). `sampler`: the chain llama.cpp runs in the graph while timing (None: raw
    logits; the runtime's own chain is put back afterwards). Raises CostCurveError when the
    context has no room for it."""
    if rows not in ("all", "last"):
        raise CostCurveError(f"rows is 'all' or 'last', not {rows!r}")
    ns = sorted(set(ns if ns is not None else default_ns(k_max)) | {1})
    if ns[-1] > ROWS_MAX:
        raise CostCurveError(f"a decode returns at most {ROWS_MAX} rows, not {ns[-1]}")
    if repeats < 1:
        raise CostCurveError("repeats must be at least 1")
    n0 = len(rt.cache)
    if n0 + ns[-1] + 2 > rt.n_ctx:
        raise CostCurveError(
            f"no room to measure the cost curve: {n0} + {ns[-1] + 2} tokens > {rt.n_ctx}"
        )
    base = max(n0, min(_FILLER, rt.n_ctx - ns[-1] - 2))
    tok = filler_tokens(rt)

    with _borrowed(rt, sampler):
        if n0 < base:  # what the cache holds stays; filler after it, cut off at the end
            rt.decode(tok[: base - n0], logits_for="none")
        rt.decode(tok[: ns[-1]], logits_for="all")  # warm-up: buffers sized, weights touched
        rt.truncate(base)
        pairs: dict[int, list[tuple[float, float]]] = {n: [] for n in ns if n > 1}
        ones: list[float] = []

        def pair(n: int) -> None:
            for _ in range(SETTLE):  # back to the one-token shape, settled
                rt.decode(tok[:1], logits_for="last")
            one = timed_decode(rt, tok[1:2], "last")
            ones.append(one)
            if n > 1:
                pairs[n].append((one, timed_decode(rt, tok[2 : 2 + n], rows)))
            rt.truncate(base)

        with CpuMeter(name_processes=False) as meter:
            for r in range(repeats * SHORT_FACTOR):
                for n in ns:
                    if n <= SHORT_N or not r % SHORT_FACTOR:
                        pair(n)
            while (more := more_pairs(pairs, repeats)) is not None:
                for _ in range(more[1]):
                    pair(more[0])
    share = meter.use.others_share if meter.use is not None else None
    return curve_from_pairs(ones, pairs, share)


def more_pairs(pairs: dict[int, list[tuple[float, float]]], repeats: int) -> tuple[int, int] | None:
    """The first batch size, in order of n, timed cheaper than a shorter batch (the median of
    its pairs' ratios below a shorter n's) with fewer pairs than a short batch gets, and how
    many more it needs to have as many; None when every n is in line. Such a batch is a
    disturbed pair or two (65 tokens at 13.8 one-token decodes, below 49's, on a 2-core EPYC
    where four other measurements that hour said 18.2-21.0), which the rising curve would keep
    at the shorter batch's cost."""
    top, full = 0.0, repeats * SHORT_FACTOR
    for n in sorted(pairs):
        median = _median_ratio(pairs[n])
        if median < top and len(pairs[n]) < full:
            return n, full - len(pairs[n])
        top = max(top, median)
    return None


def _median_ratio(pairs: Sequence[tuple[float, float]]) -> float:
    ratios = [b / a for a, b in pairs if a > 0.0]
    return statistics.median(ratios) if ratios else 0.0


def measure_host_floor(
    rt: ModelRuntime, tokens: int = 24, *, sampler: SamplerSpec | None = GREEDY_CHAIN
) -> float:
    """Seconds per token outside llama_decode of the barest greedy loop: decode one token,
    read the token llama.cpp chose (the argmax of its row without a chain), decode that one,
    `tokens` times after SETTLE untimed steps. No decoding loop on this machine goes below it:
    each decode streams the model's weights through the CPU's caches, so what the host touches
    next comes from memory (on a 2-core EPYC with the 1.5B target the loop costs ~0.06 ms a
    token; reading the chosen token takes 26 us right after a decode, 2 us read again at once).
    The cache ends as it began; the runtime's own chain is put back."""
    if tokens < 1:
        raise CostCurveError("the host floor needs at least one token")
    n0 = len(rt.cache)
    if n0 + tokens + SETTLE + 1 > rt.n_ctx:
        raise CostCurveError(
            f"no room to measure the host floor: {n0} + {tokens + SETTLE + 1} tokens > {rt.n_ctx}"
        )
    with _borrowed(rt, sampler) as chained:

        def step(token: int) -> int:
            rows = rt.decode([token], logits_for="last")
            return rt.sampler.token(0) if chained else int(rows[0].argmax())

        token = filler_tokens(rt)[0]
        for _ in range(SETTLE + 1):
            token = step(token)
        llama0, t0 = rt.llama_s, time.perf_counter()
        for _ in range(tokens):
            token = step(token)
        wall, llama = time.perf_counter() - t0, rt.llama_s - llama0
    return max(0.0, wall - llama) / tokens


@contextmanager
def _borrowed(rt: ModelRuntime, sampler: SamplerSpec | None) -> Iterator[bool]:
    """The runtime with `sampler`'s chain in llama.cpp's graph (yields whether it runs there;
    None: raw logits), given back with its cache cut to what it held and its own chain."""
    n0, own_chain = len(rt.cache), rt.sampler.active
    chained = rt.use_sampler(sampler)
    try:
        yield chained
    finally:
        rt.truncate(n0)
        rt.use_sampler(own_chain)


def curve_from_pairs(
    ones: Sequence[float],
    pairs: dict[int, list[tuple[float, float]]],
    others_share: float | None = None,
) -> CostCurve:
    """A measured curve from one-token times and, for each n > 1, (one-token time, n-token
    time) pairs taken side by side: n's cost is the median of its pairs' ratios, never below
    a smaller n's; the one-token time is the median of `ones`."""
    if not ones or min(ones) <= 0.0:
        raise CostCurveError("a cost curve needs positive one-token times")
    ratios = {n: _median_ratio(p) for n, p in pairs.items() if any(a > 0.0 for a, _ in p)}
    return CostCurve(_rising(ratios), MEASURED, statistics.median(ones), others_share)


def curve_from_times(times: dict[int, list[float]], others_share: float | None = None) -> CostCurve:
    """A measured curve from each n's timings in seconds (n = 1 among them), taken apart from
    each other (llama-server's prompts): the median of each n, relative to one token's (the
    statistic `measure_cost_curve` uses), never below a smaller n's."""
    best = {n: statistics.median(v) for n, v in times.items() if v}
    if 1 not in best or best[1] <= 0.0:
        raise CostCurveError("a cost curve needs a positive one-token time")
    t1 = best[1]
    return CostCurve(_rising({n: t / t1 for n, t in best.items()}), MEASURED, t1, others_share)


def _rising(ratios: dict[int, float]) -> tuple[tuple[int, float], ...]:
    """The curve's points from each n's cost relative to one token (n = 1 is 1.0 whatever it
    says), each never below a smaller n's: noise aside, a batch never costs less than a
    smaller one."""
    points, top = [(1, 1.0)], 1.0
    for n in sorted(ratios):
        if n > 1:
            top = max(top, ratios[n])
            points.append((n, top))
    return tuple(points)


def measure_model(
    path: str | os.PathLike[str], *, k_max: int = 16, repeats: int = 3, gpu_layers: int = 0
) -> CostCurve:
    """Load a model on its own (a small context), measure its cost curve, close it: for
    `specchat-cli doctor --cost-curve`."""
    rt = ModelRuntime(path, RuntimeConfig(n_ctx=512, n_gpu_layers=gpu_layers))
    try:
        return measure_cost_curve(rt, repeats=repeats, k_max=k_max, sampler=GREEDY_CHAIN)
    finally:
        rt.close()
