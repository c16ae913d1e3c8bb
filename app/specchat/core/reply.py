"""Turning a stream of TokenEvents into a reply: text, token ids, draft spans, final stats.

Every consumer (the CLI, the window, the comparison, the benchmark, the self-test) feeds its
events through one `Reply`, so the text and the draft highlighting are built in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from specchat.core.types import FinishReason, GenerationStats, TokenEvent

Span = tuple[int, int]  # [start, end) character offsets of text the drafter supplied


def add_span(spans: list[Span], start: int, end: int) -> None:
    """Append [start, end), merged with the last span when they touch."""
    if end <= start:
        return
    if spans and spans[-1][1] >= start:
        spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
    else:
        spans.append((start, end))


@dataclass
class Reply:
    """The reply so far. `add()` each event; `text`, `spans` and `stats` follow."""

    parts: list[str] = field(default_factory=list)
    length: int = 0  # characters so far
    token_ids: list[int] = field(default_factory=list)
    draft_flags: list[bool] = field(default_factory=list)
    gaps: list[float | None] = field(default_factory=list)  # target top-2 gap per token
    spans: list[Span] = field(default_factory=list)
    stats: GenerationStats | None = None
    finish_reason: FinishReason | None = None
    events: int = 0

    def add(self, ev: TokenEvent) -> None:
        for text, from_draft in ev.segments:
            if from_draft:
                add_span(self.spans, self.length, self.length + len(text))
            self.parts.append(text)
            self.length += len(text)
        self.token_ids.extend(ev.token_ids)
        self.draft_flags.extend(ev.draft_flags)
        if ev.top2:
            self.gaps.extend(t.gap for t in ev.top2)
        elif ev.token_ids:
            self.gaps.extend([None] * len(ev.token_ids))
        self.stats = ev.stats
        self.events += 1
        if ev.finish_reason is not None:
            self.finish_reason = ev.finish_reason

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    @property
    def final_stats(self) -> GenerationStats:
        return self.stats if self.stats is not None else GenerationStats()

    @classmethod
    def collect(
        cls, events: Iterable[TokenEvent], on_event: Callable[[TokenEvent], None] | None = None
    ) -> Reply:
        """Consume `events` (calling `on_event` for each) and return the whole reply. Stopped
        early (Ctrl+C, SIGTERM, an error in `on_event`), the events' generator is closed, so an
        engine's reply lets go of the engine (else closing the engine waits for it for ever)."""
        reply = cls()
        try:
            for ev in events:
                reply.add(ev)
                if on_event is not None:
                    on_event(ev)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        return reply
