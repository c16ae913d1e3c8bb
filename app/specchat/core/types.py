"""Plain value types shared by the engine, the CLI and the GUI (no Qt, no llama.cpp)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Mode(str, Enum):
    """How the next reply is decoded. Chosen per call, so it can change between messages."""

    OFF = "off"
    DRAFT = "draft"
    LOOKUP = "lookup"
    MTP = "mtp"  # the target's own MTP head, or a Gemma 4 target's assistant
    AUTO = "auto"  # a cost model picks a drafter or plain decoding step by step

    @classmethod
    def parse(cls, value: str | Mode) -> Mode:
        if isinstance(value, Mode):
            return value
        try:
            return cls(value.strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(
                f"unknown speculation mode {value!r} (choose one of: {names})"
            ) from None


class FinishReason(str, Enum):
    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens reached
    CONTEXT = "context"  # the context window is full
    CANCELLED = "cancelled"
    ERROR = "error"  # a remote server or its connection failed mid-reply (partial text kept)


class EngineBusyError(RuntimeError):
    """A second generation was asked of an engine that is already generating."""


def acceptance_rate(drafted: int | None, accepted: int | None) -> float | None:
    """accepted / drafted; None when nothing was drafted (or a runner does not report it)."""
    if not drafted or accepted is None:
        return None
    return accepted / drafted


def mean_accepted_length(verify_tokens: int | None, verify_steps: int | None) -> float | None:
    """Tokens gained per verification pass (accepted drafts plus the target's own token; a pass
    the end of the reply cut short counts only what it produced)."""
    if not verify_steps or verify_tokens is None:
        return None
    return verify_tokens / verify_steps


_STATS_FIELDS = (
    "prompt_tokens",
    "tokens",
    "drafted",
    "accepted",
    "verify_steps",
    "verify_tokens",
    "target_steps",
    "k_current",
    "host_rows",
    "history_drafted",
    "history_accepted",
    "threads",
    "threads_wanted",
)
_STATS_TIMES = ("ttft_s", "elapsed_s", "decode_s", "prefill_s", "llama_s", "decode_llama_s")


@dataclass
class GenerationStats:
    """Running figures for one reply: a step's TokenEvent carries the live object (updated as
    the reply goes on; the window polls it), the last event a copy. The one shape of
    generation figures: the CLI, the benchmark, the history and the gauge all read this."""

    mode: str = Mode.OFF.value
    prompt_tokens: int = 0
    tokens: int = 0  # tokens emitted so far
    drafted: int = 0  # draft tokens proposed to the target (and not cut off by the end)
    accepted: int = 0  # of those, accepted by the target
    verify_steps: int = 0  # target passes that verified at least one draft token
    verify_tokens: int = 0  # tokens those passes produced (accepted drafts + the target's own)
    target_steps: int = 0  # target passes in the decode phase (not one that read only the end)
    draft_pos_proposed: list[int] = field(default_factory=list)  # per draft position
    draft_pos_accepted: list[int] = field(default_factory=list)
    ttft_s: float = 0.0  # request start -> first token
    elapsed_s: float = 0.0  # request start -> now
    decode_s: float = 0.0  # first token -> now; once the reply ended, -> its last token
    prefill_s: float = 0.0
    llama_s: float = 0.0  # time inside llama_decode (target and draft model, prompt included)
    decode_llama_s: float = 0.0  # of llama_s, the time after the first token
    host_rows: int = 0  # logits rows handed to the host path (0 when llama.cpp chose every token)
    threads: int = 0  # CPU threads the target decoded with (0: not said, e.g. a remote engine)
    threads_wanted: int = 0  # those it was loaded with (more than `threads`: a CPU was busy)
    k_current: int = 0
    # Where the latest draft came from: "conversation" (lookup in this chat), "history" (lookup
    # in the earlier conversations), "draft model", or "" (no draft yet)
    source: str = ""
    history_drafted: int = 0  # of `drafted`, tokens copied from the earlier conversations
    history_accepted: int = 0
    note: str = ""  # why speculation did or did not run
    # Where the speculation figures come from: "" = counted by SpecChat's own decoder; a remote
    # engine says "server-live" (streamed with the reply), "server-final" (the server's figures
    # for this reply, after it), "server-metrics" (the server's /metrics counters, before and
    # after the reply) or "none" (the server reports none for this reply).
    figures: str = ""

    @property
    def threads_note(self) -> str:
        """What a user reads when the reply decoded with fewer CPU threads than loaded."""
        if 0 < self.threads < self.threads_wanted:
            return (
                f"{self.threads} of {self.threads_wanted} threads: another program keeps a CPU busy"
            )
        return ""

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, or None when nothing was drafted (speculation off or idle)."""
        return acceptance_rate(self.drafted, self.accepted)

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens gained per verification pass."""
        return mean_accepted_length(self.verify_tokens, self.verify_steps)

    @property
    def per_position_acceptance(self) -> list[float]:
        return [
            a / p if p else 0.0
            for a, p in zip(self.draft_pos_accepted, self.draft_pos_proposed, strict=True)
        ]

    @property
    def tokens_per_s(self) -> float:
        """Decode speed the user sees: tokens after the first, per second from the first to
        the last (a last pass that read only the end token is not in it)."""
        if self.tokens >= 2 and self.decode_s > 0:
            return (self.tokens - 1) / self.decode_s
        if self.tokens == 1 and self.elapsed_s > 0:
            return 1.0 / self.elapsed_s
        return 0.0

    @property
    def host_ms_per_token(self) -> float | None:
        """Host overhead: wall time outside llama_decode, per generated token (ms)."""
        if not self.tokens:
            return None
        return max(0.0, self.elapsed_s - self.llama_s) * 1000.0 / self.tokens

    @property
    def decode_host_ms_per_token(self) -> float | None:
        """Host overhead in the decode phase: wall time outside llama_decode after the first
        token, per token after the first (ms)."""
        if self.tokens < 2 or self.decode_s <= 0:
            return None
        return max(0.0, self.decode_s - self.decode_llama_s) * 1000.0 / (self.tokens - 1)

    @property
    def setup_host_ms(self) -> float:
        """Host time of the request before its first token (drafters' set-up, index building,
        the first choice), outside llama_decode (ms)."""
        return max(0.0, self.ttft_s - (self.llama_s - self.decode_llama_s)) * 1000.0

    def count_verification(self, sent: int, good: int, produced: int, history: bool) -> None:
        """A verification pass: `sent` drafted tokens (all of them, refused or not, unless the
        reply ended first: then only the draft positions it got to), the first `good` of them
        accepted, `produced` tokens in all; `history`: drafted from earlier chats."""
        self.drafted += sent
        self.accepted += good
        if history:
            self.history_drafted += sent
            self.history_accepted += good
        self.verify_tokens += produced
        grow = sent - len(self.draft_pos_proposed)
        if grow > 0:
            self.draft_pos_proposed += [0] * grow
            self.draft_pos_accepted += [0] * grow
        for i in range(sent):
            self.draft_pos_proposed[i] += 1
        for i in range(good):
            self.draft_pos_accepted[i] += 1

    def copy(self) -> GenerationStats:
        out = object.__new__(GenerationStats)  # once per step: cheaper than replace()
        out.__dict__.update(self.__dict__)
        out.draft_pos_proposed = list(self.draft_pos_proposed)
        out.draft_pos_accepted = list(self.draft_pos_accepted)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Raw counts and times (read back by `from_dict`) plus the derived figures."""
        out: dict[str, Any] = {"mode": self.mode}
        for name in _STATS_FIELDS:
            out[name] = getattr(self, name)
        for name in _STATS_TIMES:
            out[name] = round(getattr(self, name), 6)
        out["draft_pos_proposed"] = list(self.draft_pos_proposed)
        out["draft_pos_accepted"] = list(self.draft_pos_accepted)
        out["note"] = self.note
        out["source"] = self.source
        out["figures"] = self.figures
        out["total_s"] = round(self.elapsed_s, 4)
        out["tokens_per_s"] = round(self.tokens_per_s, 3)
        out["acceptance_rate"] = _round(self.acceptance_rate, 4)
        out["mean_accepted_length"] = _round(self.mean_accepted_length, 4)
        out["per_position_acceptance"] = [round(x, 4) for x in self.per_position_acceptance]
        out["host_ms_per_token"] = _round(self.host_ms_per_token, 4)
        out["decode_host_ms_per_token"] = _round(self.decode_host_ms_per_token, 4)
        out["setup_host_ms"] = round(self.setup_host_ms, 3)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GenerationStats:
        """Read back `to_dict()`; unknown or ill-typed values keep their defaults. Records saved
        before the raw times were kept (only `total_s` and `tokens_per_s`) give back exactly
        those figures; their per-position counts were not saved and stay empty."""
        st = cls(mode=str(data.get("mode") or Mode.OFF.value))
        for name in _STATS_FIELDS:
            v = data.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                setattr(st, name, v)
        for name in _STATS_TIMES:
            v = data.get(name)
            if isinstance(v, (int, float)) and _is_number(v) and v >= 0:
                setattr(st, name, float(v))
        total = data.get("total_s")
        if "elapsed_s" not in data and isinstance(total, (int, float)) and _is_number(total):
            st.elapsed_s = float(total)
        tps = data.get("tokens_per_s")
        has_tps = isinstance(tps, (int, float)) and _is_number(tps) and tps > 0
        if "decode_s" not in data and has_tps and st.tokens > 1:
            st.decode_s = (st.tokens - 1) / float(tps)  # type: ignore[arg-type]
        if "verify_tokens" not in data and st.verify_steps:
            st.verify_tokens = st.accepted + st.verify_steps  # how older records counted
        proposed, accepted = data.get("draft_pos_proposed"), data.get("draft_pos_accepted")
        if (
            isinstance(proposed, list)
            and isinstance(accepted, list)
            and _int_list(proposed)
            and _int_list(accepted)
            and len(proposed) == len(accepted)
        ):
            st.draft_pos_proposed, st.draft_pos_accepted = list(proposed), list(accepted)
        note = data.get("note")
        st.note = note if isinstance(note, str) else ""
        source = data.get("source")
        st.source = source if isinstance(source, str) else ""
        figures = data.get("figures")
        st.figures = figures if isinstance(figures, str) else ""
        return st


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


@dataclass(frozen=True)
class Top2:
    """The target's two best tokens and their logits at one position (diagnostics)."""

    first_id: int
    first_logit: float
    second_id: int
    second_logit: float

    @property
    def gap(self) -> float:
        return self.first_logit - self.second_logit


@dataclass(slots=True)  # built once a step: a frozen dataclass's __init__ costs ~4x as much
class TokenEvent:
    """What one decoding step emitted: the accepted draft tokens and then the target's own token,
    in order (or, with finish_reason set, the end of the reply, usually with no tokens).

    `segments` is the text released by this step split by origin, as (text, from_draft) pairs;
    `text` is their concatenation. Text can lag its tokens: an incomplete UTF-8 character or a
    possible stop-string prefix is held back until the next step decides it. The sequences are
    the decoder's own lists, handed over, not copied: it never touches them again.
    """

    text: str
    token_ids: Sequence[int]
    draft_flags: Sequence[bool]  # per token: proposed by the drafter and accepted
    stats: GenerationStats
    segments: Sequence[tuple[str, bool]] = ()
    finish_reason: FinishReason | None = None
    top2: Sequence[Top2] = ()  # per token, when GenerationParams.record_top2
