"""The prompt-lookup drafter: copies what followed an earlier occurrence of the current text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .drafting import Draft


class PromptLookupDrafter:
    """Drafts by copying what followed an earlier occurrence of the current suffix (in the prompt
    or the reply so far). An index from n-grams to positions grows in O(1) per token, so a
    proposal never scans the text. It drafts only when the match is at least `min_match` tokens
    long; the decoder sizes the draft (the cost model) from the match length.

    The decoder keeps it in step with the conversation: `begin()` once per request, `extend()`
    with every emitted token."""

    kind = "lookup"

    def __init__(self, *, min_match: int = 3, max_ngram: int = 8, k_max: int = 8) -> None:
        self.min_match = min_match
        self.max_ngram = max_ngram
        self.k_max = k_max
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], list[int]] = {}

    def reset(self, *, min_match: int, max_ngram: int, k_max: int) -> None:
        if min_match != self.min_match:
            self._tokens, self._index = [], {}
        self.min_match, self.max_ngram, self.k_max = min_match, max_ngram, k_max

    def begin(self, context: Sequence[int]) -> None:
        """A new request: reuse the index when `context` extends what it holds, else rebuild."""
        n = len(self._tokens)
        if not (len(context) >= n and list(context[:n]) == self._tokens):
            self._tokens, self._index = [], {}
            n = 0
        self.extend(context[n:])

    def extend(self, tokens: Sequence[int]) -> None:
        m = self.min_match
        for t in tokens:
            self._tokens.append(t)
            if len(self._tokens) >= m:
                key = tuple(self._tokens[-m:])
                self._index.setdefault(key, []).append(len(self._tokens))

    # llama-cpp-python's LlamaDraftModel contract (used by the benchmark's stock peer)
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.begin([int(t) for t in input_ids])
        start, _ = self.find()
        k = int(kwargs.get("num_pred_tokens", self.k_max))
        return np.asarray(self.take(start, k) if start >= 0 else [], dtype=np.intc)

    def find(self) -> tuple[int, int]:
        """(start of the continuation, match length) of the best earlier match, or (-1, 0)."""
        toks = self._tokens
        n, m = len(toks), self.min_match
        if n <= m:
            return -1, 0
        ends = self._index.get(tuple(toks[-m:]))
        if not ends:
            return -1, 0
        best_end, best_len = -1, 0
        for end in reversed(ends[-16:]):  # most recent first
            if end >= n:
                continue
            length = m
            while length < self.max_ngram and end - length - 1 >= 0:
                if toks[end - length - 1] != toks[n - length - 1]:
                    break
                length += 1
            if length > best_len:
                best_end, best_len = end, length
        return best_end, best_len

    def available(self, start: int) -> int:
        """How many tokens follow position `start` (0 when there is no match)."""
        return len(self._tokens) - start if start >= 0 else 0

    def take(self, start: int, k: int) -> list[int]:
        return list(self._tokens[start : start + k])

    def draft(self, start: int, k: int, match_len: int) -> Draft:
        return Draft(self.take(start, k), None, match_len)
