"""Acceptance estimates for the cost model: per drafter and class of drafted token, a decayed
Beta estimate of the chance a token is accepted given that the ones before it were, its prior
and its doubt; and the tokens a verification gains on average."""

from __future__ import annotations

import math

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.drafters.lookup_proposal import BREAK, OPENING
from specchat.core.decoding.pricing.tuning import (
    ACCEPT_KEEP,
    ACCEPT_WEIGHT,
    BREAK_PRIOR,
    COSTLY_PRIOR,
)

# An n-gram token's prior: how often the lookup's next token was the target's own, by the match
# length behind it, measured at every position of the bundled suite's 19 greedy replies (128
# tokens each) for continuations that never disagreed (`c95`). A guess right after the
# drafter's last proposal was followed is right far more often than an opening guess (class
# prefix `o-`, ngram.Proposal.opening): 68 / 70 / 81 / 95 / 97 / 99 % at 2 / 3 / 4-5 / 6-15 /
# 16-31 / 32+ tokens against 31 / 45 / 56 / 62 / 67 % at 1 / 2 / 3 / 4-5 / 6-15 (a one-token
# match is almost never followed; a copy of 16 or more tokens is no opening). Continuations
# that did disagree are capped by their share (`c75`...): openings among them were right 9-15 %
# of the time. The priors are these figures rounded down (copies a little more).
_FOLLOWING = {
    "one": 0.3,
    "two": 0.7,
    "short": 0.7,
    "mid": 0.8,
    "long": 0.9,
    "span16": 0.95,
    "span32": 0.97,
}
_OPENING = {
    "one": 0.3,
    "two": 0.45,
    "short": 0.55,
    "mid": 0.6,
    "long": 0.65,
}
_BAND_CAP = {"c95": 1.0, "c75": 0.75, "c50": 0.55, "c00": 0.3}
_OPENING_BAND_CAP = {"c95": 1.0, "c75": 0.4, "c50": 0.15, "c00": 0.1}


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens gained by one verification of k drafted tokens (accepted run + the target's own)
    when each is accepted with probability alpha."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def prior(drafter: str, cls: str) -> float:
    """The acceptance estimate before any evidence: a costly drafter's (one class), or an
    n-gram class's (`[b-][o-][h-]length/band`, lookup_proposal.confidence_class; `b-`, a
    token that ends a paragraph, at most BREAK_PRIOR)."""
    if drafter != DrafterKind.LOOKUP:
        return COSTLY_PRIOR.get(drafter, 0.5)
    if cls.startswith(BREAK):
        return min(BREAK_PRIOR, prior(drafter, cls.removeprefix(BREAK)))
    length, _, band = cls.rpartition("/")
    opening = length.startswith(OPENING)
    length = length.removeprefix(OPENING).removeprefix("h-")
    table, cap = (_OPENING, _OPENING_BAND_CAP) if opening else (_FOLLOWING, _BAND_CAP)
    return min(table.get(length, 0.5), cap.get(band, 0.5))


class Acceptance:
    """Decayed Beta-Bernoulli estimate of a per-token acceptance probability."""

    def __init__(
        self, prior: float, weight: float = ACCEPT_WEIGHT, decay: float = ACCEPT_KEEP
    ) -> None:
        self.s = prior * weight
        self.f = (1.0 - prior) * weight
        self.decay = decay

    def add(self, accepted: bool) -> None:
        self.s = self.s * self.decay + (1.0 if accepted else 0.0)
        self.f = self.f * self.decay + (0.0 if accepted else 1.0)

    @property
    def mean(self) -> float:
        return self.s / (self.s + self.f)

    def doubt(self, alpha: float) -> float:
        """One standard deviation of an acceptance probability `alpha` learned from this
        estimate's evidence (its decayed count, the prior's weight included)."""
        return math.sqrt(alpha * (1.0 - alpha) / (self.s + self.f + 1.0))
