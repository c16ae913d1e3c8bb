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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.core.decoding.choosing.backend_sampler import SamplerSpec
from specchat.core.decoding.drafters import heads, mtp
from specchat.core.decoding.drafters.base import DraftSettings
from specchat.core.decoding.pricing.cost_curve import GREEDY_CHAIN, SETTLE, filler_tokens
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.machine.busy import BUSY_SHARE, CpuMeter

KS = (1, 2, 4, 8)  # draft lengths: a verification of k + 1 tokens, a rollback of k
NOISE_NOTE = (
    "Random weights draft noise: these figures price each piece of a speculative step; "
    "no acceptance rate or speedup follows from them."
)
_FILLER = 128  # context the timed decodes sit on


class DrafterCostError(ValueError):
    pass


@dataclass(frozen=True)
class DrafterCosts:
    """Costs relative to one one-token decode of the target (`t1_ms`). Every dict is keyed by
    k (draft tokens): `verify[k]` a k + 1 decode; `head_step[k]` one drafted token of a k-token
    proposal; `catch_up[k]` the head's work after a k + 1 verification; `snapshot[k]` the extra
    of a k + 1 decode for keeping snapshots (`verify_snap[k]` and `verify_plain[k]`: that decode
    with and without them, each against its own one-token decode); `rollback[k]` a cut of k
    tokens and the next one-token decode. Rows that do not apply are None."""

    target: str
    arch: str
    hybrid: bool
    n_rs_seq: int
    snapshot_mib: float
    where: str
    threads: int
    t1_ms: float
    repeats: int
    verify: dict[int, float]
    drafter: str | None = None
    drafter_kind: str | None = None
    head_step: dict[int, float] | None = None
    catch_up: dict[int, float] | None = None
    verify_with_head: dict[int, float] | None = None
    snapshot: dict[int, float] | None = None
    verify_snap: dict[int, float] | None = None
    verify_plain: dict[int, float] | None = None
    rollback: dict[int, float] | None = None
    others_share: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ks(self) -> list[int]:
        return sorted(self.verify)

    def rows(self) -> list[tuple[str, dict[int, float]]]:
        """The table's rows: (label, {k: relative cost}), the ones that apply."""
        out = [("verification: decode of k+1 tokens", self.verify)]
        if self.snapshot is not None:
            assert self.verify_snap is not None and self.verify_plain is not None
            out += [
                ("  again, with snapshots", self.verify_snap),
                ("  the same load without (n_rs_seq 0)", self.verify_plain),
                ("snapshot: what keeping them adds", self.snapshot),
            ]
        if self.rollback is not None:
            out.append(("rollback: cut k + next decode", self.rollback))
        if self.head_step is not None:
            assert self.catch_up is not None and self.verify_with_head is not None
            out += [
                ("head step, per drafted token", self.head_step),
                ("head catch-up per verification", self.catch_up),
                ("verification with the head attached", self.verify_with_head),
            ]
        return out

    def to_text(self) -> str:
        ks = self.ks
        kind = (
            f"hybrid, {self.n_rs_seq} state snapshots ({self.snapshot_mib:.1f} MiB)"
            if self.hybrid
            else "transformer"
        )
        lines = [
            f"Cost of speculation on {self.target} ({self.arch}, {kind}), on {self.where} "
            f"with {self.threads} thread{'s' if self.threads != 1 else ''}",
            f"relative to one target token decode ({self.t1_ms:.2f} ms); medians of "
            f"{self.repeats} pairs",
        ]
        if self.drafter is not None:
            lines.append(f"drafter: {self.drafter} ({self.drafter_kind})")
        width = max(len(label) for label, _ in self.rows())
        lines.append("")
        lines.append(" " * width + "".join(f" {'k=' + str(k):>7}" for k in ks))
        for label, values in self.rows():
            cells = "".join(_cell(values.get(k)) for k in ks)
            lines.append(f"{label:<{width}}{cells}")
        lines.append("")
        lines.extend(self.notes)
        if self.others_share is not None and self.others_share > BUSY_SHARE:
            lines.append(
                f"Other programs used {self.others_share:.0%} of the CPU meanwhile: "
                "not this machine's quiet figures."
            )
        lines.append(NOISE_NOTE)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        def keyed(d: dict[int, float] | None) -> dict[str, float] | None:
            return None if d is None else {str(k): round(v, 6) for k, v in sorted(d.items())}

        return {
            "target": self.target,
            "arch": self.arch,
            "hybrid": self.hybrid,
            "n_rs_seq": self.n_rs_seq,
            "snapshot_mib": round(self.snapshot_mib, 2),
            "where": self.where,
            "threads": self.threads,
            "t1_ms": round(self.t1_ms, 4),
            "repeats": self.repeats,
            "drafter": self.drafter,
            "drafter_kind": self.drafter_kind,
            "verify": keyed(self.verify),
            "verify_snap": keyed(self.verify_snap),
            "verify_plain": keyed(self.verify_plain),
            "snapshot": keyed(self.snapshot),
            "rollback": keyed(self.rollback),
            "head_step": keyed(self.head_step),
            "catch_up": keyed(self.catch_up),
            "verify_with_head": keyed(self.verify_with_head),
            "others_share": self.others_share,
            "notes": list(self.notes),
            "note": NOISE_NOTE,
        }


