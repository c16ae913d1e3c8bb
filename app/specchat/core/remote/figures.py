"""Speculation figures from what each server sends with a reply (no Qt, no network).

- llama-server: `timings` (in every streamed chunk when the request asks for
  `timings_per_token`, else in the last one) carries `draft_n` (draft tokens proposed) and
  `draft_n_accepted`. Both are absent when nothing was drafted: absent means "no drafting",
  never a measured zero.
- SGLang: `choices[i].meta_info` (non-streamed replies, with `return_meta_info`) carries
  `spec_verify_ct` and, when anything was verified, `spec_accept_rate`, `spec_accept_length`
  and (depending on the version) `spec_accept_token_num` / `spec_draft_token_num` or
  `spec_num_correct_drafts` / `spec_num_proposed_drafts`.
- vLLM sends nothing per reply: its figures come from `/metrics` (see `metrics.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specchat.core.remote.metrics import SpecCounters

__all__ = [
    "FIGURES_FINAL",
    "FIGURES_LIVE",
    "FIGURES_METRICS",
    "FIGURES_NONE",
    "DraftSpans",
    "LlamaTimings",
    "ReplyCounts",
    "counts_from_metrics",
    "counts_from_sglang",
    "describe_figures",
]

# GenerationStats.figures values (see core.types): where this reply's figures come from.
FIGURES_LIVE = "server-live"
FIGURES_FINAL = "server-final"
FIGURES_METRICS = "server-metrics"
FIGURES_NONE = "none"


def _int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, float) and v >= 0 and v == v and v != float("inf"):
        return int(round(v))
    return None


def _float(v: object) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
        return float(v)
    return None


@dataclass(frozen=True)
class ReplyCounts:
    """One reply's speculation counts in GenerationStats' terms."""

    drafted: int
    accepted: int
    verify_steps: int | None = None  # None: the source does not tell
    per_pos_accepted: tuple[int, ...] = ()  # steps in which position i was accepted

    @property
    def verify_tokens(self) -> int | None:
        """Tokens the verification passes produced: accepted drafts + one target token each."""
        return None if self.verify_steps is None else self.accepted + self.verify_steps


@dataclass(frozen=True)
class LlamaTimings:
    """llama-server's `timings` object."""

    prompt_n: int | None = None  # prompt tokens processed (the cached ones excluded)
    cache_n: int | None = None  # prompt tokens reused from the cache
    prompt_ms: float | None = None
    predicted_n: int | None = None  # tokens generated so far
    predicted_ms: float | None = None
    draft_n: int | None = None  # None: no drafting (the key is absent)
    draft_n_accepted: int | None = None

    @classmethod
    def parse(cls, data: object) -> LlamaTimings | None:
        if not isinstance(data, Mapping):
            return None
        return cls(
            prompt_n=_int(data.get("prompt_n")),
            cache_n=_int(data.get("cache_n")),
            prompt_ms=_float(data.get("prompt_ms")),
            predicted_n=_int(data.get("predicted_n")),
            predicted_ms=_float(data.get("predicted_ms")),
            draft_n=_int(data.get("draft_n")),
            draft_n_accepted=_int(data.get("draft_n_accepted")),
        )

    @property
    def drafted(self) -> bool:
        return self.draft_n is not None

    @property
    def server_s(self) -> float | None:
        """Server compute time so far (prompt + generation), seconds."""
        if self.prompt_ms is None and self.predicted_ms is None:
            return None
        return ((self.prompt_ms or 0.0) + (self.predicted_ms or 0.0)) / 1000.0


