"""The planner prices drafts with the target's cost curve: per-token acceptance estimates in, the
draft length that maximises expected tokens per unit of verification cost out."""

from __future__ import annotations

import pytest

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.drafters.lookup_proposal import BREAK
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.cost_model import Costly, CostModel
from specchat.core.decoding.pricing.risk import longest_within
from specchat.core.decoding.pricing.tuning import START

DRAFT = DrafterKind.MODEL

LOOKUP = DrafterKind.LOOKUP

# The measurement on this 2-core machine (target Qwen2.5-Coder-1.5B, median of 6):
# a decode of n tokens relative to one.
CPU = CostCurve(((1, 1.0), (2, 1.73), (5, 3.99), (9, 7.47), (17, 11.5)), t1_s=0.04)


def planner(curve: CostCurve) -> CostModel:
    cm = CostModel().steady(t1=0.04, host=0.0)  # timing fixed; the curve gives the shape
    return cm.use_curve(curve)


def by_hand(curve: CostCurve, alphas: list[float]) -> tuple[int, float]:
    """Brute force: expected tokens 1 + sum_j prod_{i<=j} a_i over cost c(k + 1), each k."""
    best_k, best = 0, 1.0
    for k in range(1, len(alphas) + 1):
        gained, chance = 1.0, 1.0
        for a in alphas[:k]:
            chance *= a
            gained += chance
        rate = gained / curve.rel(k + 1)
        if rate > best:
            best_k, best = k, rate
    return best_k, best


PROFILES = [
    [0.95] * 16,
    [0.99] * 5 + [0.3] * 11,
    [0.8, 0.9, 0.99, 0.99, 0.6, 0.99, 0.99, 0.99],
    [0.5] * 8,
    [0.999] * 16,
]


@pytest.mark.parametrize("alphas", PROFILES)
def test_draft_length_is_the_optimum_on_the_measured_curve(alphas: list[float]) -> None:
    cm = planner(CPU)
    k, gain = cm.steps.best_chain(LOOKUP, alphas)
    want_k, want_gain = by_hand(CPU, alphas)
    assert k == want_k
    if k:
        assert gain == pytest.approx(want_gain, rel=1e-9)


def test_the_curve_decides_how_long_a_confident_draft_is() -> None:
    # a = 0.95 per token. CPU: k = 1: 1.95 / 1.73 = 1.127; k = 2: 2.8525 / 2.483 = 1.149;
    # k = 3: 3.710 / 3.237 = 1.146: two tokens. Flat: every token adds expected tokens at no
    # cost, so all 16 (expected 1 + 0.95 + ... + 0.95^16 = 11.5 tokens a pass).
    alphas = [0.95] * 16
    k_cpu, gain_cpu = planner(CPU).steps.best_chain(LOOKUP, alphas)
    k_flat, gain_flat = planner(CostCurve.flat()).steps.best_chain(LOOKUP, alphas)
    assert (k_cpu, k_flat) == (2, 16)
    assert gain_cpu == pytest.approx(2.8525 / (1.73 + (3.99 - 1.73) / 3), rel=1e-9)
    assert gain_flat == pytest.approx((1 - 0.95**17) / 0.05, rel=1e-9)


def test_a_confidence_drop_ends_the_draft_where_the_cost_says() -> None:
    # Eight near-certain tokens (0.99): k = 3: 3.940 / c(4) = 3.940 / 3.237 = 1.217; k = 4:
    # 4.901 / 3.99 = 1.228; k = 5: 5.852 / 4.86 = 1.204, and less up to k = 8: four. (Sixteen
    # would all go: past 9 rows the curve rises by only 0.5 a token, 15.85 / 11.5 = 1.38.)
    # The same draft turning to guesses (0.3) after three: k = 4 gains 0.3 * 0.970 = 0.291
    # tokens for 0.75 of a token's time, 4.231 / 3.99 = 1.06: three.
    assert planner(CPU).steps.best_chain(LOOKUP, [0.99] * 8)[0] == 4
    assert planner(CPU).steps.best_chain(LOOKUP, [0.99] * 16)[0] == 16
    assert planner(CPU).steps.best_chain(LOOKUP, [0.99] * 3 + [0.3] * 13)[0] == 3


