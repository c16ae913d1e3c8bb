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

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from specchat.core.remote.checks import (
    COUNTS,
    DRAFT,
    METRICS,
    Inconsistent,
    at_most,
    count,
    duration,
    not_backwards,
    per_position,
)
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
    def read(
        cls, data: object, before: LlamaTimings | None = None, dropped: Collection[str] = ()
    ) -> tuple[LlamaTimings | None, tuple[Inconsistent, ...]]:
        """One chunk's `timings`, checked against the last ones (`before`): each group
        (`COUNTS`, `DRAFT`) comes back empty, with its problem, when it cannot be true;
        groups in `dropped` are not read at all."""
        if data is None:
            return None, ()
        if not isinstance(data, Mapping):
            if COUNTS in dropped:
                return None, ()
            return None, (Inconsistent(COUNTS, f"timings = {str(data)[:30]!r}, not an object"),)
        problems: list[Inconsistent] = []
        fields: dict[str, Any] = {}
        for group, read in ((COUNTS, _llama_counts), (DRAFT, _llama_drafts)):
            if group in dropped:
                continue
            try:
                fields.update(read(data, before))
            except Inconsistent as exc:
                problems.append(exc)
        return cls(**fields), tuple(problems)

    @property
    def drafted(self) -> bool:
        return self.draft_n is not None

    @property
    def server_s(self) -> float | None:
        """Server compute time so far (prompt + generation), seconds."""
        if self.prompt_ms is None and self.predicted_ms is None:
            return None
        return ((self.prompt_ms or 0.0) + (self.predicted_ms or 0.0)) / 1000.0


def _llama_counts(data: Mapping[str, Any], before: LlamaTimings | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        key: count(data, key, COUNTS) for key in ("prompt_n", "cache_n", "predicted_n")
    }
    out.update({key: duration(data, key, COUNTS) for key in ("prompt_ms", "predicted_ms")})
    if before is not None:
        for key in ("predicted_n", "predicted_ms"):
            not_backwards(key, out[key], getattr(before, key), COUNTS)
    return out


def _llama_drafts(data: Mapping[str, Any], before: LlamaTimings | None) -> dict[str, Any]:
    drafted = count(data, "draft_n", DRAFT)
    accepted = count(data, "draft_n_accepted", DRAFT)
    if drafted is None and accepted:
        raise Inconsistent(DRAFT, f"accepted {accepted} with nothing drafted")
    at_most(accepted, drafted, DRAFT, "accepted {part} of {whole} drafted")
    if before is not None:
        not_backwards("draft_n", drafted, before.draft_n, DRAFT)
        if drafted is not None:
            not_backwards("draft_n_accepted", accepted or 0, before.draft_n_accepted, DRAFT)
    return {"draft_n": drafted, "draft_n_accepted": accepted}


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
    """SGLang's per-reply figures; None when nothing was verified (no speculation). Raises
    Inconsistent (`DRAFT`) for figures that cannot be true."""
    if not isinstance(meta, Mapping):
        return None
    steps = count(meta, "spec_verify_ct", DRAFT)
    if not steps:
        return None
    accepted = count(meta, "spec_accept_token_num", DRAFT)
    if accepted is None:
        accepted = count(meta, "spec_num_correct_drafts", DRAFT)
    drafted = count(meta, "spec_draft_token_num", DRAFT)
    if drafted is None:
        drafted = count(meta, "spec_num_proposed_drafts", DRAFT)
    rate = duration(meta, "spec_accept_rate", DRAFT)
    if rate is not None and rate > 1:
        raise Inconsistent(DRAFT, f"spec_accept_rate = {rate:g}, above 1")
    length = duration(meta, "spec_accept_length", DRAFT)
    tokens = completion_tokens
    if tokens is None:
        tokens = count(meta, "completion_tokens", DRAFT)
    # every verification step gives at least one token (the target's own)
    at_most(steps, tokens, DRAFT, "{part} verification steps for {whole} tokens")
    if accepted is None and tokens is not None:
        # spec_accept_length = completion tokens / verification steps: every step gives its
        # accepted drafts plus one token of the target's own.
        accepted = tokens - steps
    elif accepted is None and length is not None:
        accepted = max(0, round((length - 1.0) * steps))
    if accepted is None:
        return None
    if drafted is None and rate:
        drafted = round(accepted / rate)
    if drafted is None:
        return None
    at_most(accepted, drafted, DRAFT, "accepted {part} of {whole} drafted")
    key = "spec_num_correct_drafts_by_position"
    return ReplyCounts(
        drafted=drafted,
        accepted=accepted,
        verify_steps=steps,
        per_pos_accepted=per_position(meta.get(key), steps, DRAFT, key),
    )


def counts_from_metrics(delta: SpecCounters) -> ReplyCounts | None:
    """A reply's counts from the change of the server's counters across it. Raises
    Inconsistent (`METRICS`) for a change that cannot be true."""
    if delta.draft_tokens <= 0 and delta.drafts <= 0:
        return None
    at_most(delta.accepted, delta.draft_tokens, METRICS, "accepted {part} of {whole} drafted")
    at_most(delta.drafts, delta.draft_tokens, METRICS, "{part} drafts of {whole} draft tokens")
    per_pos = per_position(delta.trimmed_per_pos(), delta.drafts, METRICS, "per-position")
    return ReplyCounts(
        drafted=delta.draft_tokens,
        accepted=delta.accepted,
        verify_steps=delta.drafts,
        per_pos_accepted=per_pos,
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
