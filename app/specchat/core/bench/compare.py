"""Side-by-side comparison: the same prompt, speculation off and then on (no Qt).

The two passes alternate in several short rounds (off, on, off, on, ...), all with the same seed
and settings, each from cold caches so their times to first token compare fairly. Each round
gives one speedup; `rounds.judge_rounds` makes the figure a user sees out of them: the median
with its spread, or no figure and the reason (another process took the CPU during a run, the
rounds disagree). The CPU use of every run is measured (`machine.busy.CpuMeter`) when the engine
runs in this process; a server's machine is not watched.

With greedy decoding the two texts should match; when they do not, the first differing token is
reported with the target's top-2 logit gap there: a near-tie that batched verification (several
rows per pass) rounded the other way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.core.bench.rounds import Verdict, judge_rounds
from specchat.core.engines.local import Engine, Message
from specchat.core.machine.busy import CpuMeter, CpuUse
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.types import GenerationStats, Mode, TokenEvent
from specchat.core.units import format_count

OnEvent = Callable[[str, TokenEvent], None]  # (pass name: "off" | "on", event)
Cancel = threading.Event | Callable[[], bool] | None

# A top-2 gap below this is a near-tie: how far a verification batch moved the margin between
# one-token decoding's two best tokens (docs/bench/batch_drift.py): up to 0.63 logits on CPUs,
# up to 1.94 on an H100 with CUDA (docs/gpu.md)
NEAR_TIE_LOGITS = 1.0
NEAR_TIE_GPU_LOGITS = 2.0
DEFAULT_ROUNDS = 3


@dataclass
class PassResult:
    """One pass of a comparison."""

    mode: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    gaps: list[float | None] = field(default_factory=list)  # target top-2 gap per token
    stats: GenerationStats = field(default_factory=GenerationStats)
    finish_reason: str | None = None
    cpu: CpuUse | None = None  # who used the CPU during the pass (None: not measured)

    @property
    def tokens_per_s(self) -> float:
        return self.stats.tokens_per_s

    def as_dict(self) -> dict[str, Any]:
        out = self.stats.to_dict()
        out["mode"] = self.mode
        out["finish_reason"] = self.finish_reason
        out["text"] = self.text
        out["cpu"] = None if self.cpu is None else self.cpu.as_dict()
        return out


@dataclass(frozen=True)
class Round:
    """One round: speculation off, then on."""

    off: PassResult
    on: PassResult

    @property
    def speedup(self) -> float | None:
        a, b = self.off.tokens_per_s, self.on.tokens_per_s
        return b / a if a > 0 and b > 0 else None

    def as_dict(self) -> dict[str, Any]:
        sp = self.speedup
        return {
            "off_tokens_per_s": round(self.off.tokens_per_s, 3),
            "on_tokens_per_s": round(self.on.tokens_per_s, 3),
            "speedup": None if sp is None else round(sp, 4),
            "off_cpu": None if self.off.cpu is None else self.off.cpu.as_dict(),
            "on_cpu": None if self.on.cpu is None else self.on.cpu.as_dict(),
        }


@dataclass(frozen=True)
class Divergence:
    """Where the two texts first differ."""

    index: int  # token index in the reply
    off_token: str  # the token's text, speculation off ("" when that reply had ended)
    on_token: str
    off_gap: float | None  # the target's top-1 minus top-2 logit at that position, off
    on_gap: float | None
    near_tie: bool
    explanation: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "off_token": self.off_token,
            "on_token": self.on_token,
            "off_top2_gap": None if self.off_gap is None else round(self.off_gap, 5),
            "on_top2_gap": None if self.on_gap is None else round(self.on_gap, 5),
            "near_tie": self.near_tie,
            "explanation": self.explanation,
        }


@dataclass
class CompareResult:
    """The comparison: the first round's passes (`off`, `on`: the ones streamed, whose texts
    are compared), every round, and the verdict on the speedup over the rounds."""

    off: PassResult
    on: PassResult
    params: GenerationParams
    identical: bool = False
    divergence: Divergence | None = None
    cancelled: bool = False
    rounds: list[Round] = field(default_factory=list)  # the rounds that finished
    verdict: Verdict | None = None
    repeatable: bool = True  # every round produced the same two texts

    @property
    def speedup(self) -> float | None:
        """Decode speed on / off (tokens per second) of `off` and `on`, the first round alone:
        the figure to show is `verdict` (the median over the rounds, or why there is none)."""
        return Round(self.off, self.on).speedup

    @property
    def reliable(self) -> bool:
        return not self.cancelled and self.verdict is not None and self.verdict.reliable

    def summary(self) -> str:
        if self.cancelled:
            return "comparison stopped before both passes finished"
        off, on = self.off.tokens_per_s, self.on.tokens_per_s
        parts = [f"first round off {off:.1f} tok/s, {self.on.mode} {on:.1f} tok/s"]
        if self.verdict is not None and self.reliable:
            parts.append(f"speedup {self.verdict.headline()}")
        elif self.verdict is not None:
            parts.append(f"no speedup figure: {self.verdict.reason}")
        if self.identical:
            parts.append("texts identical")
        elif self.divergence is not None:
            parts.append(f"texts differ at token {self.divergence.index}")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "mode": self.on.mode,
            "params": self.params.to_dict(),
            "off": self.off.as_dict(),
            "on": self.on.as_dict(),
            "speedup": round(v.median, 4) if self.reliable and v and v.median else None,
            "rounds": [r.as_dict() for r in self.rounds],
            "verdict": None if v is None else v.as_dict(),
            "identical": self.identical,
            "repeatable": self.repeatable,
            "divergence": None if self.divergence is None else self.divergence.as_dict(),
            "cancelled": self.cancelled,
            "summary": self.summary(),
        }


def _is_cancelled(cancel: Cancel) -> bool:
    if cancel is None:
        return False
    if isinstance(cancel, threading.Event):
        return cancel.is_set()
    return bool(cancel())


def _run_pass(
    engine: Engine,
    name: str,
    messages: Sequence[Message],
    params: GenerationParams,
    mode: Mode,
    on_event: OnEvent | None,
    cancel: Cancel,
    new_meter: Callable[[], CpuMeter] | None = None,
) -> PassResult:
    engine.reset_caches()  # every pass starts cold: fair time to first token
    # a server's CPU is not ours to watch
    meter = (new_meter or CpuMeter)() if isinstance(engine, Engine) else None
    with meter or contextlib.nullcontext():
        reply = Reply.collect(
            engine.generate(messages, params, mode, cancel),
            None if on_event is None else lambda ev: on_event(name, ev),
        )
    return PassResult(
        mode=mode.value,
        text=reply.text,
        token_ids=reply.token_ids,
        gaps=reply.gaps,
        stats=reply.final_stats,
        finish_reason=reply.finish_reason.value if reply.finish_reason else None,
        cpu=None if meter is None else meter.use,
    )


def near_tie_limit(engine: Engine) -> float:
    """The top-2 gap below which a greedy divergence is the backend's arithmetic."""
    return NEAR_TIE_GPU_LOGITS if getattr(engine, "target_on_gpu", False) else NEAR_TIE_LOGITS


