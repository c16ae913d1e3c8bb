"""Filling the lookup drafter's history index from the saved conversations (no Qt).

Every message of every saved conversation becomes one document of the index
(`decoding/history_index.py`), tokenised with the loaded target's tokenizer. The window runs
this on a thread of its own after a model loads (never on the GUI thread, never on the
inference thread), with its own database connection; a cancel stops it between conversations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specchat.core.decoding.history_index import HistoryIndex
from specchat.core.state.history import History
from specchat.core.units import format_bytes, format_count

__all__ = ["FeedResult", "feed_history", "history_line", "history_texts"]

BATCH = 100  # conversations tokenised before their tokens are handed to the index


@dataclass(frozen=True)
class FeedResult:
    conversations: int
    tokens: int
    bytes_used: int
    seconds: float
    cancelled: bool

    def summary(self) -> str:
        return (
            f"lookup history: {format_count(self.conversations, 'conversation')}, "
            f"{format_count(self.tokens, 'token')}, "
            f"{format_bytes(self.bytes_used)}, built in {self.seconds:.1f} s"
        )


def history_line(index: HistoryIndex, conversations: int, replies: int) -> str:
    """What the index holds once `replies` finished replies joined the `conversations` it was
    built from at load (the figures are the index's own, whatever fed it)."""
    return (
        f"lookup history: {format_count(conversations, 'conversation')} + "
        f"{format_count(replies, 'reply', 'replies')} since, "
        f"{format_count(index.n_tokens, 'token')}, {format_bytes(index.bytes_used)}"
    )


def history_texts(history: History) -> Iterator[list[str]]:
    """Each saved conversation's texts (system prompt, then every message), newest first."""
    for summary in history.conversations():
        try:
            conversation = history.conversation(summary.id)
        except KeyError:  # deleted meanwhile
            continue
        yield [m["content"] for m in conversation.chat_messages() if m["content"].strip()]


def feed_history(
    index: HistoryIndex,
    tokenize: Callable[[str], list[int]],
    db_path: str | Path | None = None,
    cancel: threading.Event | None = None,
) -> FeedResult:
    """Add every saved conversation to `index`. Opens (and closes) its own connection to the
    history database, so it may run on any thread."""
    t0 = time.perf_counter()
    done, cancelled = 0, False
    batch: list[list[int]] = []
    with History(db_path) as history:
        for texts in history_texts(history):
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            batch.extend(tokenize(text) for text in texts)
            done += 1
            if done % BATCH == 0:
                index.add(batch)
                batch = []
    index.add(batch)
    index.finish()
    return FeedResult(done, index.n_tokens, index.bytes_used, time.perf_counter() - t0, cancelled)
