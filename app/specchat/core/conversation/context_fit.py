"""Keeping a conversation inside the context window (no Qt): one policy for the CLI chat and the
window's chat session.

A conversation grows by every message; once its prompt fills the model's context, every later
message used to get "the prompt fills the context" and nothing else. `fit_messages` leaves out
the oldest exchanges (a user message and the replies after it, never half of one) until the
prompt leaves room for a reply, keeps the system prompt and the newest message, and says what it
left out (`Fitted.notice`). The history itself keeps everything. When even the newest message
alone does not fit, it raises `PromptTooLongError` with what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.core.units import format_count

__all__ = [
    "CLI_ADVICE",
    "WINDOW_ADVICE",
    "Advice",
    "Fitted",
    "PromptTooLongError",
    "fit_for_engine",
    "fit_messages",
    "reply_room",
]

Message = dict[str, str]
Counter = Callable[[Sequence[Message]], int]


class PromptTooLongError(ValueError):
    """The newest message (with the system prompt) does not fit the context at all."""


@dataclass(frozen=True)
class Advice:
    """How to say "start afresh" and "make the context larger" in one front end."""

    restart: str
    larger: str


CLI_ADVICE = Advice(restart="type /new to start afresh", larger="restart with a larger --ctx")
WINDOW_ADVICE = Advice(restart="start a new chat", larger="raise the context size in Settings")


@dataclass(frozen=True)
class Fitted:
    messages: list[Message]
    prompt_tokens: int | None = None  # None when not counted (a remote engine)
    n_ctx: int | None = None
    dropped: int = 0  # oldest messages left out
    dropped_messages: list[Message] = field(default_factory=list)
    notice: str = ""  # what was left out and what to do; "" when nothing was


def reply_room(n_ctx: int, max_tokens: int) -> int:
    """Tokens kept free for the reply when old messages must go: the reply's own limit, at most
    a quarter of the context (so that a long conversation keeps most of its past)."""
    return max(1, min(max_tokens, n_ctx // 4))


def fit_messages(
    messages: Sequence[Message],
    count: Counter,
    n_ctx: int,
    *,
    max_tokens: int,
    n_ctx_train: int | None = None,
    advice: Advice = CLI_ADVICE,
) -> Fitted:
    """The messages to send: all of them when they leave room for a reply, else without the
    oldest exchanges. `count(messages)` gives the prompt's length in tokens."""
    msgs = list(messages)
    n = count(msgs)
    room = reply_room(n_ctx, max_tokens)
    if n + room <= n_ctx:
        return Fitted(msgs, n, n_ctx)
    head = 0
    while head < len(msgs) and msgs[head].get("role") == "system":
        head += 1
    system, turns = msgs[:head], msgs[head:]
    # Where a kept tail may start: at a user message (the last one keeps only the newest).
    starts = [i for i in range(1, len(turns)) if turns[i].get("role") == "user"]
    best: tuple[int, int] | None = None  # (start, tokens) of the longest tail that fits
    lo, hi = 0, len(starts) - 1
    while lo <= hi:  # the prompt shrinks as the start moves on: binary search
        mid = (lo + hi) // 2
        tokens = count(system + turns[starts[mid] :])
        if tokens + room <= n_ctx:
            best, hi = (starts[mid], tokens), mid - 1
        else:
            lo = mid + 1
    if best is None:  # not even the newest exchange leaves the room wanted
        start = starts[-1] if starts else 0
        tokens = count(system + turns[start:]) if start else n
        if tokens >= n_ctx:
            raise PromptTooLongError(_too_long(tokens, n_ctx, n_ctx_train, bool(system), advice))
        best = (start, tokens)
    start, tokens = best
    if start == 0:
        return Fitted(msgs, tokens, n_ctx)
    dropped = turns[:start]
    exchanges = sum(1 for m in dropped if m.get("role") == "user")
    notice = (
        f"Left out the {format_count(len(dropped), 'oldest message')} "
        f"({format_count(exchanges, 'exchange')}) so that the conversation fits the "
        f"{n_ctx:,}-token context: the model no longer sees them (they stay in the history). "
        f"To keep them, {advice.restart} with a summary, or {advice.larger}."
    )
    return Fitted(system + turns[start:], tokens, n_ctx, len(dropped), dropped, notice)


def _too_long(
    tokens: int, n_ctx: int, n_ctx_train: int | None, has_system: bool, advice: Advice
) -> str:
    what = "the message and the system prompt take" if has_system else "the message takes"
    larger = advice.larger
    if n_ctx_train and n_ctx_train > n_ctx:
        larger += f" (this model handles up to {n_ctx_train:,} tokens)"
    return (
        f"too long for the context: {what} {tokens:,} tokens and the context holds {n_ctx:,}, "
        f"with no room left for a reply; shorten it, or {larger}"
    )


def fit_for_engine(
    engine: Any,
    messages: Sequence[Message],
    *,
    max_tokens: int,
    advice: Advice = CLI_ADVICE,
) -> Fitted:
    """`fit_messages` with an engine's own tokenizer and context; messages pass unchanged to an
    engine that does not count tokens (a remote server keeps its own context)."""
    target = getattr(engine, "target", None)
    count = getattr(engine, "prompt_tokens", None)
    n_ctx = getattr(target, "n_ctx", None)
    if target is None or count is None or not isinstance(n_ctx, int):
        return Fitted(list(messages))
    info = getattr(target, "info", None)
    train = getattr(info, "context_length", None)
    return fit_messages(
        messages,
        lambda m: len(count(m)),
        n_ctx,
        max_tokens=max_tokens,
        n_ctx_train=train if isinstance(train, int) else None,
        advice=advice,
    )
