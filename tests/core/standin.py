"""A small deterministic stand-in for `ModelRuntime`, for fast tests of the decoder's
bookkeeping (counts, rollback, text, fallbacks). It is no model: each row of "logits" strongly
favours the token a script picks for that context. It never replaces the real-model tests of
exactness and speed (tests/core/test_engine.py, test_distribution.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

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
    ) -> None:
        self.script = script
        self.row_fn = row
        self.n_ctx = n_ctx
        self.n_vocab = N_VOCAB
        self.cache: list[int] = []
        self.llama_s = 0.0
        self.host_rows = 0
        self.can_rollback = can_rollback
        self.fail_partial_erase = False  # force llama.cpp's "cannot erase part" answer
        self.sampler = _NoBackendSampler()
        self.info = SimpleNamespace(model_name="stand-in")
        self.path = Path("stand-in.gguf")
        self.decoded: list[list[int]] = []  # every decode call's tokens
        self._remembered: tuple[int, object, object] | None = None

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
            from specchat.core.decoding.runtime import ContextFullError

            raise ContextFullError("stand-in context full")
        self.decoded.append(list(tokens))
        rows = []
        for t in tokens:
            self.cache.append(int(t))
            rows.append(self._row(self.cache))
        if logits_for == "all":
            return np.stack(rows)
        if logits_for == "last":
            return np.stack(rows[-1:])
        return np.zeros((0, self.n_vocab), dtype=np.float32)

    def remember(self, n: int, key: object, value: object) -> None:
        self._remembered = (n, key, value)

    def recall(self, n: int, key: object) -> object | None:
        r = self._remembered
        ok = r is not None and r[0] == n and r[1] == key and len(self.cache) >= n
        return r[2] if ok and r is not None else None

    def truncate(self, n_keep: int) -> bool:
        if self._remembered is not None and n_keep < self._remembered[0]:
            self._remembered = None
        if n_keep >= len(self.cache):
            return True
        if not self.can_rollback or self.fail_partial_erase:
            self.cache = []
            return n_keep == 0
        del self.cache[n_keep:]
        return True

    def common_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        for a, b in zip(self.cache, tokens, strict=False):
            if a != b:
                break
            n += 1
        return n

    def reset(self) -> None:
        self.cache = []
        self._remembered = None

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def piece(self, token: int) -> bytes:
        return PIECES.get(token, b"?")
