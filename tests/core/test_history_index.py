"""The history index (core/decoding/history_index.py): drafts from earlier conversations, exact
continuations, the majority among several, no draft across two documents, bounded memory.

Token sequences are made here (no model needed); expectations are the documents themselves.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from specchat.core.decoding.drafters.history_index import GRAM, HistoryIndex
from specchat.core.engines.history_feed import feed_history
from specchat.core.state.history import History

RNG = np.random.default_rng(7)


def doc(n: int, vocab: int = 150_000) -> list[int]:
    return [int(t) for t in RNG.integers(0, vocab, size=n)]


def test_a_copied_span_drafts_its_exact_continuation() -> None:
    text = doc(400)
    index = HistoryIndex()
    index.add([doc(300), text, doc(300)])
    index.finish()
    hits = 0
    for i in range(GRAM, len(text) - 1):
        got = index.propose(text[:i], 16)
        if got is None:
            continue
        hits += 1
        assert got.tokens == text[i : i + 16], f"wrong continuation after position {i}"
        assert got.support == 1 and got.seen == 1
    # grams are sampled by content, about one in four: a copy meets one every few tokens
    assert hits > len(text) // 10


def test_the_continuation_most_documents_agree_on_wins() -> None:
    gram = doc(GRAM)
    a, b = doc(10), doc(10)
    # find a gram that is indexed (sampled by its hash): try prefixes until one drafts
    index = HistoryIndex()
    for lead in range(200):
        g = [lead + 1, *gram[1:]]
        probe = HistoryIndex()
        probe.add([g + a])
        probe.finish()
        if probe.propose(g, 4) is not None:
            gram = g
            break
    else:
        raise AssertionError("no indexed gram found in 200 tries")
    index.add([doc(20) + gram + a, gram + b + doc(5), doc(3) + gram + a])
    index.finish()
    got = index.propose(doc(30) + gram, 10)
    assert got is not None
    assert got.tokens == a and got.support == 2 and got.seen == 3


def test_no_draft_runs_from_one_document_into_the_next() -> None:
    first, second = doc(50), doc(50)
    index = HistoryIndex()
    index.add([first, second])
    index.finish()
    hits = 0
    for i in range(len(first) - 31, len(first) + 1):
        got = index.propose(first[:i], 32)
        if got is not None:
            hits += 1
            assert got.tokens == first[i : i + 32], "the draft left its document"
    assert hits, "no indexed gram near the end of the document: the test checked nothing"


def test_adding_in_batches_is_the_same_as_adding_at_once() -> None:
    docs = [doc(200) for _ in range(20)]
    once, batched = HistoryIndex(), HistoryIndex()
    once.add(docs)
    once.finish()
    for d in docs:
        batched.add([d])
    batched.finish()
    probe = docs[7]
    for i in range(GRAM, len(probe)):
        a, b = once.propose(probe[:i], 8), batched.propose(probe[:i], 8)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.tokens == b.tokens


def test_five_thousand_conversations_fit_in_64_mb() -> None:
    """The issue's budget: 5,000 conversations of 2,000 tokens each in at most 64 MB."""
    index = HistoryIndex()
    rng = np.random.default_rng(1)
    for _ in range(50):  # added as the history is read: 100 conversations at a time
        index.add(rng.integers(0, 150_000, size=(100, 2000), dtype=np.int32))
    index.finish()
    assert index.documents == 5000 and index.n_tokens == 10_000_000
    print(f"history index: {index.bytes_used / 2**20:.1f} MiB for {index.n_tokens:,} tokens")
    assert index.bytes_used <= 64 * 2**20


def test_the_saved_conversations_feed_the_index(tmp_path: Path) -> None:
    """Every message of every saved conversation (deleted ones left out) becomes a document."""
    db = tmp_path / "history.sqlite3"
    code = "def total(xs):\n    return sum(x for x in xs if x is not None)\n"
    with History(db) as h:
        one = h.create("code", system_prompt="You are terse.")
        h.add_message(one, "user", "Fix this:\n" + code)
        h.add_message(one, "assistant", code)
        gone = h.create("deleted")
        h.add_message(gone, "user", "never indexed: zebra quagga okapi")
        h.delete(gone)

    def tokenize(text: str) -> list[int]:  # one token per character: enough for bookkeeping
        return [ord(c) for c in text]

    index = HistoryIndex()
    result = feed_history(index, tokenize, db)
    assert result.conversations == 1 and not result.cancelled
    assert index.documents == 3  # the system prompt and both messages
    assert index.n_tokens == len("You are terse.") + len("Fix this:\n" + code) + len(code)
    # the status bar's line counts in words ("1 conversation", not "1 conversations")
    assert result.summary().startswith(f"lookup history: 1 conversation, {index.n_tokens:,} tokens")
    # a new conversation typing the function again drafts the rest of it from the history
    typed = tokenize(code)
    drafts = [index.propose(typed[:i], 8) for i in range(GRAM, len(typed))]
    assert any(d is not None for d in drafts)
    zebra = tokenize("never indexed: zebra quagga okapi")
    assert all(index.propose(zebra[:i], 4) is None for i in range(GRAM, len(zebra)))


def test_feeding_stops_when_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    with History(db) as h:
        for i in range(3):
            h.add_message(h.create(f"c{i}"), "user", f"message number {i} " * 5)
    stop = threading.Event()
    stop.set()
    result = feed_history(HistoryIndex(), lambda s: [ord(c) for c in s], db, cancel=stop)
    assert result.cancelled and result.conversations == 0