def _cell(v: float | None) -> str:
    """One table cell: two decimals, or two significant digits below 0.1 (a catch-up that
    only copies hidden states costs a few ten-thousandths of a decode)."""
    if v is None:
        return f" {'-':>7}"
    return f" {v:7.2f}" if abs(v) >= 0.1 else f" {v:7.2g}"


# -- timing ---------------------------------------------------------------------------------


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
) -> tuple[list[int], heads.HeadInfo | None]:
    """The draft lengths to measure, sorted, and the head that drafts for the target (None:
    none found, or `head=False`); DrafterCostError where the request cannot be measured."""
    if not path.is_file():
        raise DrafterCostError(f"no model file at {path}")
    lengths = sorted(set(ks))
    if not lengths or lengths[0] < 1 or lengths[-1] > 64:
        raise DrafterCostError("draft lengths are between 1 and 64")
    if repeats < 1:
        raise DrafterCostError("repeats must be at least 1")
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
    ks, head_info = _what_to_measure(path, drafter, head, ks, repeats)
    say = progress or (lambda _s: None)
    # snapshots for the longest draft measured (what an engine asks for: llama.cpp writes
    # min(tokens, n_rs_seq + 1) states a decode, so more would only take memory)
    rt = _runtime(path, n_ctx, threads, gpu_layers, ks[-1])
    plain: ModelRuntime | None = None
    d: Any = None
    try:
        hybrid = rt.recurrent
        if hybrid and rt.n_rs_seq < ks[-1]:
            raise DrafterCostError(
                f"{path.name} keeps {rt.n_rs_seq} state snapshots: a rollback of "
                f"{ks[-1]} tokens cannot be measured"
            )
        if n_ctx < _FILLER + 4 * (SETTLE + ks[-1] + 4):
            raise DrafterCostError(f"a {n_ctx}-token context is too small to measure in")
        rt.use_sampler(sampler)
        notes: list[str] = []
        with CpuMeter(name_processes=False) as meter:
            say("target: verification and rollback")
            verify, rollback, t1 = _verify_and_rollback(rt, ks, repeats, hybrid)
            snap = snap_on = snap_off = None
            if hybrid:
                say("target without snapshots: the snapshot's cost")
                plain = _runtime(path, n_ctx, threads, gpu_layers, 0)
                plain.use_sampler(sampler)
                snap, snap_on, snap_off = _snapshot(rt, plain, ks, repeats)
                plain.close()
                plain = None
            head_step = catch_up = with_head = None
            if head_info is not None:
                say(f"drafter: {head_info.name}")
                d = mtp.MTPDrafter(rt, head_info, k_init=ks[-1], k_max=ks[-1])
                head_step, catch_up, with_head = _head(rt, d, ks, repeats)
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
        if d is not None:
            d.close()
        if plain is not None:
            plain.close()
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
    snap: ModelRuntime, plain: ModelRuntime, ks: Sequence[int], repeats: int
) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """The same round on both loads, one after the other: a settled one-token decode and a
    k + 1 decode, kept (no cut: the load without snapshots cannot cut). The snapshot's cost is
    the median of the rounds' differences between the two ratios."""
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