def test_plan_takes_per_token_estimates() -> None:
    cm = planner(CPU)
    alphas = [0.99] * 3 + [0.3] * 13
    plan = cm.plan(lookup_classes=[], lookup_alphas=alphas, max_k=16)
    assert (plan.drafter, plan.k) == (LOOKUP, 3)
    # max_k cuts the estimates: only two positions may be drafted here
    plan = cm.plan(lookup_classes=[], lookup_alphas=alphas, max_k=2)
    assert plan.k == 2


def test_the_draft_model_has_its_own_cap() -> None:
    """A 64-token copy on offer (flat curve: the whole copy pays) and a draft model capped at
    k_max = 4: the lookup draft keeps its length, the draft model never exceeds 4."""
    cm = CostModel().steady(t1=0.04).use_curve(CostCurve.flat())
    cm.steps.draft_trials[DRAFT] = 5
    plan = cm.plan(
        lookup_classes=[], lookup_alphas=[0.99] * 64, max_k=64, costly=[Costly(DRAFT, 4)]
    )
    assert (plan.drafter, plan.k) == (LOOKUP, 64)
    for _ in range(30):  # the draft model now looks perfect: it wins, at most 4 tokens
        cm.observe_accept("draft", [""], 1, 1)
    plan = cm.plan(lookup_classes=[], lookup_alphas=[0.2], max_k=64, costly=[Costly(DRAFT, 4)])
    assert plan.drafter == "draft" and plan.k == 4


def test_flat_curve_keeps_a_gpus_decisions_on_a_slow_machine() -> None:
    # Learning timing, as in the app: the CPU's real batches and steps must not pull the flat
    # planner back to CPU decisions (that is what `--cost-curve flat` is for).
    cm = CostModel().use_curve(CostCurve.flat())
    cm.steps.observe_target(1, 0.04)
    for _ in range(50):
        cm.steps.observe_target(9, 0.04 * 7.47)
        cm.steps.observe_step(LOOKUP, 8, 0.04 * 7.47, 0.04 * 7.47)
    assert cm.steps.t1 == pytest.approx(0.04)
    assert LOOKUP not in cm.steps.step_ratio
    k, gain = cm.steps.best_chain(LOOKUP, [0.95] * 16, with_host=False)
    assert k == 16
    assert gain == pytest.approx((1 - 0.95**17) / 0.05, rel=1e-9)


def test_measured_curve_keeps_its_shape_and_learns_the_scale() -> None:
    cm = CostModel().use_curve(CPU)
    assert cm.steps.t1 == pytest.approx(0.04)  # from the measurement, before any decode
    for _ in range(60):  # the machine got twice as slow: one-token decodes say so
        cm.steps.observe_target(1, 0.08)
        cm.steps.observe_step(None, 0, 0.08, 0.08)
    assert cm.steps.t1 == pytest.approx(0.08, rel=1e-3)
    assert cm.steps.target_cost(9) == pytest.approx(0.08 * 7.47, rel=1e-3)
    assert cm.steps.target_cost(5) == pytest.approx(0.08 * 3.99, rel=1e-3)


def test_batches_dearer_than_the_curve_are_the_verifications_cost() -> None:
    # Verifications in a row (a copy) each costing 15 % more than the curve says: plain
    # decoding's price stays what one-token decodes measured, and the drafts' price rises
    # (taken as the machine's scale, the excess would vanish from every comparison).
    cm = CostModel().use_curve(CPU)
    cm.steps.observe_target(1, 0.04)
    cm.steps.observe_step(None, 0, 0.04, 0.04)
    for _ in range(60):
        secs = 1.15 * 0.04 * 7.47
        cm.steps.observe_target(9, secs)
        cm.steps.observe_step(LOOKUP, 8, secs, secs)
    assert cm.steps.t1 == pytest.approx(0.04)
    assert cm.steps.step_ratio[LOOKUP] == pytest.approx(1.15, rel=1e-3)
    alphas = [0.95] * 8
    assert by_hand(CPU, alphas)[0] == 2  # the curve alone would draft 2 tokens (1.15x) ...
    k, gain = cm.steps.best_chain(LOOKUP, alphas)
    assert gain == pytest.approx(by_hand(CPU, alphas)[1] / 1.15, rel=1e-6)
    assert k == 0  # ... which at their real price lose to plain decoding


