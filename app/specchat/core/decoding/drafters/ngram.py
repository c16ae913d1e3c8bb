"""The n-gram drafter ("lookup" mode): drafts copied from the text the conversation holds.

It indexes everything the chat holds — the system prompt, every earlier turn, text the user
pasted, and the reply as it grows — as counts of what followed each n-gram (n from `n_min` to
`n_max`), and where each was last seen. A draft continues the current text with the most
frequent continuation of its longest known context, token after token. When the text is copying
a span (the reply's last tokens match an earlier stretch far longer than `n_max`), the match is
the longest context there is: the draft follows the span, up to `k_max` tokens (64), from the
first step of a reply. Each drafted token carries its confidence (how often that continuation
followed that context, less the times the target refused it) and the length of the match behind
it; the decoder turns both into acceptance estimates (calibrated online per class, `classes()`)
and sizes the draft against the measured verification cost. A proposal and its classes are
`lookup_proposal.py`'s: over the bundled suite's replies an opening guess at a 3-5-token match
was right 56-62 % of the time, the same match right after a right guess 70-81 % (acceptance.py).

A reply that changes what it copies (a rename) has the change drafted where it recurs, and the
copy's match runs through it (`copy_edits.py`). No draft goes past one of the target's end
tokens (`DraftSettings.ends`): a copy of the user's message would run on into the next turn.

When the conversation has no match, the drafter asks the index of the earlier conversations
(`history_index.HistoryIndex`, filled by the front end) and then follows the span it found
there while the reply keeps copying it. `Proposal.source` says where a draft came from.

The index lives as long as the engine: a new message of the same conversation only adds its new
tokens (O(new tokens)), and a different conversation unwinds the index to the shared prefix
first. Each emitted token costs (n_max - n_min + 1) dictionary updates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from specchat.core.decoding.drafters.base import DrafterKind, DraftSettings, Proposal
from specchat.core.decoding.drafters.copy_edits import CopyEdits, Edit
from specchat.core.decoding.drafters.history_index import GRAM, HistoryIndex
from specchat.core.decoding.drafters.lookup_proposal import (
    HISTORY,
    SPAN,
    Key,
    LookupProposal,
)

MATCH_CAP = 64  # match lengths are counted up to this
FIRST_LOOK = 4  # propose(more=...): tokens drafted before asking whether to go on


class NgramDrafter:
    kind = DrafterKind.LOOKUP
    costly = False
    reads_target = False
    name = "lookup"
    catch_up_s = 0.0  # looking up costs no model time
    runtime = None  # (no llama context of its own)

    def __init__(
        self,
        *,
        min_match: int = 1,
        max_ngram: int = 8,
        k_max: int = 64,
        history: HistoryIndex | None = None,
    ) -> None:
        self.n_min = min_match
        self.n_max = max_ngram
        self.k_max = k_max
        self.history = history  # the earlier conversations (None: this conversation only)
        self._tokens: list[int] = []
        # context -> [times seen in all, likeliest continuation, its count, {continuation: count},
        #             index in the text of the continuation last seen]
        self._next: dict[Key, list[Any]] = {}
        self._refuted: dict[Key, dict[int, int]] = {}  # context -> continuation -> refusals
        self._anchor: tuple[int, int] | None = None  # (history position, text index) in step
        self._said: list[int] | None = None  # the last proposal's tokens, until the text moves
        self._followed = False  # the text's newest tokens were the last proposal's
        # the longest context found at the text's end when it was this long (_best's bound)
        self._longest: tuple[int, int] | None = None  # (context length, text length)
        self.edits = CopyEdits()  # what this reply changes in the text it copies

    def clear(self) -> None:
        self._tokens, self._next, self._refuted, self._anchor = [], {}, {}, None
        self._said, self._followed, self._longest = None, False, None
        self.edits.clear()

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
        self._said = None
        self.extend(context[n:])
        self._anchor = None
        self.edits.clear()  # (a new reply: its edits are its own)

    def extend(self, tokens: Sequence[int]) -> None:
        """The text grew by `tokens` (a step's output: what the last proposal is judged by)."""
        said, self._said = self._said or [], None
        # followed: each token the text added, as far as the proposal went, was the proposal's
        n = min(len(tokens), len(said))
        self._followed = n > 0 and list(tokens[:n]) == said[:n]
        toks, nxt, lo, hi = self._tokens, self._next, self.n_min, self.n_max
        for t in tokens:
            end = len(toks)
            tail = tuple(toks[-hi:]) if end else ()  # every context is a slice of it
            top = len(tail)
            for n in range(lo, top + 1):
                key = tail[top - n :]
                entry = nxt.get(key)
                if entry is None:
                    nxt[key] = [1, t, 1, {t: 1}, end]
                    continue
                counts = entry[3]
                c = counts.get(t, 0) + 1
                counts[t] = c
                entry[0] += 1
                entry[4] = end
                if c >= entry[2]:  # ties go to the most recent continuation
                    entry[1], entry[2] = t, c
            toks.append(t)

    def _unwind(self, count: int) -> None:
        toks, nxt = self._tokens, self._next
        self._longest = None
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
                else:
                    if entry[1] == t:
                        best = max(counts, key=counts.__getitem__)
                        entry[1], entry[2] = best, counts[best]
                    if entry[4] >= end:
                        entry[4] = -1  # where it was last followed is gone

    # -- drafting ----------------------------------------------------------------------------
    def _best(self, tail: list[int], top: int) -> tuple[int, float, int, Key, int] | None:
        """The likeliest continuation of `tail` from its longest context seen before, at most
        `top` tokens long: (token, confidence, context length, context, index in the text where
        that context was last followed).

        The longest context of a text one token longer is at most one token longer (a key's
        prefix one token shorter is a key, added before it), so `top` is the last search's
        context plus the tokens since: most searches start at a few tokens, not at n_max."""
        end = len(tail)
        nxt = self._next
        for n in range(min(self.n_max, end, top), self.n_min - 1, -1):
            key = tuple(tail[end - n :])
            entry = nxt.get(key)
            if entry is None:
                continue
            total = entry[0]
            refuted = self._refuted.get(key)
            if not refuted:
                return entry[1], entry[2] / total, n, key, entry[4]
            best, score = -1, -1.0
            for t, c in entry[3].items():
                sc = c / (total + 2 * refuted.get(t, 0))
                if sc > score:
                    best, score = t, sc
            return best, score, n, key, entry[4]
        return None

    def _match_length(self, pos: int, n: int) -> int:
        """How many tokens before `pos` match the end of the text (at least `n`, the context
        that was found there; at most MATCH_CAP), through the edits the reply has made to the
        text it copies (copy_edits.py)."""
        toks = self._tokens
        end = len(toks)
        if not 0 < pos < end or tuple(toks[pos - n : pos]) != tuple(toks[end - n :]):
            return n
        m, src, txt = n, pos - n, end - n
        while m < MATCH_CAP and src > 0:
            if toks[src - 1] == toks[txt - 1]:
                m, src, txt = m + 1, src - 1, txt - 1
                continue
            edit = self.edits.end_at(toks, src, txt) if self.edits.edits else None
            if edit is None:
                break
            m, src, txt = m + len(edit.new), src - len(edit.old), txt - len(edit.new)
        return min(m, MATCH_CAP)

    def _refusals(self, key: Key, token: int) -> int:
        row = self._refuted.get(key)
        return row.get(token, 0) if row else 0

    # -- the drafter interface (drafters.base.Drafter) ---------------------------------------
    def propose(
        self, context: Sequence[int], limit: int, settings: DraftSettings
    ) -> LookupProposal:
        """Up to `limit` tokens after `context`, which extends the text the index holds (the
        decoder's conversation: `begin` aligned them at the reply's start); the tokens added
        since the last look are indexed first, and a copy refused before is checked for an edit
        the text has made to it since (copy_edits.py). `settings.more` is asked after the first
        few."""
        if len(context) > len(self._tokens):
            self.extend(context[len(self._tokens) :])
        if self.edits.waiting:
            self.edits.learn(self._tokens)
        return self.look(limit, more=settings.more, ends=settings.ends)

    def rollback(self, kept: int) -> None:
        """Nothing to undo: the index only ever holds tokens the conversation kept."""

    def lag(self, context_len: int) -> int:
        return 0

    def observe_target(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        """(It reads nothing of the target's.)"""

    @property
    def k(self) -> int:
        return self.k_max

    def look(
        self,
        k: int | None = None,
        stop_below: float = 0.02,
        more: Callable[[LookupProposal], bool] | None = None,
        ends: frozenset[int] = frozenset(),
    ) -> LookupProposal:
        """Up to k tokens continuing the text, with their confidences: from this conversation,
        or else from the earlier ones. Drafting stops once the chance that every token so far
        is right drops below `stop_below`. With `more`, the first FIRST_LOOK tokens come
        first, and the rest only if `more` says some of those would be verified (a guess the
        planner refuses costs no 64-token walk). No token is drafted after one of `ends`."""
        limit = self.k_max if k is None else k
        if more is not None and limit > FIRST_LOOK:
            out = self._propose(FIRST_LOOK, stop_below, ends)
            if len(out.tokens) < FIRST_LOOK or not more(out):
                return out
        return self._propose(limit, stop_below, ends)

    def _propose(self, limit: int, stop_below: float, ends: frozenset[int]) -> LookupProposal:
        out = self._from_conversation(limit, stop_below, ends)
        if not out.tokens and self.history is not None and self.history.documents:
            out = self._from_history(limit, ends)
        out.opening = not self._followed
        self._said = out.tokens
        return out

    def _from_conversation(
        self, limit: int, stop_below: float, ends: frozenset[int]
    ) -> LookupProposal:
        toks = self._tokens
        tail = toks[-self.n_max :]
        out = LookupProposal(start=len(toks))
        chance, run, pos = 1.0, 0, -1  # the span being followed: its match, its next index
        ahead: list[int] = []  # the rest of an edit's new tokens (pos is past its old ones)
        edit: Edit | None = None  # the edit `ahead` comes from
        top = self.n_max
        if self._longest is not None:  # the longest context's bound (_best)
            top = self._longest[0] + len(toks) - self._longest[1]
        while len(out.tokens) < limit:
            step, origin, i = 1, -1, len(out.tokens)
            if run >= SPAN and (ahead or 0 <= pos < len(toks)):
                # Inside a copy: the longest context there is says what comes next.
                key = tuple(tail)  # tail holds the last n_max tokens
                applied = self.edits.at(toks, pos) if not ahead and self.edits.edits else None
                if applied is not None:  # the reply changed this before: draft the change
                    edit, ahead, pos = applied, list(applied.new), pos + len(applied.old)
                if ahead and edit is not None:
                    t, step = ahead.pop(0), 0
                    out.edited[i] = edit
                elif pos >= len(toks):
                    break
                else:
                    t, origin = toks[pos], pos
                    if applied is not None:  # a deletion: judged by the token after it
                        out.edited[i] = applied
                conf = 1.0 / (1 + 2 * self._refusals(key, t)) if self._refuted else 1.0
            else:
                found = self._best(tail, top)
                if not out.tokens:
                    self._longest = (found[2] if found else 0, len(toks))
                if found is None:
                    break
                t, conf, n, key, at = found
                top = n
                if not out.tokens:
                    run = self._match_length(at, n)
                elif at != pos or pos < 0:
                    run = n  # a new context, not the span followed so far
                pos = at if 0 <= at < len(toks) else -1
                if pos >= 0 and run >= SPAN and self.edits.edits and self.edits.at(toks, pos):
                    continue  # (run, pos: a copy whose next tokens an edit drafts, as above)
                if pos >= 0 and toks[pos] != t:
                    if run >= SPAN:  # the longest match wins over the most frequent
                        t = toks[pos]
                        conf = 1.0 / (1 + 2 * self._refusals(key, t))
                    else:
                        pos, run = -1, n
                origin = pos if run >= SPAN else -1
            chance *= conf
            if chance < stop_below:
                break
            out.add(t, conf, run, key, origin)
            if t in ends:  # (the reply would end here)
                break
            tail = tail[1:] + [t] if len(tail) >= self.n_max else tail + [t]
            run, pos, top = run + 1, (pos + step if pos >= 0 else -1), top + 1
        return out

    def _from_history(self, limit: int, ends: frozenset[int]) -> LookupProposal:
        """The continuation of the span of the earlier conversations the reply is copying (the
        one followed since the last step, or one found from the text's last tokens)."""
        hist, toks = self.history, self._tokens
        if hist is None:
            return LookupProposal(source=HISTORY)
        if self._anchor is not None:
            at, since = self._anchor
            copied = toks[since:]
            if hist.matches(at, copied):
                tokens = _to_end(hist.continuation(at + len(copied), limit), ends)
                if tokens:
                    out = LookupProposal(source=HISTORY, at=at + len(copied))
                    for j, t in enumerate(tokens):
                        out.add(t, 1.0, GRAM + len(copied) + j)
                    return out
            self._anchor = None
        found = hist.propose(toks, limit)
        if found is None:
            return LookupProposal(source=HISTORY)
        out = LookupProposal(source=HISTORY, at=found.at)
        conf = found.support / found.seen
        for j, t in enumerate(_to_end(found.tokens, ends)):
            out.add(t, conf if j == 0 else 1.0, GRAM + j)
        return out

    def feedback(self, proposal: Proposal, drafted: int, accepted: int) -> None:
        """The target judged `drafted` tokens of the proposal and accepted the first
        `accepted`: remember a refusal for its context; follow a span of the history."""
        if not isinstance(proposal, LookupProposal):
            raise TypeError("lookup feedback is about a lookup proposal")
        if proposal.source == HISTORY:
            if drafted and accepted:
                self._anchor = (proposal.at, len(self._tokens))
            elif drafted:
                self._anchor = None
            return
        if accepted < drafted:
            key, t = proposal.keys[accepted], proposal.tokens[accepted]
            row = self._refuted.setdefault(key, {})
            row[t] = row.get(t, 0) + 1
            edit = proposal.edited.get(accepted)
            if edit is not None:  # the text kept what the edit changes here
                self.edits.forget(edit)
            elif proposal.origin[accepted] >= 0:  # a copy refused: an edit of it, perhaps
                self.edits.refused(proposal.origin[accepted], proposal.start + accepted)

    # llama-cpp-python's LlamaDraftModel contract (used by the benchmark's stock peer)
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        self.begin([int(t) for t in input_ids])
        k = int(kwargs.get("num_pred_tokens", self.k_max))
        prop = self.look(k, stop_below=0.3)
        return np.asarray(prop.tokens, dtype=np.intc)


def _to_end(tokens: Sequence[int], ends: frozenset[int]) -> Sequence[int]:
    """`tokens` up to and with the first of `ends` (the reply would end there)."""
    for i, t in enumerate(tokens):
        if t in ends:
            return tokens[: i + 1]
    return tokens
