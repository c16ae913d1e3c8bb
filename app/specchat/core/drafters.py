"""Draft proposers. Both implement llama-cpp-python's draft API (`LlamaDraftModel`: input ids in,
draft ids out) and add `propose()`, which also returns the draft's own distributions (needed for
exact speculative sampling at T > 0), and `feedback()`, which sizes the next draft.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaDraftModel

from .runtime import ModelRuntime
from .sampling import SparseDist, Warp, sample


@dataclass
class Draft:
    tokens: list[int]
    q: list[SparseDist] | None  # the draft's distribution per token; None = deterministic draft
    match_len: int = 0  # prompt lookup: length of the n-gram match the draft continues


class ModelDrafter(LlamaDraftModel):
    """A smaller GGUF model with its own KV cache. Each call reuses the prefix it has already
    decoded, so after a rejection only the tokens past the divergence are decoded again."""

    kind = "draft"

    def __init__(self, runtime: ModelRuntime, *, k_init: int = 4, k_max: int = 8) -> None:
        self.rt = runtime
        self.k_max = k_max
        self.k = k_init
        self._ema = float(k_init)  # running mean of accepted tokens per step

    def reset(self, k_init: int, k_max: int) -> None:
        self.k_max, self.k, self._ema = k_max, k_init, float(k_init)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        k = int(kwargs.get("num_pred_tokens", self.k))
        draft = self.propose([int(t) for t in input_ids], k, warp=None)
        return np.asarray(draft.tokens, dtype=np.intc)

    def propose(
        self,
        context: Sequence[int],
        k: int,
        *,
        warp: Warp | None,
        rng: np.random.Generator | None = None,
        p_min: float = 0.0,
        history_tail: int = 64,
    ) -> Draft:
        rt = self.rt
        k = min(k, rt.n_ctx - len(context))
        if k <= 0 or not context:
            return Draft([], None)
        keep = min(rt.common_prefix(context), len(context) - 1)
        rt.truncate(keep)
        logits = rt.decode(context[keep:], logits_for="last")[0]
        sampled = warp is not None and not warp.greedy
        hist = list(context[-history_tail:])
        tokens: list[int] = []
        qs: list[SparseDist] = []
        for i in range(k):
            if sampled:
                assert warp is not None and rng is not None
                q = warp.dist(logits, hist)
                if q.top_prob() < p_min:
                    break
                t = sample(q, rng)
                qs.append(q)
            else:
                w = warp
                t = int(np.argmax(logits)) if w is None else w.argmax(logits, hist)
                if p_min > 0.0 and _top_prob(logits) < p_min:
                    break
            tokens.append(t)
            hist.append(t)
            if i + 1 < k and not rt.is_eog(t):
                logits = rt.decode([t], logits_for="last")[0]
            else:
                break
        return Draft(tokens, qs if sampled else None)

    def feedback(self, drafted: int, accepted: int) -> None:
        """Adapt the draft length to the observed acceptance: aim one past the mean run."""
        if drafted == 0:
            return
        self._ema = 0.7 * self._ema + 0.3 * accepted
        self.k = max(1, min(self.k_max, math.ceil(self._ema) + 1))


def _top_prob(logits: npt.NDArray[np.float32]) -> float:
    z = logits.astype(np.float64)
    return float(1.0 / np.exp(z - z.max()).sum())


class PromptLookupDrafter(LlamaDraftModel):
    """Drafts by copying what followed an earlier occurrence of the current suffix (in the prompt
    or the reply so far). An index from n-grams to positions is updated in O(1) per token, so a
    proposal never scans the text. It drafts only when the match is at least `min_match` tokens
    long, and sizes the draft by the match length and by how the last lookup drafts fared."""

    kind = "lookup"

    def __init__(self, *, min_match: int = 3, max_ngram: int = 8, k_max: int = 8) -> None:
        self.min_match = min_match
        self.max_ngram = max_ngram
        self.k_max = k_max
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], list[int]] = {}
        self._streak = 0  # consecutive fully accepted drafts (grows the next draft)

    def reset(self, *, min_match: int, max_ngram: int, k_max: int) -> None:
        if min_match != self.min_match:
            self._tokens, self._index = [], {}
        self.min_match, self.max_ngram, self.k_max = min_match, max_ngram, k_max
        self._streak = 0

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        draft = self.propose(
            [int(t) for t in input_ids], int(kwargs.get("num_pred_tokens", self.k_max))
        )
        return np.asarray(draft.tokens, dtype=np.intc)

    def _sync(self, context: Sequence[int]) -> None:
        n = len(self._tokens)
        if len(context) >= n and list(context[:n]) == self._tokens:
            for t in context[n:]:
                self._append(t)
            return
        self._tokens, self._index = [], {}
        for t in context:
            self._append(t)

    def _append(self, token: int) -> None:
        self._tokens.append(token)
        m = self.min_match
        if len(self._tokens) >= m:
            key = tuple(self._tokens[-m:])
            self._index.setdefault(key, []).append(len(self._tokens))

    def find(self, context: Sequence[int]) -> tuple[int, int]:
        """(start of the continuation, match length) of the best earlier match, or (-1, 0)."""
        self._sync(context)
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

    def propose(self, context: Sequence[int], k: int | None = None, **_: Any) -> Draft:
        start, match_len = self.find(context)
        if start < 0:
            return Draft([], None)
        limit = self.k_max if k is None else min(k, self.k_max)
        size = match_len - self.min_match + 2 + 2 * self._streak
        size = max(1, min(limit, size))
        tokens = self._tokens[start : start + size]
        return Draft(list(tokens), None, match_len=match_len)

    def feedback(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self._streak = self._streak + 1 if accepted == drafted else 0