def test_a_copys_growth_after_a_refusal_follows_the_curve_not_a_slow_spell() -> None:
    """After the reply's first refused lookup draft, a draft kept whole earns what pays with the
    estimates on the curve (the copy's kept run raising them), whatever excess the steps just
    measured: lookup steps measured 1.4x their predicted time (a busy spell) leave the earned
    length what it is without them. Fails if the earned length is priced with that excess (it
    then earns nothing: no length pays at 1.4x, and a copy regrows from its priced 1-2 tokens);
    also if growth after a refusal is not priced (four times the last draft, 24)."""
    classes = ["span16/c95"] * 40
    calm, busy = planner(CPU), planner(CPU)
    for cm in (calm, busy):
        for _ in range(20):
            cm.observe_accept(LOOKUP, ["span16/c95"] * 4, 4, 3)  # copies that often end
    busy.steps.step_ratio[LOOKUP] = 1.4
    earned = calm.grown(6, classes, run=10, clean=False)
    assert 0 < earned < 24 and busy.grown(6, classes, run=10, clean=False) == earned
    assert busy.steps.best_chain(LOOKUP, busy.acceptances(LOOKUP, classes))[0] == 0
    assert calm.grown(6, classes, run=10, clean=True) == 24  # a quote's growth: 4 x 6


def test_a_quotes_growth_is_priced_at_a_paragraphs_end_by_what_copies_did_there() -> None:
    """A clean copy's growth is priced with every token kept, but a token that ends a
    paragraph of prose (class BREAK) at its estimate: before evidence the earned draft stops
    at the paragraph's end (a quote of one paragraph ends there); once copies have been seen
    to go on past paragraphs' ends, it grows through. Fails if the paragraph's end is priced
    as sure (40 = 4 x 10 at once), or if its estimate learns nothing (it stays cut)."""
    c = "span32/c95"
    classes = [c] * 12 + [BREAK + c] + [c] * 40
    cm = planner(CPU)
    assert 1 <= cm.grown(10, classes) <= 13
    assert cm.grown(10, [c] * len(classes)) == 40
    for _ in range(40):
        cm.observe_accept(LOOKUP, [BREAK + c], 1, 1)
    assert cm.grown(10, classes) == 40


def test_after_a_refusal_a_copys_run_does_not_carry_its_growth_past_a_paragraphs_end() -> None:
    """After the reply's first refused lookup draft, a copy's kept run raises the estimates of
    the tokens it copies, but not of a token that ends a paragraph (class BREAK): that one is
    priced at its own estimate, as before any refusal, so the earned draft stops at the
    paragraph's end until copies have been seen to go on there. Fails if the run raises the
    paragraph's end too (the draft grows through it at once: 40 = 4 x 10)."""
    c = "span32/c95"
    classes = [c] * 12 + [BREAK + c] + [c] * 40
    cm = planner(CPU)
    for _ in range(10):
        cm.observe_accept(LOOKUP, [c] * 8, 8, 8)  # this copy's tokens are kept
    assert cm.grown(10, [c] * len(classes), run=30, clean=False) == 40
    assert 1 <= cm.grown(10, classes, run=30, clean=False) <= 13
    for _ in range(40):
        cm.observe_accept(LOOKUP, [BREAK + c], 1, 1)
    assert cm.grown(10, classes, run=30, clean=False) == 40


def test_without_a_curve_the_online_line_prices_batches() -> None:
    cm = CostModel().steady(t1=0.01, beta=0.25)
    assert cm.steps.target_cost(9) == pytest.approx(0.01 * 3.0)
    cm.use_curve(CPU)
    assert cm.steps.target_cost(9) == pytest.approx(0.01 * 7.47)
    cm.use_curve(None)
    assert cm.steps.target_cost(9) == pytest.approx(0.01 * 3.0)


ECHO = [
    {
        "role": "user",
        "content": "Repeat this sentence exactly, nothing else:\n"
        "The quiet river carries paper boats past the old mill, under the stone bridge where "
        "the children wait, and on towards the sea that none of them has ever seen.",
    }
]