def find_divergence(
    engine: Engine, off: PassResult, on: PassResult, params: GenerationParams
) -> Divergence | None:
    """The first token where the passes differ, explained; None when they agree."""
    a, b = off.token_ids, on.token_ids
    n = min(len(a), len(b))
    index = next((i for i in range(n) if a[i] != b[i]), None)
    if index is None:
        if len(a) == len(b):
            return None
        index = n

    def token_text(ids: list[int], i: int) -> str:
        if i >= len(ids):
            return ""
        return engine.target.piece(ids[i]).decode("utf-8", errors="replace")

    def gap(p: PassResult, i: int) -> float | None:
        return p.gaps[i] if i < len(p.gaps) else None

    off_gap, on_gap = gap(off, index), gap(on, index)
    limit = near_tie_limit(engine)
    on_gpu = limit > NEAR_TIE_LOGITS
    near_tie = off_gap is not None and off_gap < limit
    if index >= n:
        shorter = "off" if len(a) < len(b) else on.mode
        explanation = (
            f"the {shorter} reply ended after {format_count(n, 'token')} "
            f"({off.finish_reason} vs {on.finish_reason}); the tokens before are identical"
        )
    elif params.temperature > 0:
        explanation = (
            "sampling with the same seed: speculation draws its random numbers in a different "
            "order (draft acceptance, residual sampling), so both texts are valid samples of the "
            "same distribution but need not match"
        )
    elif near_tie:
        explanation = (
            f"a near-tie: the target's two best tokens were {off_gap:.3f} logits apart. "
            "Verification scores several positions in one batched pass, whose floating-point "
            "sums round slightly differently from one-token decoding"
            + (" (on a GPU by up to about 2 logits)" if on_gpu else "")
            + ", enough to swap two close candidates; from there the replies continue "
            "differently. "
            "Both are greedy decodes of the same model."
        )
    else:
        explanation = (
            "not a near-tie (the target's top-2 gap there is large): this should not happen "
            "with greedy decoding; please report it"
        )
    return Divergence(
        index=index,
        off_token=token_text(a, index),
        on_token=token_text(b, index),
        off_gap=off_gap,
        on_gap=on_gap,
        near_tie=near_tie,
        explanation=explanation,
    )


