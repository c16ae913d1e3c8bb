"""What speculation costs on a model, in one-token decodes of its target.

Speculation pays when the tokens a step keeps cost less than the plain steps they replace. On
a hybrid target (Qwen3.5's delta-net layers, LFM2's convolutions) and with a drafter that reads
the target's hidden states (an MTP head, a Gemma 4 assistant) a step holds more than a
verification: `measure_drafter_costs` loads the target (and its head) with the real runtime and
times each piece, every one relative to a one-token decode of the target timed just before it
(the pairing of `pricing.cost_curve.measure_cost_curve`: a slow spell of the machine slows both
halves of a pair), each figure the median of its pairs' ratios:

- **verification**: one decode of k + 1 tokens (the last accepted token and k drafts), every
  row's logits, for k in `KS`;
- **head step**: `MTPDrafter.propose` of k tokens, per drafted token (one head decode each and
  reading its row);
- **head catch-up**: `MTPDrafter.observe_target` after a verification of k + 1 tokens (an MTP
  head decodes the batch's pairs into its own cache; an assistant only copies hidden states);
- **snapshot** (hybrid targets): the extra cost of a k + 1 decode with llama.cpp's recurrent
  state snapshots (`n_rs_seq`) over the same model loaded without them (`rollback_tokens=0`),
  both paired with their own one-token decode, round by round;
- **rollback** (hybrid targets): cutting j tokens off a j + 1 verification (`truncate`: none of
  the draft kept) and the one-token decode after it, which restores the state from a snapshot.

Random weights draft noise: figures measured on generated models say what each piece costs, never
how many drafts would be kept, so no acceptance or speedup follows from them.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specchat.core.bench.drafter_cost_figures import DrafterCosts
from specchat.core.decoding.choosing.backend_sampler import SamplerSpec
from specchat.core.decoding.drafters import heads, mtp
from specchat.core.decoding.drafters.base import DraftSettings
from specchat.core.decoding.pricing.cost_curve import GREEDY_CHAIN, SETTLE, filler_tokens
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.machine.busy import CpuMeter

KS = (1, 2, 4, 8)  # draft lengths: a verification of k + 1 tokens, a rollback of k
_FILLER = 128  # context the timed decodes sit on


class DrafterCostError(ValueError):
    pass


class _Target:
    """A runtime with the filler it decodes and a clock: keeps room in its context (a hybrid's
    cache cannot be cut back far, so it grows and starts over when full)."""

    def __init__(self, rt: ModelRuntime, observe: Callable[[list[int], int, str], None] | None):
        self.rt = rt
        self.tok = filler_tokens(rt)
        self.base = min(_FILLER, rt.n_ctx // 4)
        self.observe = observe  # the drafter's observe_target, shown every decode
        self.i = 0

    def token(self) -> int:
        self.i += 1
        return self.tok[self.i % len(self.tok)]

    def tokens(self, n: int) -> list[int]:
        return [self.token() for _ in range(n)]

    def decode(self, tokens: list[int], rows: str) -> float:
        """Decode; returns the seconds inside llama_decode."""
        rt = self.rt
        start = len(rt.cache)
        before, t0 = rt.llama_s, time.perf_counter()
        rt.decode(tokens, logits_for=rows)
        spent = rt.llama_s - before
        spent = spent if spent > 0 else time.perf_counter() - t0
        if self.observe is not None:
            self.observe(tokens, start, rows)
        return spent

    def room(self, need: int, restart: Callable[[], None] | None = None) -> None:
        """Start over on the filler when the cache is empty or `need` more tokens would not
        fit (`restart` first: the drafter forgets the old context)."""
        rt = self.rt
        if rt.cache and len(rt.cache) + need + 2 <= rt.n_ctx:
            return
        rt.reset()
        if restart is not None:
            restart()
        self.decode(self.tok[: self.base], "last")

    def settled_one(self) -> float:
        """SETTLE untimed one-token decodes, then a timed one (the steady plain step)."""
        for _ in range(SETTLE):
            self.decode([self.token()], "last")
        return self.decode([self.token()], "last")


def _median_ratios(pairs: dict[int, list[tuple[float, float]]]) -> dict[int, float]:
    return {k: statistics.median(b / a for a, b in p if a > 0.0) for k, p in pairs.items() if p}


def _finite(d: dict[int, float]) -> dict[int, float]:
    return {k: v for k, v in d.items() if math.isfinite(v)}


def _runtime(path: Path, n_ctx: int, threads: int, gpu_layers: int, rollback: int) -> ModelRuntime:
    config = RuntimeConfig(n_ctx=n_ctx, n_threads=threads, n_gpu_layers=gpu_layers)
    return ModelRuntime(path, config, rollback_tokens=rollback)


def _what_to_measure(
    path: Path,
    drafter: str | os.PathLike[str] | None,
    head: bool,
    ks: Sequence[int],
    repeats: int,
    n_ctx: int,
) -> tuple[list[int], heads.HeadInfo | None]:
    """The draft lengths to measure, sorted, and the head that drafts for the target (None:
    none found, or `head=False`); DrafterCostError where the request cannot be measured
    (before anything is loaded)."""
    if not path.is_file():
        raise DrafterCostError(f"no model file at {path}")
    lengths = sorted(set(ks))
    if not lengths or lengths[0] < 1 or lengths[-1] > 64:
        raise DrafterCostError("draft lengths are between 1 and 64")
    if repeats < 1:
        raise DrafterCostError("repeats must be at least 1")
    if n_ctx < _FILLER + 4 * (SETTLE + lengths[-1] + 4):
        raise DrafterCostError(f"a {n_ctx}-token context is too small to measure in")
    if not head:
        return lengths, None
    try:
        head_info = heads.find_head(path, assistant=drafter)
    except ValueError as exc:
        raise DrafterCostError(str(exc)) from exc
    if drafter is not None and head_info is None:
        raise DrafterCostError(f"{Path(drafter).name} cannot draft for {path.name}")
    return lengths, head_info


def measure_drafter_costs(
    target_path: str | os.PathLike[str],
    drafter: str | os.PathLike[str] | None = None,
    *,
    head: bool = True,
    ks: Sequence[int] = KS,
    repeats: int = 5,
    threads: int = 0,
    gpu_layers: int = 0,
    n_ctx: int = 1024,
    sampler: SamplerSpec | None = GREEDY_CHAIN,
    progress: Callable[[str], None] | None = None,
) -> DrafterCosts:
    """Load the target (and its head: `drafter`, an MTP file or Gemma 4 assistant; None: the
    one `find_head` finds, built in or beside the target; `head=False`: none) and measure what
    each piece of a speculative step costs relative to one target token decode. `repeats`
    pairs per figure, `threads` 0 = the runtime's default, `gpu_layers` -1 = all. `sampler`:
    the chain llama.cpp runs in the target's graph (a greedy reply's argmax, as
    `doctor --cost-curve` times it). Raises DrafterCostError (or the runtime's ModelLoadError)
    with a readable message."""
    path = Path(target_path)
    ks, head_info = _what_to_measure(path, drafter, head, ks, repeats, n_ctx)
    say = progress or (lambda _s: None)

    def load(rollback: int) -> ModelRuntime:
        rt = _runtime(path, n_ctx, threads, gpu_layers, rollback)
        rt.use_sampler(sampler)
        return rt

    # snapshots for the longest draft measured (what an engine asks for: llama.cpp writes
    # min(tokens, n_rs_seq + 1) states a decode, so more would only take memory)
    rt = load(ks[-1])
    try:
        hybrid = rt.recurrent
        if hybrid and rt.n_rs_seq < ks[-1]:
            raise DrafterCostError(
                f"{path.name} keeps {rt.n_rs_seq} state snapshots: a rollback of "
                f"{ks[-1]} tokens cannot be measured"
            )
        snap = snap_on = snap_off = head_step = catch_up = with_head = None
        notes: list[str] = []
        with CpuMeter(name_processes=False) as meter:
            say("target: verification and rollback")
            verify, rollback, t1 = _verify_and_rollback(rt, ks, repeats, hybrid)
            if hybrid:
                say("target without snapshots: the snapshot's cost")
                snap, snap_on, snap_off = _snapshot(rt, lambda: load(0), ks, repeats)
            if head_info is not None:
                say(f"drafter: {head_info.name}")
                head_step, catch_up, with_head = _head(rt, head_info, ks, repeats)
                if head_info.kind == heads.BUILTIN and not getattr(rt, "load_mtp", False):
                    notes.append(
                        "The built-in head runs on its own load of the target file (mmap: "
                        "shared pages on a CPU)."
                    )
        use = meter.use
        return DrafterCosts(
            target=path.name,
            arch=rt.info.architecture or "?",
            hybrid=hybrid,
            n_rs_seq=rt.n_rs_seq,
            snapshot_mib=rt.snapshot_bytes / 2**20,
            where=rt.where,
            threads=rt.threads,
            t1_ms=t1 * 1000,
            repeats=repeats,
            verify=verify,
            drafter=None if head_info is None else head_info.name,
            drafter_kind=None if head_info is None else head_info.kind,
            head_step=head_step,
            catch_up=catch_up,
            verify_with_head=with_head,
            snapshot=snap,
            verify_snap=snap_on,
            verify_plain=snap_off,
            rollback=rollback,
            others_share=use.others_share if use is not None else None,
            notes=notes,
        )
    finally:
        rt.close()


def _verify_and_rollback(
    rt: ModelRuntime, ks: Sequence[int], repeats: int, hybrid: bool
) -> tuple[dict[int, float], dict[int, float] | None, float]:
    """A round per k: a settled one-token decode, then a k + 1 decode (all rows), then a cut
    of k (a verification that kept none of the draft) and the next one-token decode."""
    t = _Target(rt, None)
    t.room(0)  # the filler
    t.decode(t.tokens(ks[-1] + 1), "all")  # warm-up: buffers sized, weights touched
    t.rt.truncate(len(rt.cache) - ks[-1])
    verify: dict[int, list[tuple[float, float]]] = {k: [] for k in ks}
    cut: dict[int, list[tuple[float, float]]] = {k: [] for k in ks}
    ones: list[float] = []
    for _ in range(repeats):
        for k in ks:
            t.room(SETTLE + k + 4)
            one = t.settled_one()
            ones.append(one)
            start = len(rt.cache)
            verify[k].append((one, t.decode(t.tokens(k + 1), "all")))
            t0 = time.perf_counter()
            ok = rt.truncate(start + 1)
            spent = time.perf_counter() - t0
            if not ok:
                raise DrafterCostError(f"the target refused a cut of {k} tokens")
            spent += t.decode([t.token()], "last")
            cut[k].append((one, spent))
    rollback = _finite(_median_ratios(cut)) if hybrid else None
    return _finite(_median_ratios(verify)), rollback, statistics.median(ones)


def _snapshot(
    snap: ModelRuntime, load_plain: Callable[[], ModelRuntime], ks: Sequence[int], repeats: int
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """The same round on both loads (the target without snapshots loaded for it, closed
    after), one after the other: a settled one-token decode and a k + 1 decode, kept (no cut:
    the load without snapshots cannot cut). The snapshot's cost is the median of the rounds'
    differences between the two ratios."""
    plain = load_plain()
    try:
        return _snapshot_rounds(snap, plain, ks, repeats)
    finally:
        plain.close()


def _snapshot_rounds(
    snap: ModelRuntime, plain: ModelRuntime, ks: Sequence[int], repeats: int
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    a, b = _Target(snap, None), _Target(plain, None)
    for t in (a, b):
        t.room(0)
        t.decode(t.tokens(ks[-1] + 1), "all")
    on: dict[int, list[float]] = {k: [] for k in ks}
    off: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(repeats):
        for k in ks:
            for t, out in ((a, on), (b, off)):
                t.room(SETTLE + k + 4)
                one = t.settled_one()
                out[k].append(t.decode(t.tokens(k + 1), "all") / one)
    extra = {k: statistics.median(x - y for x, y in zip(on[k], off[k], strict=True)) for k in ks}
    return (
        _finite(extra),
        _finite({k: statistics.median(v) for k, v in on.items()}),
        _finite({k: statistics.median(v) for k, v in off.items()}),
    )


def _head(
    rt: ModelRuntime, head: heads.HeadInfo, ks: Sequence[int], repeats: int
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """The head's figures, its drafter attached to `rt` for them (closed after)."""
    d = mtp.MTPDrafter(rt, head, k_init=ks[-1], k_max=ks[-1])
    try:
        return _head_rounds(rt, d, ks, repeats)
    finally:
        d.close()


def _head_rounds(
    rt: ModelRuntime, d: Any, ks: Sequence[int], repeats: int
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """A round per k with the drafter attached: a settled one-token decode (each decode shown
    to the drafter), a proposal of k tokens (timed, per head step), the k + 1 verification of
    them and the head's catch-up on it (both timed), a cut of k."""
    t = _Target(rt, d.observe_target)
    t.room(0, lambda: d.begin([]))
    greedy = DraftSettings()
    step: dict[int, list[tuple[float, float]]] = {k: [] for k in ks}
    catch: dict[int, list[tuple[float, float]]] = {k: [] for k in ks}
    verify: dict[int, list[tuple[float, float]]] = {k: [] for k in ks}
    for r in range(repeats + 1):  # the first round warms the head up, untimed
        for k in ks:
            t.room(SETTLE + k + 4, lambda: d.begin([]))
            one = t.settled_one()
            nxt = t.token()
            context = [*rt.cache, nxt]
            steps0, t0 = d.steps, time.perf_counter()
            prop = d.propose(context, k, greedy)
            spent, n_steps = time.perf_counter() - t0, d.steps - steps0
            if n_steps == 0:
                raise DrafterCostError(f"{d.name} drafted nothing after a target decode")
            draft = list(prop.tokens)[:k]
            draft += t.tokens(k - len(draft))  # a draft cut short (an end token) filled up
            batch = [nxt, *draft]
            start = len(rt.cache)
            before, t1 = rt.llama_s, time.perf_counter()
            rt.decode(batch, logits_for="all")
            v = rt.llama_s - before or time.perf_counter() - t1
            t2 = time.perf_counter()
            d.observe_target(batch, start, "all")
            c = time.perf_counter() - t2
            if not rt.truncate(start + 1):
                raise DrafterCostError(f"the target refused a cut of {k} tokens")
            d.rollback(start + 1)
            if r:
                step[k].append((one, spent / n_steps))
                catch[k].append((one, c))
                verify[k].append((one, v))
    return (
        _finite(_median_ratios(step)),
        _finite(_median_ratios(catch)),
        _finite(_median_ratios(verify)),
    )
