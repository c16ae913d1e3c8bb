"""Auto mode's cost model: its choices are the arithmetic optimum of the measured costs."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.pricing.acceptance import expected_tokens
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.cost_model import Costly, CostModel
from specchat.core.decoding.pricing.risk import copy_cap

DRAFT = DrafterKind.MODEL
LOOKUP = DrafterKind.LOOKUP

LONG, MID, SHORT = "long/c95", "mid/c75", "short/c50"


def measured(t1: float, batch: dict[int, float], draft_token: float | None = None) -> CostModel:
    cm = CostModel()
    for _ in range(30):
        cm.steps.observe_target(1, t1)
        for n, secs in batch.items():
            cm.steps.observe_target(n, secs)
        if draft_token is not None:
            cm.steps.observe_draft(DRAFT, 1, draft_token)
    return cm


def teach(cm: CostModel, drafter: str, cls: str, alpha: float, steps: int = 400) -> None:
    """Feed verification results whose per-token acceptance probability is alpha."""
    rng = np.random.default_rng(0)
    k = 4
    for _ in range(steps):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        cm.observe_accept(drafter, [cls] * k, k, accepted)


def test_expected_tokens() -> None:
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.8, 0) == 1.0


def test_target_cost_fits_the_measured_batches() -> None:
    # Batches on the line t(n) = 36 ms * (1 + 0.25 (n - 1)): the fit finds beta = 0.25 (the
    # prior it starts from has decayed to ~1 % after 90 batches), so 8 tokens cost 99 ms.
    cm = measured(0.036, {2: 0.045, 4: 0.063, 8: 0.099})
    assert cm.steps.beta == pytest.approx(0.25, rel=2e-3)
    assert cm.steps.target_cost(8) == pytest.approx(0.099, rel=2e-3)
    # The CPU numbers measured here: 1 token 36 ms, 2: 54, 4: 68, 8: 125. The slope through
    # (0, 0) of (t(n)/t1 - 1) against n - 1: (0.5*1 + 0.8889*3 + 2.4722*7) / (1 + 9 + 49)
    # = 20.472 / 59 = 0.3470, so 8 tokens are priced 36 ms * (1 + 7 * 0.3470) = 123.4 ms.
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    assert cm.steps.target_cost(1) == pytest.approx(0.036, rel=1e-6)
    assert cm.steps.beta == pytest.approx(0.3470, rel=2e-3)
    assert cm.steps.target_cost(8) == pytest.approx(0.1234, rel=2e-3)


def test_choice_is_the_arithmetic_optimum() -> None:
    # t1 = 10 ms, a batch of n costs 1 + 0.25 (n - 1) of it, lookup drafts cost nothing. With
    # k drafts each accepted with probability a, a step yields 1 + a + ... + a^k tokens for
    # 1 + 0.25 k of a plain step's time. a = 0.9: k = 1: 1.9 / 1.25 = 1.52; 2: 2.71 / 1.5 =
    # 1.8067; 3: 3.439 / 1.75 = 1.9651; 4: 4.0951 / 2 = 2.0476, the best up to 4.
    cm = CostModel().steady(t1=0.01, beta=0.25)
    assert cm.steps.best_chain(LOOKUP, [0.9] * 4) == (4, pytest.approx(2.04755))
    # a = 0.5: 1.5 / 1.25 = 1.2; 1.75 / 1.5 = 1.1667; 1.875 / 1.75; 1.9375 / 2: k = 1 wins
    assert cm.steps.best_chain(LOOKUP, [0.5] * 4) == (1, pytest.approx(1.2))
    # a = 0.2: 1.2 / 1.25 = 0.96 at best: slower than plain, so no drafting
    assert cm.steps.best_chain(LOOKUP, [0.2] * 4)[0] == 0
    # a confident start then doubt: 1.95 / 1.25 = 1.56; 2.0475 / 1.5 = 1.365: stop at 1
    assert cm.steps.best_chain(LOOKUP, [0.95, 0.1, 0.9, 0.9]) == (1, pytest.approx(1.56))
    plan = cm.plan(lookup_classes=[LONG] * 4, max_k=4, lookup_alphas=[0.9] * 4)
    assert plan.drafter == LOOKUP and plan.k == 4
    assert plan.speedup == pytest.approx(2.04755)
    assert "lookup" in plan.reason and "est." in plan.reason


def test_slow_draft_model_is_never_chosen_on_a_cpu() -> None:
    # The 0.5B draft costs 21 ms a token against 36 ms for the target: even at 90 % acceptance
    # speculation with it loses, so Auto decodes plainly.
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125}, draft_token=0.021)
    teach(cm, DRAFT, "", 0.9)
    plan = cm.plan(lookup_classes=[], max_k=8, costly=[Costly(DRAFT, 8)])
    assert plan.drafter is None and plan.k == 0
    assert "would run at" in plan.reason
    k, gain = cm.steps.best_chain(DRAFT, [cm.acceptance(DRAFT)] * 8)
    assert k == 0 and gain < 1.0
    # Draft mode (the user's choice) says so at the reply's end, with the measured figures
    note = cm.draft_mode_note(DRAFT, 8)
    assert note.startswith("draft model: a drafted token costs 0.58 of a target token"), note
    assert f"about {gain:.2f}x of plain decoding at best; Auto would not use it" in note
    assert CostModel().draft_mode_note(DRAFT, 8) == ""  # nothing timed yet: nothing to say


def test_gpu_like_costs_choose_the_draft_model() -> None:
    # Memory-bound decode: a batch of n costs 1 + 0.05 (n - 1) of one token (20 ms); the draft
    # costs 3 ms = 0.15 of it a token; untaught, its acceptance is the prior 0.6. Rate of k
    # drafts: (1 + 0.6 + ... + 0.6^k) / (0.15 k + 1 + 0.05 k): k = 1: 1.6 / 1.2 = 1.3333;
    # 2: 1.96 / 1.4 = 1.4; 3: 2.176 / 1.6 = 1.36; 4: 2.3056 / 1.8 = 1.2809. So k = 2.
    cm = CostModel(gpu=True).steady(t1=0.020, beta=0.05)
    cm.steps.draft_token[DRAFT] = 0.003
    assert cm.acceptance(DRAFT) == pytest.approx(0.6)
    plan = cm.plan(lookup_classes=[], max_k=4, costly=[Costly(DRAFT, 4)])
    assert (plan.drafter, plan.k) == (DRAFT, 2)
    assert plan.speedup == pytest.approx(1.4)
    assert cm.draft_mode_note(DRAFT, 4).startswith(
        "draft model: est. 1.40x of plain decoding at best"
    )
    # twice as dear a draft: 1.6 / 1.35 = 1.185; 1.96 / 1.7 = 1.153; ...: k = 1
    cm.steps.draft_token[DRAFT] = 0.006
    plan = cm.plan(lookup_classes=[], max_k=4, costly=[Costly(DRAFT, 4)])
    assert (plan.drafter, plan.k) == (DRAFT, 1)
    assert plan.speedup == pytest.approx(1.6 / 1.35)
    # a reply that can risk a twentieth of a step has room for no draft: the reason says so,
    # with the rate the draft model would have without that budget (k = 1: 1.6 / 1.35)
    tight = cm.plan(lookup_classes=[], max_k=4, max_loss=0.05, costly=[Costly(DRAFT, 4)])
    assert tight.drafter is None
    assert "draft model would run at 1.19x, but a refused draft" in tight.reason, tight.reason


def test_a_draft_model_far_from_paying_is_priced_again_once_it_has_drafted() -> None:
    # Far below paying (a refused draft every time: 1 / 1.35 = 0.74x), the draft model's
    # figures are kept a few steps instead of priced every step; new evidence of its
    # acceptance must re-price it at once.
    cm = CostModel(gpu=True).steady(t1=0.020, beta=0.05)
    cm.steps.draft_token[DRAFT] = 0.006
    teach(cm, DRAFT, "", 0.0)
    plan = cm.plan(lookup_classes=[], max_k=4, costly=[Costly(DRAFT, 4)])
    assert plan.drafter is None, plan.reason
    teach(cm, DRAFT, "", 0.9)
    plan = cm.plan(lookup_classes=[], max_k=4, costly=[Costly(DRAFT, 4)])
    assert plan.drafter == DRAFT and plan.k >= 1, plan.reason


def test_rising_rejections_switch_speculation_off() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    teach(cm, LOOKUP, SHORT, 0.9)
    assert cm.plan(lookup_classes=[SHORT] * 8, max_k=8).drafter == LOOKUP
    teach(cm, LOOKUP, SHORT, 0.05, steps=200)  # acceptance drifts down
    plan = cm.plan(lookup_classes=[SHORT] * 8, max_k=8)
    assert plan.drafter is None


def test_unmeasured_target_decodes_plainly_first() -> None:
    plan = CostModel().plan(lookup_classes=[LONG] * 8, max_k=8, costly=[Costly(DRAFT, 8)])
    assert plan.drafter is None and "measuring" in plan.reason


def host_heavy(host_s: float) -> CostModel:
    """GPU-like model costs (a verified batch barely costs more than one token) where the
    host's own work per step is `host_s`, as whole plain steps measure it."""
    cm = measured(0.003, {5: 0.0033, 9: 0.0036})
    teach(cm, LOOKUP, MID, 0.6)
    for _ in range(30):
        cm.steps.observe_step(None, 0, 0.003 + host_s, 0.003)
    return cm


