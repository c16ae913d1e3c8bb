"""Auto mode's cost model: its choices are the arithmetic optimum of the measured costs."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.core.decoding.cost_model import DRAFT, LOOKUP, CostModel, expected_tokens

LONG, MID, SHORT = "long/c95", "mid/c75", "short/c50"


def measured(t1: float, batch: dict[int, float], draft_token: float | None = None) -> CostModel:
    cm = CostModel()
    for _ in range(30):
        cm.observe_target(1, t1)
        for n, secs in batch.items():
            cm.observe_target(n, secs)
        if draft_token is not None:
            cm.observe_draft(1, draft_token)
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


def brute_force(cm: CostModel, drafter: str, bucket: str, max_k: int) -> tuple[int, float]:
    a = cm.acceptance(drafter, bucket)
    t_plain = cm.target_cost(1)
    rates = {
        k: expected_tokens(a, k) * t_plain / (cm.draft_cost(drafter, k) + cm.target_cost(k + 1))
        for k in range(1, max_k + 1)
    }
    k = max(rates, key=lambda x: rates[x])
    return k, rates[k]


def test_expected_tokens() -> None:
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.8, 0) == 1.0


def test_target_cost_fits_the_measured_batches() -> None:
    # The CPU numbers measured here: 1 token 36 ms, 2: 54, 4: 68, 8: 125.
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    assert cm.target_cost(1) == pytest.approx(0.036, rel=0.02)
    assert 0.09 < cm.target_cost(8) / 0.125 * 0.125 < 0.16
    assert 0.2 < cm.beta < 0.5


def test_choice_is_the_arithmetic_optimum() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    teach(cm, LOOKUP, LONG, 0.9)
    k, gain = cm.best_k(LOOKUP, LONG, 8)
    assert (k, gain) == pytest.approx(brute_force(cm, LOOKUP, LONG, 8))
    assert gain > 1.5
    plan = cm.plan(lookup_classes=[LONG] * 8, draft_ok=False, max_k=8)
    assert plan.drafter == LOOKUP and plan.k == k
    assert "lookup" in plan.reason and "est." in plan.reason


def test_slow_draft_model_is_never_chosen_on_a_cpu() -> None:
    # The 0.5B draft costs 21 ms a token against 36 ms for the target: even at 90 % acceptance
    # speculation with it loses, so Auto decodes plainly.
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125}, draft_token=0.021)
    teach(cm, DRAFT, "", 0.9)
    plan = cm.plan(lookup_classes=[], draft_ok=True, max_k=8)
    assert plan.drafter is None and plan.k == 0
    assert "would run at" in plan.reason
    k, gain = cm.best_k(DRAFT, "", 8)
    assert k == 0 and gain < 1.0


def test_gpu_like_costs_choose_the_draft_model() -> None:
    # Memory-bound decode: verifying 8 tokens costs little more than 1; the draft is cheap.
    cm = measured(0.020, {3: 0.021, 5: 0.022, 9: 0.024}, draft_token=0.003)
    teach(cm, DRAFT, "", 0.75)
    plan = cm.plan(lookup_classes=[], draft_ok=True, max_k=8)
    assert plan.drafter == DRAFT and plan.k >= 3
    assert (plan.k, plan.speedup) == pytest.approx(brute_force(cm, DRAFT, "", 8))


def test_rising_rejections_switch_speculation_off() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    teach(cm, LOOKUP, SHORT, 0.9)
    assert cm.plan(lookup_classes=[SHORT] * 8, draft_ok=False, max_k=8).drafter == LOOKUP
    teach(cm, LOOKUP, SHORT, 0.05, steps=200)  # acceptance drifts down
    plan = cm.plan(lookup_classes=[SHORT] * 8, draft_ok=False, max_k=8)
    assert plan.drafter is None


def test_unmeasured_target_decodes_plainly_first() -> None:
    plan = CostModel().plan(lookup_classes=[LONG] * 8, draft_ok=True, max_k=8)
    assert plan.drafter is None and "measuring" in plan.reason


def host_heavy(host_s: float) -> CostModel:
    """GPU-like model costs (a verified batch barely costs more than one token) where the
    host's own work per step is `host_s`, as whole plain steps measure it."""
    cm = measured(0.003, {5: 0.0033, 9: 0.0036})
    teach(cm, LOOKUP, MID, 0.6)
    for _ in range(30):
        cm.observe_step(None, 0, 0.003 + host_s, 0.003)
    return cm


def test_host_overhead_switches_a_drafter_off_and_says_so() -> None:
    lean = host_heavy(0.00005).plan(lookup_classes=[MID] * 8, draft_ok=False, max_k=8)
    assert lean.drafter == LOOKUP
    slow = host_heavy(0.004).plan(lookup_classes=[MID] * 8, draft_ok=False, max_k=8)
    assert slow.drafter is None
    assert "host work" in slow.reason and "outweighs" in slow.reason, slow.reason


def test_one_slow_step_does_not_switch_a_drafter_off_for_good() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    teach(cm, LOOKUP, LONG, 0.95)
    plan = cm.plan(lookup_classes=[LONG] * 8, draft_ok=False, max_k=8)
    assert plan.drafter == LOOKUP
    for _ in range(3):  # another program stalls the machine: three steps take 3x as long
        cm.observe_step(LOOKUP, plan.k, 3 * cm.step_cost(LOOKUP, plan.k), 0.0)
    chosen = [
        cm.plan(lookup_classes=[LONG] * 8, draft_ok=False, max_k=8).drafter
        for _ in range(2 * cm.reprobe_after)
    ]
    assert LOOKUP in chosen, "lookup was never tried again"


def test_a_confident_chain_is_drafted_further_than_a_doubtful_one() -> None:
    cm = measured(0.036, {2: 0.054, 4: 0.068, 8: 0.125})
    sure, _ = cm.best_chain(LOOKUP, [0.98] * 12)
    fading, _ = cm.best_chain(LOOKUP, [0.98, 0.98, 0.5, 0.3, 0.3, 0.3])
    assert sure >= 8 and fading == 2