def run_comparison(
    engine: Engine,
    messages: Sequence[Message],
    params: GenerationParams,
    mode: Mode | str,
    on_event: OnEvent | None = None,
    cancel: Cancel = None,
    rounds: int = DEFAULT_ROUNDS,
    meter: Callable[[], CpuMeter] | None = None,
) -> CompareResult:
    """Run `messages` with speculation off, then with `mode`, for `rounds` rounds; compare them.

    `on_event(pass_name, event)` receives every TokenEvent of the first round ("off", then
    "on"); later rounds only measure. A cancel ends the current pass and skips the rest
    (`CompareResult.cancelled`); the rounds finished before it are kept. `meter` makes the CPU
    meter of each pass (default: `CpuMeter`, the operating system's counters).
    """
    mode = Mode.parse(mode)
    if mode is Mode.OFF:
        raise ValueError("compare speculation off with a speculative mode, not with off")
    if rounds < 1:
        raise ValueError(f"a comparison needs at least one round, not {rounds}")
    params = params.with_(record_top2=True).validate()
    done: list[Round] = []
    for i in range(rounds):
        stream = on_event if i == 0 else None
        off = _run_pass(engine, "off", messages, params, Mode.OFF, stream, cancel, meter)
        if _is_cancelled(cancel):
            if not done:
                return CompareResult(off, PassResult(mode=mode.value), params, cancelled=True)
            break
        on = _run_pass(engine, "on", messages, params, mode, stream, cancel, meter)
        if _is_cancelled(cancel) and done:
            break  # a later round stopped half-way: dropped
        done.append(Round(off, on))
        if _is_cancelled(cancel):
            break
    return _result(engine, params, done, cancelled=_is_cancelled(cancel))


def _result(
    engine: Engine, params: GenerationParams, done: list[Round], cancelled: bool
) -> CompareResult:
    measured = [r for r in done if r.speedup is not None]
    verdict = judge_rounds(
        [r.speedup for r in measured if r.speedup is not None],
        [[("speculation off", r.off.cpu), (r.on.mode, r.on.cpu)] for r in measured],
        watched=isinstance(engine, Engine),
    )
    first = done[0]
    result = CompareResult(first.off, first.on, params, cancelled=cancelled, rounds=done)
    result.verdict = verdict
    result.divergence = find_divergence(engine, first.off, first.on, params)
    result.identical = result.divergence is None and first.off.text == first.on.text
    result.repeatable = all(
        r.off.text == first.off.text and r.on.text == first.on.text for r in done
    )
    return result