class DraftSpans:
    """Live figures from llama-server's running counts, one streamed chunk at a time.

    llama-server streams one chunk per token. A verification step drafts `d` tokens
    (`draft_n` rises by `d`), accepts `a` of them (`draft_n_accepted` rises by `a`) and then
    emits the `a` accepted draft tokens followed by the target's own token; the step's first
    chunk already carries both new counts. So a rise marks a new step, that chunk and the next
    `a - 1` carry draft tokens, and positions 0..d-1 were proposed, 0..a-1 accepted. A chunk
    the server holds back (a possible stop string) can merge two steps or shift a span by a
    token: spans and steps are close, the drafted/accepted totals exact.
    """

    def __init__(self) -> None:
        self.drafted = 0
        self.accepted = 0
        self.steps = 0
        self.pos_proposed: list[int] = []
        self.pos_accepted: list[int] = []
        self._pending = 0

    def update(self, t: LlamaTimings | None) -> bool:
        """Feed one chunk's timings (None: the chunk had none); True when the chunk's token
        came from the drafter."""
        if t is not None and t.draft_n is not None:
            d = t.draft_n - self.drafted
            a = (t.draft_n_accepted or 0) - self.accepted
            if d > 0 or a > 0:
                self.steps += 1
                self._count(self.pos_proposed, max(d, a, 0))
                self._count(self.pos_accepted, max(a, 0))
                self._pending = max(a, 0)
            self.drafted = max(self.drafted, t.draft_n)
            self.accepted = max(self.accepted, t.draft_n_accepted or 0)
        if self._pending > 0:
            self._pending -= 1
            return True
        return False

    def _count(self, counts: list[int], n: int) -> None:
        while len(self.pos_proposed) < n:
            self.pos_proposed.append(0)
            self.pos_accepted.append(0)
        for i in range(n):
            counts[i] += 1


def counts_from_sglang(meta: object, completion_tokens: int | None) -> ReplyCounts | None:
    """SGLang's per-reply figures; None when nothing was verified (no speculation)."""
    if not isinstance(meta, Mapping):
        return None
    steps = _int(meta.get("spec_verify_ct"))
    if not steps:
        return None
    accepted = _int(meta.get("spec_accept_token_num"))
    if accepted is None:
        accepted = _int(meta.get("spec_num_correct_drafts"))
    drafted = _int(meta.get("spec_draft_token_num"))
    if drafted is None:
        drafted = _int(meta.get("spec_num_proposed_drafts"))
    rate = _float(meta.get("spec_accept_rate"))
    length = _float(meta.get("spec_accept_length"))
    tokens = (
        completion_tokens if completion_tokens is not None else _int(meta.get("completion_tokens"))
    )
    if accepted is None and tokens is not None:
        # spec_accept_length = completion tokens / verification steps: every step gives its
        # accepted drafts plus one token of the target's own.
        accepted = max(0, tokens - steps)
    elif accepted is None and length is not None:
        accepted = max(0, round((length - 1.0) * steps))
    if accepted is None:
        return None
    if drafted is None and rate:
        drafted = round(accepted / rate)
    if drafted is None:
        return None
    per_pos: tuple[int, ...] = ()
    by_pos = meta.get("spec_num_correct_drafts_by_position")
    if isinstance(by_pos, list) and all(_int(x) is not None for x in by_pos):
        per_pos = tuple(int(x) for x in by_pos)
    return ReplyCounts(
        drafted=drafted,
        accepted=min(accepted, drafted),
        verify_steps=steps,
        per_pos_accepted=per_pos,
    )


def counts_from_metrics(delta: SpecCounters) -> ReplyCounts | None:
    """A reply's counts from the change of the server's counters across it."""
    if delta.draft_tokens <= 0 and delta.drafts <= 0:
        return None
    return ReplyCounts(
        drafted=delta.draft_tokens,
        accepted=min(delta.accepted, delta.draft_tokens),
        verify_steps=delta.drafts,
        per_pos_accepted=delta.trimmed_per_pos(),
    )


def sglang_meta(choice: Mapping[str, Any]) -> Mapping[str, Any] | None:
    meta = choice.get("meta_info")
    return meta if isinstance(meta, Mapping) else None


_FIGURES_TEXT = {
    "": "counted by SpecChat",
    FIGURES_LIVE: "from the server, live",
    FIGURES_FINAL: "from the server, after the reply",
    FIGURES_METRICS: "from the server's /metrics, after the reply",
    FIGURES_NONE: "the server reports none",
}


def describe_figures(source: str) -> str:
    """A short label for GenerationStats.figures, for the gauge ("from the server, live")."""
    return _FIGURES_TEXT.get(source, source)
