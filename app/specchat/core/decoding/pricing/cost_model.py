"""Auto mode and draft sizing: which drafter, and how many tokens, step by step.

Acceptance is learned per drafter and class of drafted token (the n-gram drafter's confidence
classes; one class for the draft model): decayed Beta estimates of the chance a token is accepted
given that the ones before it were (`acceptance`). Priced by `step_costs.py` (what a step costs on
this machine), Auto picks the drafter and draft length k that maximise expected tokens per second,
within what a refusal may lose (risk.py). If nothing beats plain decoding by a small margin, it
does not speculate. Estimates are decayed, so the choice follows acceptance; a slow spell's
excess fades while a drafter is idle, and the reason says what made it lose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.drafters.lookup_proposal import BREAK
from specchat.core.decoding.pricing.acceptance import Acceptance, prior
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.plan import Plan, Why
from specchat.core.decoding.pricing.step_costs import INF, StepCosts
from specchat.core.decoding.pricing.tuning import (
    ACCEPT_KEEP,
    ACCEPT_WEIGHT,
    FAR,
    FAR_STEPS,
    GROWTH,
    MARGIN,
    MEASURE_K,
    NO_SHORT_PAYS_LOOK,
    OPENING_TOKENS,
    REPROBE_AFTER,
    REST_STEPS,
    RUN_WEIGHT,
    STEP_RATIO_FADE,
    UNTRIED_DRAFTS,
)

# A costly drafter far below paying keeps its price FAR_STEPS steps. Lookup below FAR x margin,
# and every costly drafter too: the next REST_STEPS steps look for no draft (Plan.rest; the host
# work of a step that proposes and plans was 4-9 % of a plain step on an H100, docs/gpu.md),
# except in a reply's first OPENING_TOKENS tokens, where copies mostly start.
LOOKUP = DrafterKind.LOOKUP
_Self = TypeVar("_Self", bound="CostModel")
NAMES = {DrafterKind.LOOKUP: "lookup", DrafterKind.MODEL: "draft model", DrafterKind.MTP: "MTP"}
HOST_OUTWEIGHS = ": host work ({:.2f} ms per token chosen) outweighs the {:.2f}x the models allow"
RISKY = (
    "{} would run at {:.2f}x, but a refused draft could lose more than the {:.1f} steps this"
    " reply can still risk"
)
# a costly drafter's (see _draft_figures): k, rate; the models' own k, rate; the rate with host
# work; the untried drafter's hopeful rate; and what the rate without a risk budget is priced
# from (draft length, acceptance, lag)
Figures = tuple[int, float, int, float, float, float, tuple[int, float, int]]
STEPS_SLOWER = ": its steps measured {:.2f}x slower than their parts predict"


@dataclass(frozen=True)
class Costly:
    """A costly drafter Auto may choose this step: at most `max_k` tokens, after catching up
    `lag` tokens it has not seen."""

    kind: DrafterKind
    max_k: int
    lag: int = 0


class CostModel:
    """Auto's choices for one engine (it follows the conversation): what steps cost here
    (`steps`, a `StepCosts`) and how often each drafter's tokens are kept (`alpha`)."""

    def __init__(
        self,
        *,
        gpu: bool = False,
        draft_cost: Mapping[str, float] | None = None,
        curve: CostCurve | None = None,
    ) -> None:
        self.steps = StepCosts(gpu=gpu, draft_cost=draft_cost, curve=curve)
        self.alpha: dict[tuple[str, str], Acceptance] = {}
        self.margin = MARGIN
        self._draft_memo: dict[str, tuple[Any, ...]] = {}  # see _draft_figures
        self.reprobe_after = REPROBE_AFTER

    def use_curve(self: _Self, curve: CostCurve | None) -> _Self:
        self.steps.use_curve(curve)
        return self

    def steady(self: _Self, t1: float = 0.01, beta: float = 0.05, host: float = 0.0) -> _Self:
        self.steps.steady(t1, beta, host)
        return self

    # -- acceptance -------------------------------------------------------------------------
    def observe_accept(
        self, drafter: str, classes: Sequence[str], judged: int, accepted: int
    ) -> None:
        """`judged` drafted tokens were checked, the first `accepted` of them accepted; token i
        had acceptance class classes[i] (one class for every token is fine)."""
        for i in range(min(judged, accepted + 1)):
            cls = classes[i] if i < len(classes) else classes[-1] if classes else ""
            self._alpha(drafter, cls).add(i < accepted)

    def _alpha(self, drafter: str, cls: str) -> Acceptance:
        key = (drafter, cls)
        if key not in self.alpha:
            self.alpha[key] = Acceptance(prior(drafter, cls), ACCEPT_WEIGHT, ACCEPT_KEEP)
        return self.alpha[key]

    def acceptance(self, drafter: str, cls: str = "") -> float:
        return self._alpha(drafter, cls).mean

    def acceptances(self, drafter: str, classes: Sequence[str]) -> list[float]:
        return [self._alpha(drafter, c).mean for c in classes]

    def draft_mode_note(self, drafter: DrafterKind, k_max: int) -> str:
        """A costly drafter's mode's note at a reply's end: what its speculation is worth on
        this machine, priced as Auto prices it from what was measured (the user chose the
        mode; the note says whether Auto would). Empty until both have been timed."""
        st = self.steps
        per = st.draft_token.get(drafter)
        if st.t1 is None or per is None or k_max < 1:
            return ""
        a = self.acceptance(drafter)
        k, rate = st.best_chain(drafter, [a] * k_max)
        cost, name = per / st.t1, NAMES[drafter]
        # (no acceptance figure: the estimate is per token after an accepted one, and a second
        # percentage beside the gauge's accepted/drafted would read as a contradiction)
        if k and rate >= self.margin:
            return (
                f"{name}: est. {rate:.2f}x of plain decoding at best (a drafted token costs "
                f"{cost:.2f} of a target token here)"
            )
        return (
            f"{name}: a drafted token costs {cost:.2f} of a target token here, so with the "
            f"acceptance measured speculation with it runs at about {rate:.2f}x of plain "
            "decoding at best; Auto would not use it"
        )

    # -- decisions --------------------------------------------------------------------------
    def chosen_chain(self, drafter: str, alphas: Sequence[float]) -> int:
        """Draft length for a drafter the user chose (Lookup mode): the best chain; when the
        estimates rule drafting out, one step in `reprobe_after` still drafts (sized by the
        models' own costs), so the estimates can recover from a slow spell on the machine."""
        if not alphas:
            return 0
        st = self.steps
        k, _ = st.best_chain(drafter, alphas)
        idle = 0 if k else st.idle.get(drafter, 0) + 1
        if idle >= self.reprobe_after:
            k = max(1, st.best_chain(drafter, alphas, with_host=False, with_ratio=False)[0])
            idle = 0
        st.idle[drafter] = idle
        return k

    def grown(self, won: int, classes: Sequence[str], run: int = 0, clean: bool = True) -> int:
        """The draft length a copy has earned: after a lookup draft of `won` tokens kept whole,
        GROWTH times as many (the evidence grows geometrically, not by the match length
        alone), at most the tokens on offer (their acceptance `classes`) and the length that
        pays best on this machine's cost curve: with every token kept while no lookup draft
        of the reply has been refused (`clean`: a quote), else with the acceptance estimates,
        raised by the `run` tokens the copy has kept in a row, counted as that many
        observations beside the estimates' RUN_WEIGHT (a reply that cites a few lines at a
        time lost 10-20 decodes to each 24- or 32-token draft grown past its copy's end), on
        the curve alone (growth follows the copy's evidence, not a noisy spell's measured step
        excess). Either way a token that ends a paragraph (class BREAK) is priced at its own
        estimate: the copy's run says nothing of whether the reply goes on past its end.
        0 without such a draft."""
        if won <= 0 or not classes:
            return 0
        estimates = self.acceptances(LOOKUP, classes)
        if clean:
            sure = [
                a if c.startswith(BREAK) else 1.0 for a, c in zip(estimates, classes, strict=True)
            ]
            best = self.steps.best_chain(LOOKUP, sure)[0]
        else:
            raised = [
                a if c.startswith(BREAK) else (RUN_WEIGHT * a + run) / (RUN_WEIGHT + run)
                for a, c in zip(estimates, classes, strict=True)
            ]
            best = self.steps.best_chain(LOOKUP, raised, with_host=False, with_ratio=False)[0]
        return min(GROWTH * won, len(classes), best)

    def would_draft(self, drafter: str, classes: Sequence[str]) -> bool:
        """Whether some of these classes' tokens are worth drafting (a longer draft may pay
        more still: on a CPU's curve 3 tokens can beat 4 while 6 beat both). Where no draft as
        short as these could pay even with every token kept (a GPU whose one-token decodes
        replay a captured graph: 2 -> 4.6, 5 tokens the shortest that can pay), the tokens
        after them are taken to be as sure as the last of them."""
        alphas = self.acceptances(drafter, classes)
        n = len(alphas)
        if n and self.steps.shortest_paying(n) is None:
            alphas = alphas + [alphas[-1]] * (NO_SHORT_PAYS_LOOK - n)
        return self.steps.best_chain(drafter, alphas)[0] > 0

    def plan(
        self,
        *,
        lookup_classes: Sequence[str],
        max_k: int,
        costly: Sequence[Costly] = (),
        lookup_alphas: Sequence[float] | None = None,
        max_loss: float = INF,
        produced: int = OPENING_TOKENS,
    ) -> Plan:
        """Choose among a plain step, the n-gram draft on offer (its tokens' acceptance
        classes, or their estimates, `lookup_alphas`; at most `max_k`) and the costly drafters
        (each at most its own `max_k`), none that could lose over `max_loss` one-token steps
        (risk.py)."""
        st = self.steps
        if st.t1 is None:
            return Plan(None, 0, 1.0, Why("auto: measuring the target's speed"))
        options: list[Plan] = []
        if lookup_alphas is None:
            lookup_alphas = self.acceptances(LOOKUP, lookup_classes[:max_k])
        else:
            lookup_alphas = list(lookup_alphas[:max_k])
        if lookup_alphas:
            k, gain = st.best_chain(LOOKUP, lookup_alphas, max_loss=max_loss)
            a = lookup_alphas[0]
            if k and lookup_classes and max_loss == INF:
                # Without a risk budget, Auto must not lose to off: a draft pays only if it
                # still does one standard deviation below each acceptance estimate. With one
                # (the decoder's), the budget bounds what refusals lose, and this guard on top
                # made Auto never draft on a curve steep at its start (docs/benchmarks.md).
                sure = [
                    max(0.0, x - self._alpha(LOOKUP, c).doubt(x))
                    for x, c in zip(lookup_alphas[:k], lookup_classes, strict=False)
                ]
                low = st.best_chain(LOOKUP, sure, max_loss=max_loss)[1]
                if low < self.margin:
                    # (and the reason, `_plain`, is given on the same doubtful estimates)
                    k, gain, lookup_alphas = 0, low, sure
            options.append(Plan(LOOKUP, k, gain, Why("lookup k={} (first token α≈{:.2f})", k, a)))
        figures: dict[str, Figures] = {}
        for c in costly:
            if c.max_k < 1:
                continue
            fig = figures[c.kind] = self._draft_figures(c.kind, c.max_k, c.lag, max_loss)
            k, gain = fig[:2]
            a = self.acceptance(c.kind)
            two = min(MEASURE_K, c.max_k)  # never measured: tried briefly where it could win
            rival = max([self.margin] + [o.speedup for o in options if o.k > 0])
            chosen = k > 0 and gain >= rival
            if not chosen and fig[5] >= rival and st.step_units(c.kind, two) - 1 <= max_loss:
                why = Why("auto: measuring the {} (k={})", NAMES[c.kind], two)
                return Plan(c.kind, two, gain, why)
            options.append(Plan(c.kind, k, gain, Why("{} k={} (α≈{:.2f})", NAMES[c.kind], k, a)))
        best = max(options, key=lambda p: p.speedup, default=None)
        if best is None or best.k == 0 or best.speedup < self.margin:
            plain = self._plain(options, lookup_alphas, figures, max_loss)
            # every drafter far from paying past the reply's opening: rest lookup a few steps
            if (
                produced >= OPENING_TOKENS
                and lookup_alphas
                and all(self._draft_far(f) for f in figures.values())
                and st.best_chain(LOOKUP, lookup_alphas)[1] < FAR * self.margin
            ):
                return Plan(None, 0, 1.0, plain.why, REST_STEPS)
            return plain
        for o in options:
            if o.drafter is not None and o.drafter != best.drafter:
                st.idle[o.drafter] = st.idle.get(o.drafter, 0) + 1
        return Plan(
            best.drafter,
            best.k,
            best.speedup,
            Why("auto: {}, est. {:.2f}x", best.why, best.speedup),
        )

    def _draft_figures(self, kind: str, dk: int, lag: int, max_loss: float) -> Figures:
        """A costly drafter's best chain (k, rate), and for `_plain` the models' own (k, rate)
        and the rate with host work; untried (under UNTRIED_DRAFTS drafts), its rate one
        standard deviation above its prior acceptance (optimism about the untried: tried where
        that beats what is on offer). Far below paying they stand for FAR_STEPS steps (until it
        drafts again only timings drift, and a longer lag only lowers them)."""
        st = self.steps
        a = self._alpha(kind, "")
        trials = st.draft_trials.get(kind, 0)
        key = (dk, trials, a.s, a.f)
        m = self._draft_memo.get(kind)
        if m is not None and m[0] == key and m[1] > 0 and lag >= m[2]:
            self._draft_memo[kind] = (key, m[1] - 1, m[2], m[3])
            figures: Figures = m[3]
            return figures
        alphas = [a.mean] * dk
        k, gain = st.best_chain(kind, alphas, lag, max_loss=max_loss)
        k_bare, bare = st.best_chain(kind, alphas, lag, with_host=False, with_ratio=False)
        hosted = st.best_chain(kind, alphas, lag, with_ratio=False)[1]
        hopeful = 0.0
        if trials < UNTRIED_DRAFTS:
            hope = min(1.0, a.mean + a.doubt(a.mean))
            hopeful = st.best_chain(kind, [hope] * dk, lag, max_loss=max_loss)[1]
        figures = (k, gain, k_bare, bare, hosted, hopeful, (dk, a.mean, lag))
        self._draft_memo[kind] = (key, FAR_STEPS if self._draft_far(figures) else 0, lag, figures)
        return figures

    def _draft_far(self, figures: Figures) -> bool:
        """Whether a costly drafter is far from paying: under FAR x margin however it is
        priced (with the budget, by the models alone, with host work, hopefully untried)."""
        _, gain, _, bare, hosted, hopeful, _ = figures
        return max(gain, bare, hosted, hopeful) < FAR * self.margin

    def _plain(
        self,
        options: list[Plan],
        lookup_alphas: Sequence[float],
        figures: dict[str, Figures],
        max_loss: float,
    ) -> Plan:
        """A plain step, with the reason (what the models alone would make of the best draft
        on offer is priced only when the reason is shown). A drafter ruled out by its steps'
        measured excess is not re-measured with a draft the estimates say loses (each refused
        one cost a chat reply ~2 % on a 2-core CPU): the excess fades while it is idle, so a
        single slow measurement cannot switch it off for good."""
        if not options:
            return Plan(None, 0, 1.0, Why("auto: plain decoding (no draft on offer)"))
        st = self.steps
        top = max(options, key=lambda p: p.speedup)
        for o in options:
            if o.drafter is None:
                continue
            st.idle[o.drafter] = st.idle.get(o.drafter, 0) + 1
            r = st.step_ratio.get(o.drafter)
            if r is not None:  # an old slow measurement fades while nothing new comes in
                st.step_ratio[o.drafter] = 1.0 + (r - 1.0) * STEP_RATIO_FADE
        # (plan() made lookup_alphas for this step: nothing changes it before it is shown)
        why = Why(self._plain_reason, top, lookup_alphas, figures, max_loss)
        return Plan(None, 0, 1.0, why)

    def _unhosted(
        self, drafter: str, alphas: Sequence[float], figures: dict[str, Figures]
    ) -> tuple[int, float, float]:
        """A drafter's best chain priced by the models alone (k, rate), and its rate with
        the host's work but not the steps' measured excess."""
        st = self.steps
        if drafter == LOOKUP:
            k_bare, bare = st.best_chain(LOOKUP, alphas, with_host=False, with_ratio=False)
            return k_bare, bare, st.best_chain(LOOKUP, alphas, with_ratio=False)[1]
        fig = figures[drafter]
        return fig[2], fig[3], fig[4]

    def _unbounded(
        self, drafter: str, alphas: Sequence[float], figures: dict[str, Figures]
    ) -> float:
        """A drafter's rate as Auto prices it (host work and measured excess included) with no
        risk budget."""
        if drafter == LOOKUP:
            return self.steps.best_chain(LOOKUP, alphas)[1]
        dk, mean, lag = figures[drafter][6]
        return self.steps.best_chain(drafter, [mean] * dk, lag)[1]

    def _plain_reason(
        self, top: Plan, alphas: Sequence[float], figures: dict[str, Figures], max_loss: float
    ) -> str:
        """Why the best drafter on offer lost to a plain step (formatted when shown): the risk
        budget alone, the host's work, the steps' measured excess, or the models' own rate.
        The rate shown is the one without the budget (a draft the budget rules out entirely
        has none of its own)."""
        if top.drafter is None:
            return "auto: plain decoding"
        name = NAMES[top.drafter]
        rate = self._unbounded(top.drafter, alphas, figures)
        if max_loss < INF and rate >= self.margin:
            return "auto: plain decoding (" + RISKY.format(name, rate, max_loss) + ")"
        _, bare, hosted = self._unhosted(top.drafter, alphas, figures)
        st = self.steps
        why: Why | str = ""
        if bare >= self.margin and hosted < self.margin and st.host is not None:
            why = Why(HOST_OUTWEIGHS, st.host * 1000, bare)
        elif hosted >= self.margin:
            why = Why(STEPS_SLOWER, st.step_ratio.get(top.drafter, 1.0))
        return f"auto: plain decoding ({name} would run at {rate:.2f}x{why})"
