"""Acceptance estimates for the cost model: per drafter and class of drafted token, a decayed
Beta estimate of the chance a token is accepted given that the ones before it were, its prior
and its doubt; and the tokens a verification gains on average."""

from __future__ import annotations

import math

_DRAFT_PRIOR = 0.6
_CLASS_PRIOR = {"c95": 0.9, "c75": 0.75, "c50": 0.55, "c00": 0.3}
_SPAN_PRIOR = {"span16": 0.95, "span32": 0.97}  # sure tokens inside a long copy
# A continuation seen after only one or two matching tokens: even when it always followed
# them, it is right about a third / under half of the time (measured over the bundled suite's
# replies: 36 % and 60 % for counts that never disagreed, 14-28 % for the rest).
_SHORT_MATCH_CAP = {"one": 0.3, "two": 0.45}


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens gained by one verification of k drafted tokens (accepted run + the target's own)
    when each is accepted with probability alpha."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def prior(is_model: bool, cls: str) -> float:
    """The acceptance estimate before any evidence: the draft model's, or an n-gram class's."""
    if is_model:
        return _DRAFT_PRIOR
    length, _, sure = cls.rpartition("/")
    p = _CLASS_PRIOR.get(sure, 0.5)
    length = length.removeprefix("h-")
    if sure == "c95":
        p = max(p, _SPAN_PRIOR.get(length, 0.0))
    return min(p, _SHORT_MATCH_CAP.get(length, 1.0))


class Acceptance:
    """Decayed Beta-Bernoulli estimate of a per-token acceptance probability."""

    def __init__(self, prior: float, weight: float = 4.0, decay: float = 0.98) -> None:
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
