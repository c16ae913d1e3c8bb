"""What a reply changes in the text it copies: an edit seen once is drafted where it recurs.

A reply that rewrites a pasted function with one name changed (`tmp` -> `pending`) copies the
function and leaves it at every occurrence of the old name. Lookup's copy is refused at the
first one; the reply goes on with the new name and rejoins the copy a few tokens later.
`CopyEdits` notes where a copy was refused (`refused`) and, once the text has followed the copy
again for REJOIN tokens, learns the edit between them (`learn`): the tokens the text skipped
(`old`) and those it wrote instead (`new`). From then on a copy drafts `new` where its source
reads `old` (`at`), and the match behind a copy is measured through the edits (`end_at`), so the
copy goes on as one. An edit whose draft is refused is forgotten (`forget`): a one-off change,
not a rename. The n-gram drafter (ngram.py) holds one `CopyEdits` per reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_SIDE = 16  # an edit replaces at most this many tokens, with at most this many
REJOIN = 2  # tokens the text must follow the copy again before an edit is learned from it
SURE = 8  # a rejoin this long stands even if the text leaves the copy again after it
MAX_EDITS = 32  # edits kept per reply (the oldest is dropped)
MAX_WAITING = 4  # refused copies waiting to be rejoined (a long draft can pass the next one)


@dataclass(frozen=True)
class Edit:
    old: tuple[int, ...]  # never empty: an insertion has no place in the source to go
    new: tuple[int, ...]


class CopyEdits:
    """One reply's learned edits, and the copy refusals not yet explained by one."""

    def __init__(self) -> None:
        self.edits: list[Edit] = []
        self._by_first: dict[int, list[Edit]] = {}  # old[0] -> edits (the lookups per token)
        self._waiting: list[tuple[int, int]] = []  # refused copies: (source index, text index)

    def clear(self) -> None:
        self.edits, self._by_first, self._waiting = [], {}, []

    @property
    def waiting(self) -> bool:
        """A refused copy waits for the text to rejoin it."""
        return bool(self._waiting)

    def refused(self, source: int, text: int) -> None:
        """A copy drafted the token at `source` for text index `text`; the target wrote
        another there."""
        self._waiting = [*self._waiting[1 - MAX_WAITING :], (source, text)]

    def learn(self, toks: Sequence[int]) -> list[Edit]:
        """The edits the text has made to the copies refused so far, where it has rejoined
        them (`_learn_one`)."""
        waiting, self._waiting, found = self._waiting, [], []
        for p, d in waiting:
            edit = self._learn_one(toks, p, d)
            if isinstance(edit, Edit):
                found.append(edit)
            elif edit:
                self._waiting.append((p, d))
        return found

    def _learn_one(self, toks: Sequence[int], p: int, d: int) -> Edit | bool:
        """The edit between the copy refused at source index `p` and the text from index `d`,
        once the text has rejoined the copy (the fewest tokens skipped and written first); True
        while it may still; False once the text went MAX_SIDE + SURE tokens without rejoining
        it (no edit of it)."""
        wrote = toks[d : d + MAX_SIDE + SURE + 1]  # (what the text wrote since, as far as needed)
        skips: dict[int, list[int]] = {}  # the source's next tokens -> how many tokens on
        for s in range(1, min(MAX_SIDE, d - p - 1) + 1):
            skips.setdefault(toks[p + s], []).append(s)
        best: tuple[int, int] | None = None  # (tokens written, tokens skipped)
        for i in range(min(len(wrote) - REJOIN, MAX_SIDE) + 1):
            if best is not None and i > sum(best):
                break
            for s in skips.get(wrote[i], ()):
                fewer = best is None or (i + s, i) < (sum(best), best[0])
                old, new = toks[p : p + s], wrote[:i]
                if fewer and _rejoined(toks, p + s, d + i, len(toks), old, new):
                    best = (i, s)
        if best is None:
            return len(wrote) <= MAX_SIDE + SURE
        i, s = best
        edit = Edit(tuple(toks[p : p + s]), tuple(wrote[:i]))
        self._add(edit)
        return edit

    def _add(self, edit: Edit) -> None:
        for e in [e for e in self.edits if e.old == edit.old]:
            self.forget(e)
        if len(self.edits) >= MAX_EDITS:
            self.forget(self.edits[0])
        self.edits.append(edit)
        self._by_first.setdefault(edit.old[0], []).append(edit)

    def forget(self, edit: Edit) -> None:
        """A draft of this edit was refused: the text keeps `old` somewhere after all."""
        if edit in self.edits:
            self.edits.remove(edit)
            self._by_first[edit.old[0]].remove(edit)

    def at(self, toks: Sequence[int], pos: int) -> Edit | None:
        """The edit whose `old` the source reads from `pos`, if any."""
        for e in self._by_first.get(toks[pos], ()):
            if tuple(toks[pos : pos + len(e.old)]) == e.old:
                return e
        return None

    def end_at(self, toks: Sequence[int], src: int, txt: int) -> Edit | None:
        """The edit whose `old` ends just before source index `src` while its `new` ends just
        before text index `txt` (a match measured backwards steps over it)."""
        for e in self.edits:
            o, n = len(e.old), len(e.new)
            if (
                o <= src
                and n <= txt
                and tuple(toks[src - o : src]) == e.old
                and tuple(toks[txt - n : txt]) == e.new
            ):
                return e
        return None


def _rejoined(
    toks: Sequence[int], src: int, txt: int, end: int, old: Sequence[int], new: Sequence[int]
) -> bool:
    """Whether the text from `txt` follows the source from `src` for REJOIN tokens or more, to
    `end` or for SURE tokens, where the text may make the same edit again (`old` -> `new`: a
    name used twice on one line)."""
    n, o, w = 0, len(old), len(new)
    while n < SURE and txt < end and src < txt:
        if toks[src] == toks[txt]:
            n, src, txt = n + 1, src + 1, txt + 1
        elif list(toks[src : src + o]) == list(old) and list(toks[txt : txt + w]) == list(new):
            src, txt = src + o, txt + w
        else:
            return False
    return n >= REJOIN
