"""Filling the lookup drafter's history index from the saved conversations (no Qt).

Every message of every saved conversation becomes one document of the index
(`decoding/history_index.py`), tokenised with the loaded target's tokenizer. `HistoryFeed`
runs this on a thread of its own after a model loads (never on the GUI thread, never on the
inference thread), with its own database connection; a cancel stops it between conversations.
It also adds each finished exchange and says what the index holds (the window's status line).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.core.decoding.drafters.history_index import HistoryIndex
from specchat.core.state.history import History
from specchat.core.units import format_bytes, format_count

if TYPE_CHECKING:
    from specchat.core.engines.local import Engine

__all__ = [
    "HISTORY_OFF",
    "FeedResult",
    "HistoryFeed",
    "feed_history",
    "history_line",
    "history_texts",
]

log = logging.getLogger(__name__)
HISTORY_OFF = "lookup history: off"  # the status line when the setting is off

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


class HistoryFeed:
    """An engine's lookup history as the window keeps it: the saved conversations indexed on
    a thread of its own, each finished exchange added, and a line saying what the index holds
    (`on_line`, called from whichever thread changed it)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._feed: tuple[threading.Thread, threading.Event] | None = None
        self.on = False  # finished exchanges join the index
        self._indexed: int | None = None  # conversations the index was built from at load
        self._replies = 0  # exchanges added to it since

    def start(self, engine: Engine, db: Path | None) -> None:
        """For a new engine (or the setting turned on): fill its history index from `db` on
        a thread of its own (tokenising with its target), so neither the window nor the first
        reply waits for it; None: the history is off."""
        self._indexed, self._replies = None, 0  # a new engine, a new index
        self.on = db is not None
        if db is None:
            self._on_line(HISTORY_OFF)
            return
        stop = threading.Event()

        def run() -> None:
            try:
                target = engine.target
                result = feed_history(
                    engine.history,
                    lambda text: target.tokenize(text, add_special=False, parse_special=False),
                    db,
                    stop,
                )
            except Exception:  # the history is a bonus: a damaged database costs only drafts
                log.info("could not index the conversation history", exc_info=True)
                return
            log.info(result.summary())
            if not result.cancelled:
                self._indexed = result.conversations
                replies = self._replies  # (finished while the index was being built)
                line = history_line(engine.history, result.conversations, replies)
                self._on_line(line if replies else result.summary())

        thread = threading.Thread(target=run, name="history-index", daemon=True)
        self._feed = (thread, stop)
        thread.start()

    def switch(self, engine: Engine, db: Path | None) -> None:
        """The setting changed: drafting from the saved conversations on (indexed anew) or
        off (an empty index), at once."""
        if (db is not None) == self.on:
            return
        self.stop()
        engine.use_history(HistoryIndex())
        self.start(engine, db)

    def remember(self, engine: Engine, texts: Sequence[str]) -> None:
        """A finished exchange joins the index (when the history is on)."""
        if not self.on:
            return
        try:  # later conversations draft from this exchange too
            engine.remember(texts)
        except Exception:
            log.info("could not add the reply to the history index", exc_info=True)
            return
        self._replies += 1
        if self._indexed is not None:
            self._on_line(history_line(engine.history, self._indexed, self._replies))

    def stop(self) -> None:
        """Stop the feed between conversations (it tokenises with the engine's target)."""
        if self._feed is not None:
            thread, stop = self._feed
            stop.set()
            thread.join()
            self._feed = None