def test_a_copy_earns_its_length_in_a_real_reply(smol_path) -> None:
    """SmolLM2 echoes a sentence (T = 0, lookup up to 32 tokens). On a measured curve cheap
    enough that the estimates alone would verify the whole copy at once, the decoder drafts at
    most twice the copy's current match: short at first, then longer as the reply goes on
    copying (the last draft ends with the reply's end token, so it may be shorter than the one
    before). A flat curve (an idealised GPU) drafts all 32 at the first step. Fails if the
    decoder does not cap the proposal."""
    from specchat.core.decoding.runtime import RuntimeConfig
    from specchat.core.engines.local import Engine
    from specchat.core.params import GenerationParams

    cheap = CostCurve(((1, 1.0), (2, 1.05), (65, 1.6)), t1_s=0.01)
    params = GenerationParams(temperature=0.0, lookup_min_match=1, lookup_k_max=32, max_tokens=48)
    cfg = RuntimeConfig(n_ctx=512)
    with Engine(smol_path, smol_path, target_config=cfg, draft_config=cfg) as engine:
        engine.cost.steady()
        prompt = engine.prompt_tokens(ECHO)
        drafts: dict[str, list[int]] = {}
        for curve in (cheap, CostCurve.flat()):
            engine.reset_caches()
            engine.use_cost_curve(curve)
            ks, seen = [], 0
            for ev in engine.generate_tokens(prompt, params, "lookup"):
                if ev.stats.verify_steps > seen:
                    seen = ev.stats.verify_steps
                    ks.append(ev.stats.k_current)
            drafts[curve.source] = ks
    measured, flat = drafts["measured"], drafts["flat"]
    assert flat[0] == 32, flat
    assert len(measured) >= 2 and measured[0] <= 8, measured
    grown = measured[:-1]  # (the last reaches the end token)
    assert grown == sorted(grown) and measured[-1] > measured[0], measured


def test_no_draft_can_lose_more_than_the_replys_budget() -> None:
    """A copy the estimates trust (0.99 a token): unbounded, the CPU curve takes 16 tokens. Under
    a reply's risk budget (risk.RiskBudget) the draft is the best whose refusal at its first
    token would lose at most the budget (its cost less one token, in one-token decodes), and
    with no room for even one drafted token the plan decodes plainly and says why. A flat
    curve (an idealised GPU) loses nothing to a refusal: the budget never binds there. Fails if
    plan ignores max_loss."""
    alphas = [0.99] * 16
    cm = planner(CPU)

    def plan(curve_model: CostModel, budget: float):
        return curve_model.plan(lookup_classes=[], lookup_alphas=alphas, max_k=16, max_loss=budget)

    free = plan(cm, float("inf"))
    assert free.k == 16
    for budget in (0.8, 1.0, 1.7, 3.0, 6.5, 9.0):
        k = plan(cm, budget).k
        fitting = [j for j in range(1, 17) if CPU.rel(j + 1) - 1.0 <= budget]
        assert k == by_hand(CPU, alphas[: max(fitting)])[0], budget
        assert CPU.rel(k + 1) - 1.0 <= budget
        assert longest_within(cm.steps, budget, 16) == max(fitting)  # the decoder's walk limit
    assert plan(cm, 1.7).k < plan(cm, 3.0).k < plan(cm, 9.0).k < free.k
    nothing = plan(cm, 0.5)  # a 2-token verification costs 1.73
    # the reason blames the budget and shows the rate the draft would have without it
    assert nothing.drafter is None
    assert f"lookup would run at {free.speedup:.2f}x, but a refused draft" in nothing.reason
    assert "the 0.5 steps this reply can still risk" in nothing.reason
    # a draft that loses on its own rate is not said to lose to the budget
    poor = cm.plan(lookup_classes=[], lookup_alphas=[0.2] * 16, max_k=16, max_loss=9.0)
    rate = cm.steps.best_chain(LOOKUP, [0.2] * 16)[1]
    assert poor.drafter is None and rate < 1.0
    assert poor.reason == f"auto: plain decoding (lookup would run at {rate:.2f}x)", poor.reason
    assert plan(planner(CostCurve.flat()), 0.1).k == 16


def test_a_copy_drafts_within_the_budget_on_a_curve_steep_at_its_start() -> None:
    """The reply's risk budget alone guards Auto's drafts. On the curve of 2026-11-26 (two
    tokens cost 1.92 decodes) the one-standard-deviation guard on top of it refused even a
    32-token copy's 2-token draft at a reply's start, so Auto never drafted, never learned, and
    a whole suite ran plain; without a budget the guard still applies."""
    curve = CostCurve(((1, 1.0), (2, 1.92), (3, 2.65), (4, 3.14), (5, 3.94), (9, 8.03)))
    cm = CostModel(curve=curve)
    cm.steps.t1, cm.steps.host = 0.032, 0.0001
    limit = longest_within(cm.steps, START, 64)
    classes = ["span32/c95"] * limit  # prior estimates: nothing drafted yet
    plan = cm.plan(lookup_classes=classes, max_k=limit, max_loss=START)
    assert (limit, plan.drafter, plan.k) == (2, LOOKUP, 2)
    assert cm.plan(lookup_classes=classes, max_k=limit).k == 0
