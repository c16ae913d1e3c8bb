"""Lookup drafts from every earlier conversation: a compact n-gram index over the history.

The n-gram drafter (`ngram.py`) drafts from the conversation at hand. This index holds the
tokens of the others (the saved history, all local), so a question, a code file or a system
prompt seen before drafts well in a new conversation.

Memory is what matters here (thousands of conversations of thousands of tokens): the tokens
live in one int32 array; the index keeps, for a sample of positions, the hash of the
`GRAM` tokens ending there and the position, as two sorted numpy arrays. A position is sampled
when its gram's hash is a multiple of `SAMPLE` — by content, not by place, so the same text is
sampled at the same tokens wherever it occurs, and a copy being typed meets a sampled gram every
`SAMPLE` tokens or so. About 4 + 8 / SAMPLE bytes a token (the `bytes_used` property says).

Documents are added in batches (`add`): new ones go to a small pending list and are merged into
the sorted arrays once the list is large, so adding is cheap and lookups stay a binary search.
One writer (the thread that builds the index) and readers that see a consistent snapshot: the
arrays are replaced, never changed in place.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["GRAM", "SAMPLE", "HistoryIndex", "HistoryProposal"]

GRAM = 4  # tokens that must match before the history is trusted
SAMPLE = 4  # one gram in SAMPLE is indexed (by its hash)
MERGE_AT = 1 << 16  # pending positions before a merge into the sorted arrays
_SEP = -1  # between documents: no gram crosses it
_MULT = np.uint64(0x9E3779B97F4A7C15)
_CANDIDATES = 64  # most earlier occurrences looked at per lookup


@dataclass(frozen=True)
class HistoryProposal:
    tokens: list[int]  # the continuation most often seen after the current gram
    support: int  # how many earlier occurrences agree on its first token
    seen: int  # occurrences of the gram found
    at: int  # where the proposed tokens start in the history (one occurrence that agrees)


def _gram_hashes(tokens: npt.NDArray[np.int32]) -> npt.NDArray[np.uint64]:
    """Hash of the GRAM tokens ending at each position (positions < GRAM-1 get garbage)."""
    t = tokens.astype(np.uint64)
    h = np.zeros(len(t), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(GRAM):
            shifted = np.zeros_like(t)
            shifted[j:] = t[: len(t) - j] if j else t
            h = (h ^ shifted) * _MULT
            h ^= h >> np.uint64(29)
    return h


_M64 = (1 << 64) - 1


def _hash_of(gram: Sequence[int]) -> int:
    """`_gram_hashes` of one gram, in plain integers (once per drafting step: numpy's call
    overhead would cost more than the arithmetic)."""
    h, mult = 0, int(_MULT)
    for j in range(GRAM):
        h = ((h ^ (int(gram[-1 - j]) & _M64)) * mult) & _M64
        h ^= h >> 29
    return h


class HistoryIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # one writer at a time; readers use snapshots
        self._tokens = np.zeros(0, dtype=np.int32)
        self._keys = np.zeros(0, dtype=np.uint32)  # sorted gram hashes (low 32 bits)
        self._pos = np.zeros(0, dtype=np.uint32)  # position of each gram's last token
        self._pending_keys: list[npt.NDArray[np.uint32]] = []
        self._pending_pos: list[npt.NDArray[np.uint32]] = []
        self._pending_n = 0
        self.documents = 0

    # -- building ----------------------------------------------------------------------------
    def add(self, documents: Iterable[Sequence[int]]) -> None:
        """Append documents (token lists); each is indexed on its own (no gram spans two)."""
        with self._lock:
            parts = [self._tokens]
            start = len(self._tokens)
            for doc in documents:
                arr = np.asarray(doc, dtype=np.int32)
                if len(arr) < GRAM + 1:
                    continue
                keys, pos = self._sampled(arr, start)
                self._pending_keys.append(keys)
                self._pending_pos.append(pos)
                self._pending_n += len(keys)
                parts += [arr, np.array([_SEP], dtype=np.int32)]
                start += len(arr) + 1
                self.documents += 1
            if len(parts) > 1:
                self._tokens = np.concatenate(parts)
            if self._pending_n >= MERGE_AT:
                self._merge()

    def finish(self) -> None:
        """Merge what is pending (call when a batch of adds is over)."""
        with self._lock:
            self._merge()

    @staticmethod
    def _sampled(
        arr: npt.NDArray[np.int32], start: int
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
        h = _gram_hashes(arr)[GRAM - 1 : -1]  # grams with at least one token after them
        keep = (h % np.uint64(SAMPLE)) == 0
        ends = np.flatnonzero(keep) + (GRAM - 1) + start
        return (h[keep] & np.uint64(0xFFFFFFFF)).astype(np.uint32), ends.astype(np.uint32)

    def _merge(self) -> None:
        if not self._pending_n:
            return
        # Only the new grams are sorted; they go in after equal keys already held (the order
        # a stable sort of everything would give), one O(n) copy instead of a full sort.
        new_keys = np.concatenate(self._pending_keys)
        new_pos = np.concatenate(self._pending_pos)
        order = np.argsort(new_keys, kind="stable")
        new_keys, new_pos = new_keys[order], new_pos[order]
        at = np.searchsorted(self._keys, new_keys, side="right")
        # replaced, never changed in place
        self._keys, self._pos = (
            np.insert(self._keys, at, new_keys),
            np.insert(self._pos, at, new_pos),
        )
        self._pending_keys, self._pending_pos, self._pending_n = [], [], 0

    # -- what it holds ----------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return len(self._tokens) - self.documents  # without the separators

    @property
    def bytes_used(self) -> int:
        pending = sum(a.nbytes for a in self._pending_keys + self._pending_pos)
        return self._tokens.nbytes + self._keys.nbytes + self._pos.nbytes + pending

    # -- drafting ----------------------------------------------------------------------------
    def propose(self, context: Sequence[int], k: int) -> HistoryProposal | None:
        """Up to `k` tokens that followed the last GRAM tokens of `context` in the history
        (the continuation most earlier occurrences agree on), or None when the gram is not
        indexed or never seen."""
        if k <= 0 or len(context) < GRAM:
            return None
        gram = [int(t) for t in context[-GRAM:]]
        h = _hash_of(gram)
        if h % SAMPLE:
            return None
        tokens, keys, pos = self._tokens, self._keys, self._pos  # one consistent snapshot
        key = np.uint32(h & 0xFFFFFFFF)
        lo = int(np.searchsorted(keys, key, side="left"))
        hi = min(int(np.searchsorted(keys, key, side="right")), lo + _CANDIDATES)
        starts = []
        want = np.asarray(gram, dtype=np.int32)
        for end in pos[lo:hi]:
            e = int(end)
            if np.array_equal(tokens[e - GRAM + 1 : e + 1], want):
                starts.append(e + 1)
        if not starts:
            return None
        return _agreed(tokens, starts, k)

    def continuation(self, at: int, k: int) -> list[int]:
        """Up to `k` tokens of the history from position `at` (a copy being followed), ending
        at the end of its document."""
        tokens = self._tokens
        if k <= 0 or not 0 <= at < len(tokens):
            return []
        part = tokens[at : at + k]
        cut = np.flatnonzero(part == _SEP)
        if cut.size:
            part = part[: int(cut[0])]
        return [int(t) for t in part]

    def matches(self, at: int, tokens: Sequence[int]) -> bool:
        """Whether the history holds `tokens` from position `at` on."""
        n = len(tokens)
        if at < 0 or at + n > len(self._tokens):
            return False
        return bool(np.array_equal(self._tokens[at : at + n], np.asarray(tokens, np.int32)))


def _agreed(tokens: npt.NDArray[np.int32], starts: list[int], k: int) -> HistoryProposal | None:
    """Walk the continuations token by token, keeping those that agree with the majority."""
    alive, out = starts, []
    first_support = 0
    for step in range(k):
        votes = Counter(int(tokens[s + step]) for s in alive if s + step < len(tokens))
        votes.pop(_SEP, None)
        if not votes:
            break
        token, count = votes.most_common(1)[0]
        if step == 0:
            first_support = count
        out.append(token)
        alive = [s for s in alive if s + step < len(tokens) and int(tokens[s + step]) == token]
    if not out:
        return None
    return HistoryProposal(out, first_support, len(starts), alive[0] if alive else starts[0])
