"""The record of what a KV cache holds, kept apart from the memory that holds it.

`CacheBook` knows which tokens sit at positions 0..len-1 of sequence 0, what the decoder asked
it to remember about the first n of them (the end of a prompt), how long a prefix a new request
shares with them, and what to do on a rollback: ask the memory to erase the positions past the
cut, and when the memory cannot erase part of a sequence (a recurrent or hybrid model cut
deeper than its state snapshots reach), clear everything and say so, so that the caller decodes
again what it wants to keep.

The book does no decoding and touches no memory itself: `ModelRuntime` hands it llama.cpp's
erase and clear calls, and the tests' stand-in runtime hands it its own, so both run this code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["CacheBook"]


class CacheBook:
    """Tokens whose K/V are in the cache (`tokens`, position i holds tokens[i]) and one
    remembered value about its first n tokens."""

    __slots__ = ("tokens", "_remembered")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._remembered: tuple[int, object, object] | None = None

    def remember(self, n: int, key: object, value: object) -> None:
        """Keep `value`, computed (as `key` says) from the first n cached tokens, until the
        cache is cut below n."""
        self._remembered = (n, key, value)

    def recall(self, n: int, key: object) -> object | None:
        """The value remembered for the first n tokens under `key`, while they are cached."""
        r = self._remembered
        if r is not None and r[0] == n and r[1] == key and len(self.tokens) >= n:
            return r[2]
        return None

    def truncate(
        self, n_keep: int, erase: Callable[[int], bool], clear: Callable[[], None]
    ) -> bool:
        """Keep the first `n_keep` tokens. `erase(n_keep)` asks the memory to drop positions
        >= n_keep and answers whether it could; when it could not, `clear()` empties the memory
        and the book empties too. Returns whether the first n_keep tokens are still cached
        (True for n_keep == 0 either way)."""
        if self._remembered is not None and n_keep < self._remembered[0]:
            self._remembered = None
        if n_keep >= len(self.tokens):
            return True
        if not erase(n_keep):
            clear()
            self.clear()
            return n_keep == 0
        del self.tokens[n_keep:]
        return True

    def clear(self) -> None:
        """The memory was emptied: nothing is cached or remembered."""
        self.tokens = []
        self._remembered = None

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """Length of the prefix `tokens` shares with the cache (once per request, not per
        step: it compares as arrays)."""
        n = min(len(self.tokens), len(tokens))
        if n == 0:
            return 0
        a = np.asarray(self.tokens[:n], dtype=np.int64)
        b = np.asarray(tokens[:n], dtype=np.int64)
        diff = np.flatnonzero(a != b)
        return int(diff[0]) if diff.size else n