def test_host_overhead_switches_a_drafter_off_and_says_so() -> None:
    lean = host_heavy(0.00005).plan(lookup_classes=[MID] * 8, max_k=8)
    assert lean.drafter == LOOKUP
    slow = host_heavy(0.004).plan(lookup_classes=[MID] * 8, max_k=8)
    assert slow.drafter is None
    assert "host work" in slow.reason and "outweighs" in slow.reason, slow.reason


def test_one_slow_step_does_not_switch_a_drafter_off_for_good() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    teach(cm, LOOKUP, LONG, 0.95)
    plan = cm.plan(lookup_classes=[LONG] * 8, max_k=8)
    assert plan.drafter == LOOKUP
    for _ in range(3):  # another program stalls the machine: three steps take 3x as long
        cm.steps.observe_step(LOOKUP, plan.k, 3 * cm.steps.step_cost(LOOKUP, plan.k), 0.0)
    chosen = [
        cm.plan(lookup_classes=[LONG] * 8, max_k=8).drafter for _ in range(2 * cm.reprobe_after)
    ]
    assert LOOKUP in chosen, "lookup was never tried again"


def test_a_drafter_ruled_out_by_its_steps_is_not_re_measured_at_a_loss() -> None:
    """Lookup's steps measured 1.6x slower than their parts: its one-token draft (1.05x on the
    models alone) loses, so Auto decodes plainly and makes no refused-at-a-cost re-measuring
    draft every 24 steps; the excess fades while lookup is idle, and once it has faded enough
    for the draft to pay, Auto drafts again."""
    cm = measured(0.03, {2: 0.03 * 1.85})
    teach(cm, LOOKUP, LONG, 0.97, steps=2000)
    assert cm.steps.best_chain(LOOKUP, [0.97], with_host=False, with_ratio=False)[0] == 1
    for _ in range(20):
        cm.steps.observe_step(LOOKUP, 1, 1.6 * cm.steps._step_parts(LOOKUP, 1, 0), 0.0)
        cm.steps.observe_step(LOOKUP, 1, 1.6 * cm.steps._step_parts(LOOKUP, 1, 0), 0.0)
    assert cm.steps.step_ratio[LOOKUP] == pytest.approx(1.6, rel=0.02)
    drafted = [cm.plan(lookup_classes=[LONG], lookup_alphas=[0.97], max_k=1).k for _ in range(200)]
    first = drafted.index(1)
    assert first > 2 * cm.reprobe_after, first  # no draft while the excess still rules it out
    assert cm.steps.step_ratio[LOOKUP] < 1.05  # it drafted once the excess had faded


