"""Turning a server's chat chunks into SpecChat's TokenEvents and GenerationStats (no Qt, no
network): one `ReplyAssembler` per reply, fed every decoded chunk (or the one non-streamed
response), then `finish()` for the last event with the figures that came after the reply.

Token ids: OpenAI-compatible streams carry text, not ids (llama-server sends ids only with
logprobs, and not for tokens it accepted from a draft), so events have empty `token_ids` and
`draft_flags`; the text, and which parts of it came from the drafter where the server lets us
tell (llama-server), travel in `segments`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from specchat.core.remote.checks import COUNTS, DRAFT, Inconsistent, count, not_backwards
from specchat.core.remote.config import ServerKind
from specchat.core.remote.figures import (
    FIGURES_FINAL,
    FIGURES_LIVE,
    FIGURES_METRICS,
    FIGURES_NONE,
    DraftSpans,
    LlamaTimings,
    ReplyCounts,
    counts_from_sglang,
    sglang_meta,
)
from specchat.core.remote.probe import ServerInfo
from specchat.core.remote.request import ChatRequest
from specchat.core.types import FinishReason, GenerationStats, TokenEvent

__all__ = ["ReplyAssembler", "finish_reason_from"]

_FINISH = {
    "stop": FinishReason.STOP,
    "eos": FinishReason.STOP,
    "tool_calls": FinishReason.STOP,
    "function_call": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "abort": FinishReason.ERROR,
    "error": FinishReason.ERROR,
}


def finish_reason_from(value: object) -> FinishReason | None:
    if value is None:
        return None
    if isinstance(value, Mapping):  # SGLang's meta_info: {"type": "stop", ...}
        value = value.get("type")
    return _FINISH.get(str(value).lower(), FinishReason.STOP)


class ReplyAssembler:
    def __init__(self, info: ServerInfo, request: ChatRequest, t0: float | None = None) -> None:
        self.info = info
        self.t0 = time.perf_counter() if t0 is None else t0
        self.stats = GenerationStats(mode=request.mode.value, note=request.note)
        self.stats.figures = FIGURES_NONE
        self.spans = DraftSpans()
        self.timings: LlamaTimings | None = None
        self.live_timings = False  # timings arrived before the last chunk: figures are live
        self.completion_tokens: int | None = None  # the server's own count, when it gives one
        self.chunks = 0  # chunks that carried text
        self.finish: FinishReason | None = None
        self.meta: Mapping[str, Any] | None = None  # SGLang meta_info
        limit = request.body.get("max_tokens")
        self.max_tokens = limit if isinstance(limit, int) and limit > 0 else None
        self.cut = False  # the server went past max_tokens: the client ended the reply
        self.over_limit: int | None = None  # a whole reply's token count past max_tokens
        self.dropped: dict[str, str] = {}  # figure group (checks.DRAFT...) -> why, for the note
        self._first: float | None = None
        self._last: float | None = None

    @property
    def started(self) -> bool:
        return self.chunks > 0

    def _drop(self, problem: Inconsistent) -> None:
        """Stop believing one group of the server's figures for the rest of the reply."""
        if problem.group in self.dropped:
            return
        self.dropped[problem.group] = str(problem)
        st = self.stats
        if problem.group == DRAFT:
            st.drafted = st.accepted = st.verify_steps = st.verify_tokens = 0
            st.draft_pos_proposed, st.draft_pos_accepted = [], []
            st.figures = FIGURES_NONE
            self.spans = DraftSpans()
        elif problem.group == COUNTS:
            self.completion_tokens = None
            st.prompt_tokens, st.prefill_s = 0, 0.0

    def _usage(self, usage: object) -> tuple[int | None, int | None]:
        """(completion, prompt) tokens of an OpenAI `usage` object, checked."""
        if usage is None or COUNTS in self.dropped:
            return None, None
        try:
            if not isinstance(usage, Mapping):
                raise Inconsistent(COUNTS, f"usage = {str(usage)[:30]!r}, not an object")
            done = count(usage, "completion_tokens", COUNTS)
            if done is not None:
                not_backwards("completion_tokens", done, self.completion_tokens, COUNTS)
            return done, count(usage, "prompt_tokens", COUNTS)
        except Inconsistent as exc:
            self._drop(exc)
            return None, None

    def _read(self, obj: Mapping[str, Any]) -> tuple[LlamaTimings | None, int | None, int | None]:
        timings, problems = LlamaTimings.read(obj.get("timings"), self.timings, self.dropped)
        for p in problems:
            self._drop(p)
        done, prompt = self._usage(obj.get("usage"))
        return timings, done, prompt

    def _server_count(self, timings: LlamaTimings | None, done: int | None) -> int:
        if COUNTS in self.dropped:
            return 0
        predicted = timings.predicted_n if timings is not None else None
        return max(predicted or 0, done or 0)

    # -- streamed chunks --------------------------------------------------------------------
    def chunk(self, obj: Mapping[str, Any]) -> TokenEvent | None:
        """One decoded chunk; the event to emit, or None when it carried no text (or went past
        max_tokens: then `cut` is set and the reply must end)."""
        now = time.perf_counter()
        timings, done, prompt = self._read(obj)
        text, reason, meta = "", None, None
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            choice = choices[0]
            delta = choice.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
                text = delta["content"]
            reason = finish_reason_from(choice.get("finish_reason"))
            meta = sglang_meta(choice)
        # The client's own limit: a streamed piece is at least one token.
        pieces = self.chunks + (1 if text else 0)
        if self.max_tokens and max(pieces, self._server_count(timings, done)) > self.max_tokens:
            self.cut, self.finish = True, FinishReason.LENGTH
            self._update(now, counted=False)
            return None
        if timings is not None:
            self.timings = timings
        if done is not None:
            self.completion_tokens = done
        if prompt is not None:
            self.stats.prompt_tokens = prompt
        if reason is not None:
            self.finish = reason
        if meta is not None:
            self.meta = meta
        if self.finish is None and timings is not None:
            self.live_timings = True
        from_draft = False
        if self.info.kind is ServerKind.LLAMA_CPP and DRAFT not in self.dropped:
            from_draft = self.spans.update(timings)
        if not text:
            self._update(now, counted=False)
            return None
        self.chunks += 1
        if self._first is None:
            self._first = now
        self._last = now
        self._update(now, counted=True)
        return TokenEvent(
            text=text,
            token_ids=(),
            draft_flags=(),
            stats=self.stats.copy(),
            segments=((text, from_draft),),
        )

    def whole(self, obj: Mapping[str, Any]) -> TokenEvent | None:
        """A non-streamed response: the whole text as one event."""
        now = time.perf_counter()
        timings, done, prompt = self._read(obj)
        self.timings = timings or self.timings
        self.completion_tokens = done
        self.stats.prompt_tokens = prompt or 0
        text = ""
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            choice = choices[0]
            message = choice.get("message")
            if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                text = message["content"]
            self.finish = finish_reason_from(choice.get("finish_reason")) or FinishReason.STOP
            self.meta = sglang_meta(choice)
        sent = self._server_count(timings, done)
        if self.max_tokens and sent > self.max_tokens:  # the text cannot be cut without ids
            self.over_limit, self.finish = sent, FinishReason.LENGTH
        self._first = self._last = now
        self.chunks = 1 if text else 0
        t = self.timings
        if self.info.kind is ServerKind.LLAMA_CPP and t is not None and t.draft_n is not None:
            counts = ReplyCounts(t.draft_n, t.draft_n_accepted or 0)
            self._set_counts(counts, FIGURES_FINAL)
        self._update(now, counted=bool(text))
        if not text:
            return None
        return TokenEvent(text, (), (), self.stats.copy(), segments=((text, False),))

    def _update(self, now: float, counted: bool) -> None:
        st = self.stats
        st.elapsed_s = now - self.t0
        if self._first is not None:
            st.ttft_s = self._first - self.t0
            st.decode_s = (self._last or self._first) - self._first
        t = self.timings if COUNTS not in self.dropped else None
        tokens = self.chunks
        if t is not None and t.predicted_n is not None:
            tokens = max(tokens, t.predicted_n)
        if self.completion_tokens is not None:
            tokens = max(tokens, self.completion_tokens)
        st.tokens = tokens
        if t is not None:
            if t.prompt_n is not None:
                st.prompt_tokens = t.prompt_n + (t.cache_n or 0)
            if t.prompt_ms is not None:
                st.prefill_s = t.prompt_ms / 1000.0
            server_s = t.server_s
            st.llama_s = server_s if server_s is not None else st.elapsed_s
        else:
            st.llama_s = st.elapsed_s  # no server times: no overhead figure to show
        if self.info.kind is ServerKind.LLAMA_CPP and self.spans.drafted:
            self._set_counts(
                ReplyCounts(self.spans.drafted, self.spans.accepted, self.spans.steps),
                FIGURES_LIVE if self.live_timings else FIGURES_FINAL,
            )
            st.draft_pos_proposed = list(self.spans.pos_proposed)
            st.draft_pos_accepted = list(self.spans.pos_accepted)

    def _set_counts(self, c: ReplyCounts, source: str) -> None:
        if DRAFT in self.dropped:
            return
        st = self.stats
        st.drafted, st.accepted = c.drafted, c.accepted
        if c.verify_steps is not None:
            st.verify_steps = c.verify_steps
            st.verify_tokens = c.verify_tokens or 0
        st.figures = source

    # -- the end ----------------------------------------------------------------------------
    def finish_event(
        self,
        reason: FinishReason,
        *,
        metrics: ReplyCounts | None = None,
        metrics_note: str = "",
        problem: str = "",
    ) -> TokenEvent:
        """The last event: `reason`, figures that came after the reply (`metrics`: the change
        of the server's counters), and `problem` when the reply ended badly."""
        self._update(time.perf_counter(), counted=False)
        st = self.stats
        kind = self.info.kind
        notes = [st.note] if st.note else []
        if kind is ServerKind.LLAMA_CPP:
            t = self.timings
            if t is not None and t.draft_n is None and DRAFT not in self.dropped:
                # absent: no drafting, not a zero
                st.figures = FIGURES_LIVE if self.live_timings else FIGURES_FINAL
                if self.info.speculates is not False:
                    notes.append("the server drafted nothing for this reply")
            if metrics is not None and metrics.drafted == st.drafted and st.drafted:
                st.verify_steps = metrics.verify_steps or st.verify_steps
                st.verify_tokens = st.accepted + st.verify_steps
                if not st.draft_pos_proposed:  # a whole reply: positions from /metrics
                    self._per_pos(metrics)
                notes.append("verification steps from /metrics")
        elif kind is ServerKind.SGLANG:
            try:
                counts = counts_from_sglang(self.meta, self.completion_tokens)
            except Inconsistent as exc:
                self._drop(exc)
                counts = None
            if counts is not None:
                self._set_counts(counts, FIGURES_FINAL)
                self._per_pos(counts)
            elif self.meta is None and DRAFT not in self.dropped:
                notes.append("SGLang sends its per-reply figures only without streaming")
        elif metrics is not None:
            self._set_counts(metrics, FIGURES_METRICS)
            self._per_pos(metrics)
            notes.append("figures from /metrics: exact only while nobody else uses the server")
        if (
            st.figures == FIGURES_NONE
            and kind is not ServerKind.SGLANG
            and self.info.speculates is not False
            and DRAFT not in self.dropped
        ):
            notes.append("the server reports no speculation figures for this reply")
        notes.extend(self.dropped.values())
        if self.cut:
            notes.append(
                f"the server ignored max_tokens ({self.max_tokens}): SpecChat closed the "
                "stream at the limit"
            )
        if self.over_limit is not None:
            notes.append(
                f"the server ignored max_tokens ({self.max_tokens}) and sent "
                f"{self.over_limit} tokens"
            )
        if metrics_note:
            notes.append(metrics_note)
        if problem:
            notes.append(problem)
        st.note = "; ".join(n for n in notes if n)
        return TokenEvent("", (), (), st.copy(), finish_reason=reason)

    def _per_pos(self, c: ReplyCounts) -> None:
        """Per-position figures as the servers count them: position i was accepted in
        `per_pos_accepted[i]` of the verification steps, each of which proposed it."""
        if DRAFT in self.dropped:
            return
        if c.per_pos_accepted and c.verify_steps:
            self.stats.draft_pos_proposed = [c.verify_steps] * len(c.per_pos_accepted)
            self.stats.draft_pos_accepted = list(c.per_pos_accepted)
