"""A loaded model's vocabulary: text to tokens and back, and its special tokens.

`ModelRuntime` (runtime.py) is one: it adds the context and the KV cache. Every call goes to
llama.cpp's own vocabulary functions; a token's bytes are kept once looked up (`pieces`), as
detokenising a reply asks for the same tokens again and again.
"""

from __future__ import annotations

import ctypes
from typing import Any

PIECE_BYTES = 256  # a token's bytes fit in this almost always (else a buffer of its size)


class Vocabulary:
    """The vocabulary of one llama.cpp model (`vocab`: its `llama_vocab` pointer)."""

    def __init__(self, llama_cpp: Any, vocab: Any) -> None:
        self._lib = llama_cpp
        self._vocab = vocab
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._piece_buf = ctypes.create_string_buffer(PIECE_BYTES)
        self.pieces: dict[int, bytes] = {}  # token -> its bytes, as piece() found them
        self.eog = frozenset(  # the end-of-generation ids
            t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)
        )

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        lib = self._lib
        raw = text.encode("utf-8")
        cap = len(raw) + 16
        buf = (lib.llama_token * cap)()
        n = lib.llama_tokenize(self._vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (lib.llama_token * cap)()
            n = lib.llama_tokenize(self._vocab, raw, len(raw), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        cached = self.pieces.get(token)
        if cached is not None:
            return cached
        to_piece = self._lib.llama_token_to_piece
        n = to_piece(self._vocab, token, self._piece_buf, PIECE_BYTES, 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = to_piece(self._vocab, token, big, -n, 0, False)
            out = big.raw[:n]
        else:
            out = self._piece_buf.raw[:n]
        self.pieces[token] = out
        return out

    def ends_paragraph(self, prev: int, token: int) -> bool:
        """Whether `token` (after `prev`) ends a paragraph of prose: a blank line right after
        the end of a sentence (where a quoted paragraph ends; code's blank lines follow no
        full stop)."""
        piece = self.piece(token)
        at = piece.find(b"\n\n")
        if at < 0:
            return False
        before = piece[:at].rstrip() or self.piece(prev).rstrip()
        if before[-1:] in (b'"', b"'", b")"):  # one closing mark ('."'), not a docstring's three
            before = before[:-1]
        return before.endswith((b".", b"!", b"?"))

    def is_eog(self, token: int) -> bool:
        return token in self.eog

    def token_text(self, token: int) -> str:
        out = self._lib.llama_vocab_get_text(self._vocab, token)
        return out.decode("utf-8", "replace") if out else ""

    def special_text(self, token: int) -> str:
        return self.token_text(token) if 0 <= token < self.n_vocab else ""

    @property
    def add_bos(self) -> bool:
        return bool(self._lib.llama_vocab_get_add_bos(self._vocab))

    @property
    def bos_id(self) -> int:
        return int(self._lib.llama_vocab_bos(self._vocab))

    @property
    def eos_id(self) -> int:
        return int(self._lib.llama_vocab_eos(self._vocab))