def test_a_confident_chain_is_drafted_further_than_a_doubtful_one() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    sure, _ = cm.steps.best_chain(LOOKUP, [0.98] * 12)
    fading, _ = cm.steps.best_chain(LOOKUP, [0.98, 0.98, 0.5, 0.3, 0.3, 0.3])
    assert sure >= 8 and fading == 2


def test_the_plain_step_after_a_lone_verification_is_charged_to_it() -> None:
    """llama.cpp rebuilds its graph when a decode's shape changes, so a lone one-token draft
    costs a slower plain step after it (about 5 % of a decode on a 2-core CPU). The plain
    step's excess over a plain decode is added to the verification's measured time; a
    verification followed by another one is charged nothing extra."""
    t1 = 0.03
    lone = measured(t1, {2: 0.054})
    chained = measured(t1, {2: 0.054})
    for cm, after in ((lone, None), (chained, LOOKUP)):
        for _ in range(20):
            predicted = cm.steps.step_cost(LOOKUP, 1) / cm.steps.step_ratio.get(LOOKUP, 1.0)
            cm.steps.observe_step(LOOKUP, 1, predicted, predicted)  # as predicted
            if after is None:
                cm.steps.observe_step(None, 0, 1.3 * t1, 1.3 * t1)  # the plain step after it
            else:
                cm.steps.observe_step(after, 1, predicted, predicted)
    assert chained.steps.step_ratio[LOOKUP] == pytest.approx(1.0, abs=0.02)
    assert lone.steps.step_ratio[LOOKUP] > 1.1


