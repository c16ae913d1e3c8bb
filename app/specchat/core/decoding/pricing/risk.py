"""What drafts may risk where a refused draft costs (a CPU's cost curve): a copy earns its
length, and a reply risks only what it has won. Auto keeps every draft within the budget but
one on a copy kept whole so far, and a one-token draft on a copy followed for a while since
the reply's last refused draft (draft_step); Lookup's own mode keeps its fresh guesses within
it (a draft with no copy behind it: a chat answer's are mostly refused).

A draft refused at its first token costs a whole verification for one token: on a 2-core CPU
a 31-token draft costs ~16 one-token decodes. The cost model's acceptance estimates are pooled
over replies (a quote that copied 300 tokens makes an edit's copy look as safe), so an expected
gain does not keep a reply from losing. Two bounds:
- `copy_cap`: a lookup draft is at most twice its copy's current match (at least SLOW_START);
- `RiskBudget`: a step drafts only what it could lose (its cost less the one token it surely
  yields, in one-token decodes) within what the reply has won so far, plus START decodes (or
  the shortest paying draft's refusal where that costs more: `opening_risk`) and SHARE of every
  token produced. A reply whose drafts fail loses at most that start + SHARE x its tokens; one
  whose drafts pay earns longer ones.
Where verifying is nearly free (a GPU, a flat curve) a refusal loses nothing: neither binds.
"""

from __future__ import annotations

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.step_costs import StepCosts
from specchat.core.decoding.pricing.tuning import SHARE, SLOW_START, START

LOOKUP = DrafterKind.LOOKUP
NO_CAP = 1 << 30


def copy_cap(curve: CostCurve | None, match: int) -> int:
    """The longest lookup draft worth risking on a copy whose current match is `match` tokens
    (an edit breaks a copy the estimates, learned on texts that copy far more, call safe)."""
    if curve is not None and curve.is_flat:
        return NO_CAP
    return max(SLOW_START, 2 * match)


def opening_risk(cost: StepCosts) -> float:
    """What a reply may lose before it has won anything: START, or the refusal of the shortest
    lookup draft that could pay at all (every token kept), as `cost` prices it, where that is
    more. Where any batch costs several one-token decodes (an H100 replays a captured graph for
    one token, never for a batch: 2 -> 3.4-5.1 with a 135M model, nearly flat after) START alone
    let no draft that could pay through until ~260 tokens had passed."""
    k = cost.shortest_paying()
    return START if k is None else max(START, cost.step_units(LOOKUP, k) - 1.0 + 1e-9)


def longest_within(cost: StepCosts, max_loss: float, k_max: int) -> int:
    """The longest lookup draft, at most k_max, whose refusal loses at most `max_loss`
    one-token steps as `cost` prices steps (its best_chain stops at the same length)."""
    t1, host = cost.t1 if cost.t1 is not None else 1.0, cost.host_cost()
    worst = (t1 + host) * (1.0 + max_loss) / cost.step_ratio.get(LOOKUP, 1.0)
    if t1 * cost.rel(k_max + 1) + host * (k_max + 1) <= worst:
        return k_max
    k = 0
    while t1 * cost.rel(k + 2) + host * (k + 2) <= worst:
        k += 1
    return k


class RiskBudget:
    """What one reply may still lose, in one-token decodes (`left`)."""

    __slots__ = ("left",)

    def __init__(self, start: float = START) -> None:
        self.left = start

    def step(self, produced: int, cost: float) -> None:
        """A step yielded `produced` tokens and cost `cost` one-token decodes (a plain step:
        1 and 1.0)."""
        self.left += produced * (1.0 + SHARE) - cost
