"""The conversation-wide n-gram drafter ("lookup" mode).

It indexes everything the chat holds — the system prompt, every earlier turn, text the user
pasted, and the reply as it grows — as counts of what followed each n-gram (n from `n_min` to
`n_max`). A draft continues the current text with the most frequent continuation of its longest
known context, token after token, and reports its confidence in each token: how often that
continuation followed that context, less the times the target refused it. The decoder turns
confidences into acceptance estimates (calibrated online per confidence class, `classes()`)
and lets the cost model size the draft against the measured verification cost.

The index lives as long as the engine: a new message of the same conversation only adds its new
tokens (O(new tokens)), and a different conversation unwinds the index to the shared prefix
first. Each emitted token costs (n_max - n_min + 1) dictionary updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from specchat.core.decoding.drafting import Draft

Key = tuple[int, ...]


@dataclass
class Proposal:
    """A candidate draft: tokens, the raw confidence and the context length behind each."""

    tokens: list[int]
    confidence: list[float]
    context: list[int]  # length of the n-gram each token continued
    keys: list[Key]

    def classes(self) -> list[str]:
        return [confidence_class(c, n) for c, n in zip(self.confidence, self.context, strict=True)]


def confidence_class(confidence: float, context: int) -> str:
    """The calibration class of a drafted token: how sure the counts were, and on how long a
    context (long contexts are verbatim copies; short ones are habits of the text)."""
    if confidence >= 0.95:
        c = "c95"
    elif confidence >= 0.75:
        c = "c75"
    elif confidence >= 0.5:
        c = "c50"
    else:
        c = "c00"
    return f"{'long' if context >= 6 else 'mid' if context >= 4 else 'short'}/{c}"


class NgramDrafter:
    kind = "lookup"

    def __init__(self, *, min_match: int = 3, max_ngram: int = 8, k_max: int = 8) -> None:
        self.n_min = min_match
        self.n_max = max_ngram
        self.k_max = k_max
        self._tokens: list[int] = []
        # context -> [times seen in all, likeliest continuation, its count, {continuation: count}]
        self._next: dict[Key, list[Any]] = {}
        self._refuted: dict[Key, dict[int, int]] = {}  # context -> continuation -> refusals

    def clear(self) -> None:
        self._tokens, self._next, self._refuted = [], {}, {}

    def reset(self, *, min_match: int, max_ngram: int, k_max: int) -> None:
        """New settings; the index is rebuilt only if the n-gram sizes changed."""
        if (min_match, max_ngram) != (self.n_min, self.n_max):
            self.clear()
        self.n_min, self.n_max, self.k_max = min_match, max_ngram, k_max

    # -- keeping the index in step with the conversation ------------------------------------
    def begin(self, context: Sequence[int]) -> None:
        """A new request: keep what the index shares with `context`, add the rest."""
        toks = self._tokens
        n = min(len(toks), len(context))
        if n and toks[:n] != list(context[:n]):
            a = np.asarray(toks[:n], dtype=np.int64)
            b = np.asarray(context[:n], dtype=np.int64)
            n = int(np.flatnonzero(a != b)[0])
        self._unwind(len(toks) - n)
        self.extend(context[n:])

    def extend(self, tokens: Sequence[int]) -> None:
        toks, nxt, lo, hi = self._tokens, self._next, self.n_min, self.n_max
        for t in tokens:
            end = len(toks)
            for n in range(lo, min(hi, end) + 1):
                key = tuple(toks[end - n :])
                entry = nxt.get(key)
                if entry is None:
                    nxt[key] = [1, t, 1, {t: 1}]
                    continue
                counts = entry[3]
                c = counts.get(t, 0) + 1
                counts[t] = c
                entry[0] += 1
                if c >= entry[2]:  # ties go to the most recent continuation
                    entry[1], entry[2] = t, c
            toks.append(t)

    def _unwind(self, count: int) -> None:
        toks, nxt = self._tokens, self._next
        for _ in range(count):
            t = toks.pop()
            end = len(toks)
            for n in range(self.n_min, min(self.n_max, end) + 1):
                key = tuple(toks[end - n :])
                entry = nxt.get(key)
                if entry is None:
                    continue
                counts = entry[3]
                left = counts.get(t, 0) - 1
                if left > 0:
                    counts[t] = left
                else:
                    counts.pop(t, None)
                entry[0] -= 1
                if not counts:
                    del nxt[key]
                    self._refuted.pop(key, None)
                elif entry[1] == t:
                    best = max(counts, key=counts.__getitem__)
                    entry[1], entry[2] = best, counts[best]

    # -- drafting ----------------------------------------------------------------------------
    def _best(self, tail: list[int]) -> tuple[int, float, int, Key] | None:
        """The likeliest continuation of `tail`: from its longest context seen before."""
        end = len(tail)
        nxt = self._next
        for n in range(min(self.n_max, end), self.n_min - 1, -1):
            key = tuple(tail[end - n :])
            entry = nxt.get(key)
            if entry is None:
                continue
            total = entry[0]
            refuted = self._refuted.get(key)
            if not refuted:
                return entry[1], entry[2] / total, n, key
            best, score = -1, -1.0
            for t, c in entry[3].items():
                sc = c / (total + 2 * refuted.get(t, 0))
                if sc > score:
                    best, score = t, sc
            return best, score, n, key
        return None

    def propose(self, k: int | None = None, stop_below: float = 0.02) -> Proposal:
        """Up to k tokens continuing the indexed text, with their confidences. Drafting stops
        once the chance that every token so far is right drops below `stop_below`."""
        limit = self.k_max if k is None else k
        tail = self._tokens[-self.n_max :]
        out = Proposal([], [], [], [])
        chance = 1.0
        for _ in range(limit):
            found = self._best(tail)
            if found is None:
                break
            t, conf, n, key = found
            chance *= conf
            if chance < stop_below:
                break
            out.tokens.append(t)
            out.confidence.append(conf)
            out.context.append(n)
            out.keys.append(key)
            tail = tail[1:] + [t] if len(tail) >= self.n_max else tail + [t]
        return out

    def feedback(self, proposal: Proposal, drafted: int, accepted: int) -> None:
        """The target refused token `accepted` of the draft: remember it for that context."""
        if accepted < drafted:
            key, t = proposal.keys[accepted], proposal.tokens[accepted]
            row = self._refuted.setdefault(key, {})
            row[t] = row.get(t, 0) + 1

    def draft(self, proposal: Proposal, k: int) -> Draft:
        return Draft(proposal.tokens[:k], None)

    # llama-cpp-python's LlamaDraftModel contract (used by the benchmark's stock peer)
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.begin([int(t) for t in input_ids])
        k = int(kwargs.get("num_pred_tokens", self.k_max))
        prop = self.propose(k, stop_below=0.3)
        return np.asarray(prop.tokens, dtype=np.intc)