def test_a_short_draft_needs_sure_evidence() -> None:
    """On a CPU a one-token draft wins a few per cent at best (a 2-token decode costs 1.85 of
    one), so Auto drafts it only if it still pays one standard deviation below its acceptance
    estimate: not on a prior's say-so, yes after many verifications."""
    cm = measured(0.03, {2: 0.03 * 1.85})
    assert cm.steps.best_chain(LOOKUP, [0.93])[0] == 1  # the estimate alone would draft
    plan = cm.plan(lookup_classes=[LONG], lookup_alphas=[0.93], max_k=1)
    assert plan.drafter is None, plan.reason
    for _ in range(400):  # the class's evidence grows (decayed: about 50 verifications' worth)
        cm.observe_accept(LOOKUP, [LONG], 1, 1)
    plan = cm.plan(lookup_classes=[LONG], lookup_alphas=[0.97], max_k=1)
    assert (plan.drafter, plan.k) == (LOOKUP, 1), plan.reason


def test_a_draft_ruled_out_by_doubt_is_not_re_probed() -> None:
    """However long lookup stays idle, a one-token draft at a prior's 0.93 (1.04x on the mean,
    0.98x one deviation down) is never made: the doubt rules it out, not a slow spell."""
    cm = measured(0.03, {2: 0.03 * 1.85})
    plans = [
        cm.plan(lookup_classes=[LONG], lookup_alphas=[0.93], max_k=1)
        for _ in range(3 * cm.reprobe_after)
    ]
    assert all(p.drafter is None for p in plans), [p.reason for p in plans if p.drafter]


def test_a_copy_earns_its_length_where_batches_cost() -> None:
    """A lookup draft is at most twice its copy's current match (at least 2 tokens) on a
    measured curve; with a flat one (an idealised GPU) a copy drafts as far as it goes."""
    cm = measured(0.03, {2: 0.03 * 1.85})
    cm.use_curve(CostCurve(((1, 1.0), (2, 1.85), (9, 7.0)), t1_s=0.03))
    assert [copy_cap(cm.steps.curve, m) for m in (0, 1, 2, 3, 16, 40)] == [2, 2, 4, 6, 32, 80]
    cm.use_curve(CostCurve.flat())
    assert copy_cap(cm.steps.curve, 1) >= 64


def _gpu_shaped(draft_token: float) -> CostModel:
    cm = CostModel().steady(t1=0.04, host=0.0).use_curve(CostCurve.flat())
    cm.steps.draft_token[DRAFT] = draft_token
    return cm


def test_an_untried_draft_model_is_tried_where_lookup_offers_only_guesses() -> None:
    # Flat curve, a draft token at 0.4 of a target step. Lookup's one-token-match guesses,
    # accepted a fifth of the time, are estimated at ~1.25x, above the draft model at its prior
    # 0.6 (1.6 / 1.4 = 1.14x); the draft model, never measured, at one standard deviation above
    # its prior (0.6 + 0.22) would reach 2.49 / 1.8 = 1.38x: it is tried. A copy (estimated far
    # higher) keeps it untried.
    cm = _gpu_shaped(0.016)
    teach(cm, LOOKUP, "one/c50", 0.2)
    plan = cm.plan(
        lookup_classes=["one/c50"] * 16, max_k=16, max_loss=5.0, costly=[Costly(DRAFT, 16)]
    )
    assert (plan.drafter, plan.k) == (DRAFT, 2), plan.reason
    assert "measuring the draft model" in plan.reason
    plan = cm.plan(
        lookup_classes=["span32/c95"] * 16, max_k=16, max_loss=5.0, costly=[Costly(DRAFT, 16)]
    )
    assert plan.drafter == LOOKUP, plan.reason


def test_a_draft_model_behind_by_a_whole_prompt_is_priced_by_the_curve() -> None:
    # The draft model has not seen 400 tokens (Auto drafted with lookup meanwhile). Catching
    # up is one batch: on a flat curve (an idealised GPU) one decode, on the CPU's curve a tenth
    # of a token each (40 draft tokens: it cannot pay).
    cm = _gpu_shaped(0.016)
    teach(cm, DRAFT, "", 0.9)
    cm.steps.draft_trials[DRAFT] = 3
    assert cm.steps.draft_cost(DRAFT, 2, lag=400) == pytest.approx(0.016 * 3)
    plan = cm.plan(lookup_classes=[], max_k=16, max_loss=5.0, costly=[Costly(DRAFT, 16, 400)])
    assert plan.drafter == DRAFT and plan.k >= 3, plan.reason
    cpu = CostCurve(((1, 1.0), (2, 1.73), (5, 3.99), (9, 7.47), (17, 11.5)), t1_s=0.04)
    cm.use_curve(cpu)
    assert cm.steps.draft_cost(DRAFT, 2, lag=400) == pytest.approx(0.016 * 42)
    plan = cm.plan(lookup_classes=[], max_k=16, max_loss=5.0, costly=[Costly(DRAFT, 16, 400)])
    assert plan.drafter is None, plan.reason
