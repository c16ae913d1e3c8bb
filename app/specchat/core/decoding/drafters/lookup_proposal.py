"""A lookup draft and its tokens' acceptance classes: each drafted token carries the confidence
of its continuation and the length of the match behind it, and its class (`confidence_class`)
names both, so the pricing learns one acceptance estimate per class. A proposal's first token is
an *opening* guess (prefix `OPENING`) unless the text has just followed the drafter's last
proposal or the match is a copy (`SPAN` tokens or more). How the n-gram drafter finds the tokens
is `ngram.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.core.decoding.drafters.base import Proposal
from specchat.core.decoding.drafters.copy_edits import Edit

Key = tuple[int, ...]

CONVERSATION = "conversation"
HISTORY = "history"
SPAN = 16  # a match this long is a copy: its continuation beats a more frequent one
OPENING = "o-"  # the class prefix of an opening guess (Proposal.opening)
# the class prefix of a token that ends a paragraph of prose (a blank line after a full stop:
# the decoder's `breaks`): a quote of one paragraph ends there, a quote of several goes on
BREAK = "b-"


@dataclass
class LookupProposal(Proposal):
    """A candidate lookup draft: tokens, the raw confidence and the context length behind each
    (its tokens' acceptance classes come from both)."""

    confidence: list[float] = field(default_factory=list)
    context: list[int] = field(default_factory=list)  # match length behind each token
    keys: list[Key] = field(default_factory=list)  # its n-gram (conversation drafts)
    source: str = CONVERSATION  # CONVERSATION or HISTORY
    at: int = -1  # HISTORY: where the first token lies in the history index
    opening: bool = True  # the text did not just follow the last proposal: a fresh guess
    start: int = -1  # CONVERSATION: the text's length the draft continues
    origin: list[int] = field(default_factory=list)  # where a copied token lies in the text
    edited: dict[int, Edit] = field(default_factory=dict)  # token index -> the edit drafted

    def classes(self) -> list[str]:
        if not self.tokens:
            return []
        h = self.source == HISTORY
        rest = zip(self.confidence[1:], self.context[1:], strict=True)
        return [self.first_class(), *(confidence_class(c, n, history=h) for c, n in rest)]

    def copy_match(self) -> int:
        return self.context[0] if self.context else 0

    def is_guess(self) -> bool:
        return bool(self.tokens) and self.opening and self.context[0] < SPAN

    def first_class(self) -> str:
        """The first token's class (of a proposal with tokens): an opening's is prefixed."""
        cls = confidence_class(self.confidence[0], self.context[0], history=self.source == HISTORY)
        return OPENING + cls if self.is_guess() else cls  # a copy is evidence by itself

    def add(
        self, token: int, confidence: float, match: int, key: Key = (), origin: int = -1
    ) -> None:
        """A drafted token; `origin`: where in the text the copy it continues read it (-1:
        none, or an edit's token)."""
        self.tokens.append(token)
        self.confidence.append(confidence)
        self.context.append(match)
        self.keys.append(key)
        self.origin.append(origin)


def length_class(match: int) -> str:
    """How long a match the token continued: copies (`span16`, `span32`) go on; short
    contexts are habits of the text, and a match of one or two tokens (`one`, `two`) is a
    guess that pays only where verifying is nearly free (a GPU)."""
    if match >= 2 * SPAN:
        return "span32"
    if match >= SPAN:
        return "span16"
    if match >= 6:
        return "long"
    if match >= 4:
        return "mid"
    return "short" if match == 3 else "two" if match == 2 else "one"


def _confidence_band(confidence: float) -> str:
    if confidence >= 0.95:
        return "c95"
    if confidence >= 0.75:
        return "c75"
    return "c50" if confidence >= 0.5 else "c00"


# every class name, made once (a proposal's classes are asked for every step)
_CLASSES = {
    (h, n, c): f"{'h-' if h else ''}{n}/{c}"
    for h in (False, True)
    for n in ("span32", "span16", "long", "mid", "short", "two", "one")
    for c in ("c95", "c75", "c50", "c00")
}


def confidence_class(confidence: float, match: int, *, history: bool = False) -> str:
    """The calibration class of a drafted token: how sure the counts were, on how long a
    match, and whether it came from the earlier conversations (prefix `h-`)."""
    return _CLASSES[history, length_class(match), _confidence_band(confidence)]
