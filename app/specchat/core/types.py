"""Plain value types shared by the engine, the CLI and the GUI (no Qt, no llama.cpp)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from enum import Enum


class Mode(str, Enum):
    """How the next reply is decoded. Chosen per call, so it can change between messages."""

    OFF = "off"
    DRAFT = "draft"
    LOOKUP = "lookup"
    AUTO = "auto"  # a cost model picks lookup, the draft model or plain decoding step by step

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


@dataclass(frozen=True)
class GenerationParams:
    """Sampling and speculation settings for one reply. `validate()` refuses absurd values."""

    max_tokens: int = 512
    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    repeat_penalty: float = 1.0  # 1 = off
    repeat_last_n: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # speculation
    k_max: int = 8  # most tokens drafted per verification step
    k_init: int = 4  # first draft length (adapted to acceptance afterwards)
    adaptive_k: bool = True
    p_min: float = 0.5  # model draft stops when its top probability falls below this
    lookup_min_match: int = 3  # prompt lookup drafts only after a match this long (tokens)
    lookup_max_ngram: int = 8
    # diagnostics: record the target's top-2 logits for every emitted token
    record_top2: bool = False

    def validate(self) -> GenerationParams:
        problems: list[str] = []

        def need(ok: bool, text: str) -> None:
            if not ok:
                problems.append(text)

        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                problems.append(f"{f.name} must be a finite number, not {v}")
        need(1 <= self.max_tokens <= 1_000_000, "max_tokens must be between 1 and 1,000,000")
        need(0.0 <= self.temperature <= 10.0, "temperature must be between 0 and 10")
        need(0 <= self.top_k <= 1_000_000, "top_k must be 0 (off) or a positive count")
        need(0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]")
        need(0.0 <= self.min_p < 1.0, "min_p must be in [0, 1)")
        need(0.0 < self.repeat_penalty <= 10.0, "repeat_penalty must be in (0, 10]")
        need(0 <= self.repeat_last_n <= 100_000, "repeat_last_n must be 0 or a positive count")
        need(self.seed is None or 0 <= self.seed < 2**63, "seed must be a non-negative integer")
        need(1 <= self.k_max <= 64, "k_max must be between 1 and 64")
        need(1 <= self.k_init <= self.k_max, "k_init must be between 1 and k_max")
        need(0.0 <= self.p_min < 1.0, "p_min must be in [0, 1)")
        need(1 <= self.lookup_min_match <= 64, "lookup_min_match must be between 1 and 64")
        need(
            self.lookup_min_match <= self.lookup_max_ngram <= 64,
            "lookup_max_ngram must be between lookup_min_match and 64",
        )
        need(all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty")
        if problems:
            raise ValueError("invalid generation settings: " + "; ".join(problems))
        return self

    def with_(self, **changes: object) -> GenerationParams:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass
class GenerationStats:
    """Running figures for one reply; a copy travels with every TokenEvent."""

    mode: str = Mode.OFF.value
    prompt_tokens: int = 0
    tokens: int = 0  # tokens emitted so far
    drafted: int = 0  # draft tokens proposed to the target
    accepted: int = 0  # of those, accepted by the target
    verify_steps: int = 0  # target passes that verified at least one draft token
    target_steps: int = 0  # all target decode passes after the prompt
    draft_pos_proposed: list[int] = field(default_factory=list)  # per draft position
    draft_pos_accepted: list[int] = field(default_factory=list)
    ttft_s: float = 0.0  # request start -> first token
    elapsed_s: float = 0.0  # request start -> now
    decode_s: float = 0.0  # first token -> now
    prefill_s: float = 0.0
    k_current: int = 0
    note: str = ""  # why speculation did or did not run

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, or None when nothing was drafted (speculation off or idle)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens gained per verification pass: 1 + accepted / verification steps."""
        return 1.0 + self.accepted / self.verify_steps if self.verify_steps else None

    @property
    def per_position_acceptance(self) -> list[float]:
        return [
            a / p if p else 0.0
            for a, p in zip(self.draft_pos_accepted, self.draft_pos_proposed, strict=True)
        ]

    @property
    def tokens_per_s(self) -> float:
        """Decode speed the user sees: tokens after the first, per second since the first."""
        if self.tokens >= 2 and self.decode_s > 0:
            return (self.tokens - 1) / self.decode_s
        if self.tokens == 1 and self.elapsed_s > 0:
            return 1.0 / self.elapsed_s
        return 0.0

    def copy(self) -> GenerationStats:
        return replace(
            self,
            draft_pos_proposed=list(self.draft_pos_proposed),
            draft_pos_accepted=list(self.draft_pos_accepted),
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "ttft_s": round(self.ttft_s, 4),
            "total_s": round(self.elapsed_s, 4),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": None
            if self.acceptance_rate is None
            else round(self.acceptance_rate, 4),
            "mean_accepted_length": None
            if self.mean_accepted_length is None
            else round(self.mean_accepted_length, 4),
            "verify_steps": self.verify_steps,
            "per_position_acceptance": [round(x, 4) for x in self.per_position_acceptance],
            "note": self.note,
        }


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


@dataclass(frozen=True)
class TokenEvent:
    """One emitted token (or, with finish_reason set, the end of the reply)."""

    text: str  # text piece (may be "" while a UTF-8 character is incomplete)
    token_ids: tuple[int, ...]
    from_draft: bool  # proposed by the drafter and accepted by the target
    stats: GenerationStats
    finish_reason: FinishReason | None = None
    top2: Top2 | None = None
