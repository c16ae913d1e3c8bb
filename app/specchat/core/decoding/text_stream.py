"""Token pieces (bytes) -> text, holding back what is not decided yet.

Two things are held back: the bytes of an incomplete UTF-8 character, and text that may be the
start of a stop string. Released text keeps its origin (drafted or not) so the front end can
highlight draft tokens: `take()` returns (text, from_draft) segments.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

Segment = tuple[str, bool]


class TextStream:
    def __init__(self, stops: Sequence[str]) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in stops if s]
        self._span = max((len(s) for s in self._stops), default=0)
        self._pending: list[Segment] = []  # text not yet released, by origin
        self._pending_len = 0
        self._tail = ""  # recently released text, to find stops spanning released/pending
        self._out: list[Segment] = []
        self.stopped = False  # a stop string was reached: nothing after it is released
        self._carry = False  # the decoder holds the first bytes of a character

    def _decode(self, piece: bytes) -> str:
        """A piece through the incremental decoder (it may hold the start of a character)."""
        text = self._dec.decode(piece)
        self._carry = bool(self._dec.getstate()[0])
        return text

    def push(self, piece: bytes, from_draft: bool) -> bool:
        """Add one token's bytes; returns True when a stop string is complete."""
        # Most pieces are whole characters: decoded at once, without the incremental decoder
        # (whose buffer is empty then, so it would give the same text).
        if self._carry:
            text = self._decode(piece)
        else:
            try:
                text = piece.decode()
            except UnicodeDecodeError:
                text = self._decode(piece)
        if not text:
            return False
        if not self._stops:
            self._release(text, from_draft)
            return False
        self._hold(text, from_draft)
        pending = "".join(t for t, _ in self._pending)
        window = self._tail + pending
        hits = [i for i in (window.find(s) for s in self._stops) if i >= 0]
        if hits:
            cut = max(min(hits) - len(self._tail), 0)
            self._release_pending(cut)
            self._pending, self._pending_len = [], 0
            self.stopped = True
            return True
        hold = 0
        for s in self._stops:
            for n in range(min(len(s) - 1, len(window)), 0, -1):
                if window.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        self._release_pending(self._pending_len - min(hold, self._pending_len))
        return False

    def flush(self) -> None:
        """End of the reply without a stop string: release everything held back."""
        if self.stopped:
            return
        rest = self._dec.decode(b"", final=True) if self._carry else ""
        if rest:
            self._hold(rest, self._pending[-1][1] if self._pending else False)
        self._release_pending(self._pending_len)

    def take(self) -> list[Segment]:
        """The text released since the last call, as (text, from_draft) segments (the
        stream's own list, handed over: it starts a new one)."""
        out, self._out = self._out, []
        return out

    # -- internals --------------------------------------------------------------------------
    def _hold(self, text: str, from_draft: bool) -> None:
        if self._pending and self._pending[-1][1] == from_draft:
            self._pending[-1] = (self._pending[-1][0] + text, from_draft)
        else:
            self._pending.append((text, from_draft))
        self._pending_len += len(text)

    def _release(self, text: str, from_draft: bool) -> None:
        if self._out and self._out[-1][1] == from_draft:
            self._out[-1] = (self._out[-1][0] + text, from_draft)
        else:
            self._out.append((text, from_draft))
        if self._span:
            self._tail = (self._tail + text)[-self._span :]

    def _release_pending(self, n: int) -> None:
        """Release the first n pending characters."""
        while n > 0 and self._pending:
            text, flag = self._pending[0]
            if len(text) <= n:
                self._pending.pop(0)
                self._release(text, flag)
                n -= len(text)
                self._pending_len -= len(text)
            else:
                self._release(text[:n], flag)
                self._pending[0] = (text[n:], flag)
                self._pending_len -= n
                n = 0
