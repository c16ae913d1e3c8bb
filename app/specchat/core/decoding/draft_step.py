"""Which drafter drafts a step, and how far: one reply's choices, step by step.

In a drafter's own mode that drafter proposes; in Auto the cost model (pricing/) weighs lookup's
offer against every costly drafter loaded. Three rules bound what a step sends on a curve where
a refused draft costs (risk.py): a copy's draft is at most twice its current match; the reply
risks only what it has won (Auto's drafts, and Lookup's fresh guesses); and a copy whose last
draft was kept whole has earned GROWTH times that length, whatever the budget says, charged to
the budget only as far as the budget allowed: until the reply's first refused lookup draft as
far as the curve pays with every token kept, after it as far as the acceptance estimates pay
with the copy's kept run as evidence (pricing.grown). A drafted token that ends a paragraph of
prose is priced at its own class's estimate (`BREAK`: a quote of one paragraph ends there, past
which the grown draft ran on into the source's next paragraph), until the reply has gone past
a paragraph's end itself (a quote of several: the others are priced as the copy).

After a refusal has spent Auto's budget, a copy the reply has followed token by token for
FOLLOWED tokens since (not the refused one) drafts FOLLOWED_K tokens where the budget falls
short of their refusal by at most OVERDRAW decodes, and grows from there if they are kept: a
reply that opens with a refused copy of an earlier answer and then quotes the system prompt
is not left without drafts to its end.

The decoder (decoder.py) asks `choose` before each step and reports how the step went
(`verified`, `plain`); it knows nothing of the pricing's reasons.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from specchat.core.decoding.choosing.backend_sampler import ROWS_MAX
from specchat.core.decoding.choosing.sampling import Warp
from specchat.core.decoding.drafters.base import Drafter, DrafterKind, DraftSettings, Proposal
from specchat.core.decoding.drafters.lookup_proposal import BREAK
from specchat.core.decoding.pricing.cost_model import Costly, CostModel
from specchat.core.decoding.pricing.plan import Why
from specchat.core.decoding.pricing.risk import (
    RiskBudget,
    copy_cap,
    longest_within,
    opening_risk,
)
from specchat.core.decoding.pricing.tuning import FOLLOWED, FOLLOWED_K, OVERDRAW
from specchat.core.params import GenerationParams
from specchat.core.types import GenerationStats, Mode

NOTE_EVERY = 8  # Auto: steps between formatting the reason of an unchanged choice
Choice = tuple[Drafter | None, Proposal, list[str]]


class DraftStep:
    """One reply's drafting: its drafters (in the order Auto weighs them), the risk budget,
    what the current copy has earned, and Auto's last reason (`why`)."""

    def __init__(
        self, params: GenerationParams, cost: CostModel, stats: GenerationStats, ctx: list[int]
    ) -> None:
        self.mode = Mode.OFF  # (and no drafters) until `prepare`
        self.params = params
        self.cost = cost
        self.stats = stats  # (the reply's live statistics: note, k_current, source)
        self.ctx = ctx  # the decoder's text, prompt and every emitted token (it only grows)
        self.drafters: list[Drafter] = []
        self.settings: dict[DrafterKind, DraftSettings] = {}
        self.offer: tuple[Drafter, Proposal] | None = None  # a free drafter's, this step
        self.why: Why | None = None  # Auto: the last plan's reason
        self._noted: tuple[DrafterKind | None, int] = (None, -1)  # the drafter noted, since
        self._rest = 0  # Auto: steps left that look for no draft (Plan.rest)
        self._won = 0  # the last lookup draft's length, if it was kept whole (else 0)
        self._run = 0  # drafted tokens the current copy has kept in a row (with _won)
        self._refused = False  # a lookup draft of this reply has been refused
        self._since_refusal = 0  # tokens the reply has produced since that refusal
        self._within = ROWS_MAX  # Auto: the longest draft this step's risk budget allowed
        self.risk = RiskBudget(opening_risk(cost.steps))  # what this reply may still lose
        self._breaks: Callable[[int, int], bool] | None = None  # a token ends a paragraph
        self._scanned = 0  # the text up to here holds no paragraph's end of the reply's

    def prepare(
        self,
        mode: Mode,
        drafters: Sequence[Drafter],
        n_vocab: int,
        rng: random.Random,
        ends: frozenset[int] = frozenset(),
        breaks: Callable[[int, int], bool] | None = None,
    ) -> None:
        """The reply's mode and drafters, as the decoder settled them, and each drafter's
        settings (`n_vocab`: the target's, for a costly drafter without a runtime; `ends`: its
        end-of-generation tokens; `breaks(prev, token)`: whether a token ends a paragraph of
        prose, priced in a lookup draft as a class of its own until the reply has gone past
        one)."""
        p = self.params
        self.mode, self.drafters, self._breaks = mode, list(drafters), breaks
        self._scanned = len(self.ctx)
        for d in self.drafters:
            if not d.costly:
                self.settings[d.kind] = DraftSettings(more=self._worth_more, ends=ends)
                continue
            vocab = d.runtime.n_vocab if d.runtime is not None else n_vocab
            warp = Warp(p, vocab, slots=p.k_max)
            self.settings[d.kind] = DraftSettings(warp, rng, p.p_min, p.repeat_last_n)

    def _worth_more(self, first: Proposal) -> bool:
        """Whether lookup should look past its first few tokens: a copy kept whole so far has
        earned a longer draft, else the pricing says whether some of them would be sent."""
        return self._won > 0 or self.cost.would_draft(DrafterKind.LOOKUP, first.classes())

    # -- how a step went ----------------------------------------------------------------------
    def verified(self, drafter: Drafter, k: int, accepted: int, produced: int) -> None:
        """A verification of k drafted tokens kept `accepted` and produced `produced` tokens."""
        self._won = k if accepted == k and not drafter.costly else 0
        self._run = self._run + k if self._won else 0
        refused = accepted < k and not drafter.costly
        self._refused |= refused
        self._since_refusal = 0 if refused else self._since_refusal + produced
        # (a copy's earned growth is charged as the draft the budget allowed)
        self.risk.step(produced, self.cost.steps.step_units(drafter.kind, min(k, self._within)))

    def plain(self) -> None:
        """A plain step: one token at one decode's cost; a copy earns its length only from
        draft to draft."""
        self.risk.step(1, 1.0)
        self._won = self._run = 0
        self._since_refusal += 1

    def judge_unsent(self, sent_by: Drafter | None, base: int) -> None:
        """A free drafter's proposal not verified is judged anyway by the token the step
        emitted at its first (evidence for free: the estimates learn where they let nothing
        through)."""
        offer = self.offer
        if offer is None or offer[0] is sent_by:
            return
        d, prop = offer
        if prop.tokens and len(self.ctx) > base:
            right = self.ctx[base] == prop.tokens[0]
            first = self._marked(prop.tokens[:1], [prop.first_class()], base)
            self.cost.observe_accept(d.kind, first, 1, int(right))

    # -- choosing -----------------------------------------------------------------------------
    def choose(self, limit: int) -> Choice:
        """The drafter chosen for this step and its draft (possibly empty), with the
        acceptance class of each drafted token (for the cost model's calibration)."""
        none = Proposal()
        self.offer = None
        if limit < 1 or not self.drafters:
            return None, none, []
        if self.mode is not Mode.AUTO:
            return self._own_mode(self.drafters[0], limit)
        limit = min(limit, self.params.lookup_k_max)
        if self._rest:  # the last plan found every drafter far from paying
            self._rest -= 1
            return None, none, []
        # no walk past what the reply can risk (risk.py), but a copy kept whole so far is
        # offered as far as it has earned (_earned)
        full, limit = limit, max(1, longest_within(self.cost.steps, self.risk.left, limit))
        self._within = limit
        lookup: Drafter | None = None
        prop, classes = none, list[str]()
        costly: list[Costly] = []
        for d in self.drafters:
            if d.costly:
                max_k = min(limit, self.params.k_max)
                costly.append(Costly(d.kind, max_k, d.lag(len(self.ctx))))
            else:  # (one free drafter: lookup)
                lookup = d
                prop, classes = self._look(d, full if self._won else limit)
        plan = self.cost.plan(
            lookup_classes=classes,
            lookup_alphas=self.cost.acceptances(DrafterKind.LOOKUP, classes),
            max_k=limit,
            costly=costly,
            max_loss=self.risk.left,
            produced=self.stats.tokens,
        )
        # the reason: formatted on a new choice and every NOTE_EVERY steps (the window polls it)
        self.why, (last, since) = plan.why, self._noted
        fresh = plan.drafter != last or since >= NOTE_EVERY or since < 0
        self._noted = (plan.drafter, 0 if fresh else since + 1)
        if fresh:
            self.stats.note = plan.reason
        self.stats.k_current, self._rest = plan.k, plan.rest
        if lookup is not None and plan.drafter in (None, lookup.kind):
            # a copy kept whole so far drafts at least as far as it has earned
            k = max(plan.k if plan.drafter is not None else 0, self._earned(classes))
            if not k and self._followed(prop):  # a copy followed since a refusal: a short draft
                k = min(FOLLOWED_K, len(prop.tokens))
            if k:
                self.stats.k_current, self._rest = k, 0
                return lookup, self._sent(prop.cut(k)), classes
        if plan.drafter is None:
            return None, none, []
        chosen = next(d for d in self.drafters if d.kind is plan.drafter)
        return chosen, self._run_costly(chosen, plan.k), [""]

    def _own_mode(self, d: Drafter, limit: int) -> Choice:
        """The user's drafter: a costly one drafts as far as it adapts to, a free one as far
        as the cost model finds worth verifying (and now and then a little further), a fresh
        guess no further than the reply's risk budget allows."""
        if d.costly:
            return d, self._run_costly(d, min(limit, d.k)), [""]
        prop, classes = self._look(d, min(limit, self.params.lookup_k_max))
        k = self.cost.chosen_chain(d.kind, self.cost.acceptances(d.kind, classes))
        if prop.is_guess():  # a fresh guess risks only what the reply has won (risk.py)
            k = min(k, longest_within(self.cost.steps, self.risk.left, k))
        k = max(k, self._earned(classes))
        self.stats.k_current = k
        return d, self._sent(prop.cut(k)), classes

    def _look(self, d: Drafter, limit: int) -> tuple[Proposal, list[str]]:
        """A free drafter's offer (kept to be judged even if not sent) and the classes of the
        part of it worth risking on this copy (risk.copy_cap)."""
        limit = min(limit, self.params.lookup_k_max)
        prop = d.propose(self.ctx, limit, self.settings[d.kind])
        self.offer = (d, prop)
        if not prop.tokens:
            return prop, []
        cap = copy_cap(self.cost.steps.curve, prop.copy_match())
        return prop, self._marked(prop.tokens, prop.classes()[:cap], len(self.ctx))

    def _marked(self, tokens: Sequence[int], classes: list[str], at: int) -> list[str]:
        """The classes of a draft continuing the text's first `at` tokens, those of tokens
        that end a paragraph marked BREAK, until the reply has gone on past a paragraph's end
        of its own (a quote of several paragraphs: the others are priced as the copy)."""
        b, ctx = self._breaks, self.ctx
        while b is not None and self._scanned < len(ctx):
            if b(ctx[self._scanned - 1], ctx[self._scanned]):
                self._breaks = b = None
            self._scanned += 1
        if b is None or not at:
            return classes
        prev = [self.ctx[at - 1], *tokens]
        return [BREAK + c if b(p, t) else c for p, t, c in zip(prev, tokens, classes, strict=False)]

    def _earned(self, classes: list[str]) -> int:
        """What the copy on offer has earned by the last draft kept whole (pricing.grown),
        whatever the risk budget says (it grows by only what each draft gains on a steep
        curve); the same length in Lookup's mode and in Auto."""
        if not self._won:
            return 0
        return self.cost.grown(self._won, classes, self._run, clean=not self._refused)

    def _followed(self, prop: Proposal) -> bool:
        """Whether the copy on offer is one the reply has followed, token by token, for
        FOLLOWED tokens since its last refused lookup draft (not the refused draft's copy):
        such a copy drafts FOLLOWED_K tokens though the risk budget falls short of their
        refusal by up to OVERDRAW decodes (a reply loses at most that much more than its
        budget), then grows as a copy kept whole does (`_earned`)."""
        match = prop.copy_match()
        if not self._refused or prop.is_guess() or not FOLLOWED <= match <= self._since_refusal:
            return False
        loss = self.cost.steps.step_units(DrafterKind.LOOKUP, FOLLOWED_K) - 1.0
        return loss <= self.risk.left + OVERDRAW

    def _sent(self, draft: Proposal) -> Proposal:
        if draft.tokens:
            self.stats.source = draft.source
        return draft

    def _run_costly(self, d: Drafter, k: int) -> Proposal:
        """A costly drafter's k tokens, its drafting time learned (its catch-up apart)."""
        self.stats.k_current = k
        t0 = time.perf_counter()
        draft = d.propose(self.ctx, k, self.settings[d.kind])
        spent = time.perf_counter() - t0 - d.catch_up_s
        self.cost.steps.observe_draft(d.kind, max(len(draft.tokens), 1), spent)
        return self._sent(draft)
