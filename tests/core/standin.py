"""A small deterministic stand-in for `ModelRuntime`, for fast tests of the decoder's
bookkeeping (counts, rollback, text, fallbacks). It is no model: each row of "logits" strongly
favours the token a script picks for that context. Its record of the KV cache is the runtime's
own `CacheBook` (truncate, recall, common prefix), so rollback tests run the real bookkeeping.
It never replaces the real-model tests of exactness and speed (tests/core/test_engine.py,
test_distribution.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from specchat.core.decoding.config import ContextFullError
from specchat.core.decoding.kv_cache import CacheBook

EOS = 0
# token id -> text piece (id 0 is the end-of-generation token)
PIECES = {0: b"", 1: b"Hello", 2: b" ", 3: b"#", 4: b"a", 5: b"b", 6: b"c", 7: b"d", 8: b"e"}
N_VOCAB = 32

Script = Callable[[Sequence[int]], int]  # context -> the token this "model" prefers next


def reply_script(prompt_len: int, reply: Sequence[int], after: int = EOS) -> Script:
    """Prefers reply[i] at reply position i, then `after` for ever."""

    def pick(ctx: Sequence[int]) -> int:
        i = len(ctx) - prompt_len
        return reply[i] if 0 <= i < len(reply) else after

    return pick


class _NoBackendSampler:
    active = None


class StandIn:
    def __init__(
        self,
        script: Script,
        *,
        n_ctx: int = 512,
        can_rollback: bool = True,
        row: Callable[[Sequence[int]], np.ndarray] | None = None,
        token_s: float = 0.0,
    ) -> None:
        self.script = script
        self.row_fn = row
        self.n_ctx = n_ctx
        self.n_vocab = N_VOCAB
        self.book = CacheBook()
        self.llama_s = 0.0  # a clock that moves token_s per decoded token (0: stands still)
        self.token_s = token_s
        self.host_rows = 0
        self.can_rollback = can_rollback
        self.rollback_depth = n_ctx  # (a transformer: any cut)
        self.fail_partial_erase = False  # force llama.cpp's "cannot erase part" answer
        self.sampler = _NoBackendSampler()
        self.info = SimpleNamespace(model_name="stand-in", display_name="stand-in")
        self.path = Path("stand-in.gguf")
        self.decoded: list[list[int]] = []  # every decode call's tokens
        self.eog = frozenset({EOS})
        self.pieces = PIECES  # what piece() gives, read directly by the decoder
        self.paragraph_ends: set[int] = set()  # tokens that end a paragraph of prose

    def use_sampler(self, spec: object) -> bool:
        return False

    def _row(self, ctx: Sequence[int]) -> np.ndarray:
        if self.row_fn is not None:
            return self.row_fn(ctx)
        z = np.zeros(self.n_vocab, dtype=np.float32)
        z[self.script(ctx)] = 12.0
        return z

    def decode(self, tokens: Sequence[int], *, logits_for: str = "last", cancel=None):
        if len(self.cache) + len(tokens) > self.n_ctx:
            raise ContextFullError("stand-in context full")
        self.decoded.append(list(tokens))
        self.llama_s += self.token_s * len(tokens)
        rows = []
        for t in tokens:
            self.cache.append(int(t))
            rows.append(self._row(self.cache))
        if logits_for == "all":
            return np.stack(rows)
        if logits_for == "last":
            return np.stack(rows[-1:])
        return np.zeros((0, self.n_vocab), dtype=np.float32)

    @property
    def cache(self) -> list[int]:
        return self.book.tokens

    def remember(self, n: int, key: object, value: object) -> None:
        self.book.remember(n, key, value)

    def recall(self, n: int, key: object) -> object | None:
        return self.book.recall(n, key)

    def truncate(self, n_keep: int) -> bool:
        return self.book.truncate(n_keep, self._erase_from, lambda: None)

    def _erase_from(self, n_keep: int) -> bool:
        """The memory's answer to "erase positions >= n_keep" (llama_memory_seq_rm's)."""
        return self.can_rollback and not self.fail_partial_erase

    def common_prefix(self, tokens: Sequence[int]) -> int:
        return self.book.common_prefix(tokens)

    def reset(self) -> None:
        self.book.clear()

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def piece(self, token: int) -> bytes:
        return PIECES.get(token, b"?")

    def ends_paragraph(self, prev: int, token: int) -> bool:
        return token in self.paragraph_ends
