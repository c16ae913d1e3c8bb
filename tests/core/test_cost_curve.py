"""The target's cost curve: measured on the real model without disturbing its cache, and the
ceiling a bench report sets beside each measured speedup."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from specchat.core.bench.report import build_report, models_info
from specchat.core.bench.runner import run_bench
from specchat.core.decoding.choosing.backend_sampler import GREEDY, ROWS_MAX, TOP_K, SamplerSpec
from specchat.core.decoding.pricing.cost_curve import (
    FLAT,
    SETTLE,
    SHORT_FACTOR,
    SHORT_N,
    CostCurve,
    CostCurveError,
    ceiling,
    curve_from_pairs,
    default_ns,
    measure_cost_curve,
    measure_host_floor,
    passes_by_length,
)

CPU = CostCurve(((1, 1.0), (2, 1.73), (5, 3.99), (9, 7.47), (17, 11.5)))


def test_between_and_beyond_the_measured_points() -> None:
    curve = CostCurve(((1, 1.0), (5, 4.0), (9, 7.0)))
    assert curve.rel(1) == 1.0 and curve.rel(0) == 1.0
    assert curve.rel(3) == pytest.approx(2.5)  # halfway from 1 to 4
    assert curve.rel(9) == pytest.approx(7.0)
    assert curve.rel(13) == pytest.approx(10.0)  # the last half's slope, 0.75 a token
    assert CostCurve.flat().rel(65) == 1.0
    assert curve.table(4) == [1.0, 1.0, 1.75, 2.5, 3.25]


def test_beyond_the_last_point_the_slope_is_the_last_half_s() -> None:
    # Measured here to 17: flat from 11 to 15 (llama.cpp's kernels change with the batch), so
    # the last segment's slope (0.19 a token) priced 65 tokens at 18.6 decodes; the slope from
    # n = 8 to 17 (0.353) gives 26.4, and a decode of 65 measured 24.1.
    curve = CostCurve(
        ((1, 1.0), (8, 6.3), (9, 7.15), (11, 9.05), (13, 9.05), (15, 9.10), (17, 9.48))
    )
    assert curve.rel(65) == pytest.approx(9.48 + (9.48 - 6.3) / 9 * 48)
    assert CostCurve(((1, 1.0), (2, 1.5), (3, 2.5))).rel(5) == pytest.approx(4.5)  # short


@pytest.mark.parametrize(
    "points",
    [((2, 1.5),), ((1, 1.0), (3, 2.0), (2, 1.5)), ((1, 1.0), (2, 0.0)), ()],
)
def test_a_malformed_curve_is_refused(points) -> None:
    with pytest.raises(CostCurveError):
        CostCurve(points)


def test_passes_per_draft_length_from_the_position_counts() -> None:
    # 5 passes drafted >= 1 token, 3 >= 2, 3 >= 3, 1 >= 4: two of 1, none of 2, two of 3,
    # one of 4.
    assert passes_by_length([5, 3, 3, 1]) == [2, 0, 2, 1]
    assert passes_by_length([]) == []


def test_the_ceiling_prices_each_pass_on_the_curve() -> None:
    # 10 plain passes, two verifying 2 drafted tokens (3 rows) and two verifying 3 (4 rows):
    # 10 + 2 * c(3) + 2 * c(4), c(3) = 1.73 + 2.26 / 3 = 2.4833, c(4) = 3.2367: 21.44
    # one-token decodes for 24 tokens after the first.
    assert ceiling(CPU, 25, [4, 4, 2], 10) == pytest.approx(24 / 21.44, rel=1e-4)
    # flat: every pass costs one token, the ceiling is tokens per pass
    assert ceiling(CostCurve.flat(), 25, [4, 4, 2], 10) == pytest.approx(24 / 14)
    assert ceiling(CPU, 1, [], 0) is None


def test_a_curve_measured_on_a_busy_machine_says_so() -> None:
    quiet = CostCurve(CPU.points, t1_s=0.04, others_share=0.02)
    busy = CostCurve(CPU.points, t1_s=0.04, others_share=0.5)
    assert "other programs" not in quiet.describe()
    assert "other programs used 50% of the CPU" in busy.describe()
    assert busy.as_dict()["others_share"] == 0.5


def test_each_batch_is_priced_against_the_one_token_decode_beside_it() -> None:
    # Three rounds; in the third the machine was twice as slow for both halves of every pair,
    # and one two-token decode came out implausibly fast. Medians of the pairs' ratios are
    # immune to both; the fastest of each n would price 2 tokens at 1.2 and 5 at 3.9/2.1.
    ones = [0.030, 0.031, 0.060, 0.030]
    pairs = {
        2: [(0.030, 0.057), (0.031, 0.059), (0.060, 0.036)],
        5: [(0.031, 0.121), (0.030, 0.117), (0.060, 0.234)],
        3: [(0.030, 0.050), (0.030, 0.055), (0.061, 0.110)],  # median 1.80: below n = 2
    }
    curve = curve_from_pairs(ones, pairs, others_share=0.01)
    assert curve.points[0] == (1, 1.0)
    assert curve.rel(2) == pytest.approx(0.057 / 0.030)
    assert curve.rel(3) == pytest.approx(0.057 / 0.030)  # never below a smaller batch
    assert curve.rel(5) == pytest.approx(0.117 / 0.030)
    assert curve.t1_s == pytest.approx(0.0305)  # the median one-token time
    with pytest.raises(CostCurveError):
        curve_from_pairs([], {2: [(0.03, 0.06)]})


def test_default_points_stay_within_one_decodes_rows() -> None:
    assert default_ns(8) == list(range(1, 10))
    ns = default_ns(64)
    assert ns[0] == 1 and ns[-1] == min(65, ROWS_MAX) and ns == sorted(set(ns))


def test_measuring_leaves_the_cache_as_it_was(engine) -> None:
    rt = engine.target
    rt.use_sampler(None)  # raw logits, to compare what the cache gives before and after
    rt.reset()
    prompt = rt.tokenize("def add(a, b):\n    return", add_special=True)
    rt.decode(prompt, logits_for="last")
    before = np.array(rt.decode([rt.tokenize(" a", add_special=False)[0]], logits_for="all"))
    rt.truncate(len(prompt))
    curve = measure_cost_curve(rt, [1, 2, 3], repeats=1)
    assert rt.cache == prompt
    after = np.array(rt.decode([rt.tokenize(" a", add_special=False)[0]], logits_for="all"))
    np.testing.assert_array_equal(after, before)  # the filler and timed decodes are gone
    assert [n for n, _ in curve.points] == [1, 2, 3]
    assert curve.points[0] == (1, 1.0) and curve.t1_s is not None and curve.t1_s > 0
    rels = [c for _, c in curve.points]
    assert rels == sorted(rels)  # a batch is never priced below a smaller one
    rt.reset()


def _decodes(rt, monkeypatch, what=len) -> list:
    """The runtime's decodes from now on, in order, each as `what(tokens)` (its size)."""
    seen: list = []
    decode = rt.decode

    def spied(tokens, **kw):
        seen.append(what(tokens))
        return decode(tokens, **kw)

    monkeypatch.setattr(rt, "decode", spied)
    return seen


OWN_CHAIN = SamplerSpec(TOP_K, top_k=10)  # a runtime's own chain, which measuring puts back


def test_short_batches_are_timed_three_times_as_often(engine, monkeypatch) -> None:
    # Auto's short drafts are decided on the curve's first points, and three pairs left n = 2
    # anywhere in 1.63-2.13 from one measurement to the next: they get SHORT_FACTOR x the pairs.
    rt = engine.target
    sizes = _decodes(rt, monkeypatch)
    measure_cost_curve(rt, [1, 2, SHORT_N + 2], repeats=2)
    assert sizes.count(2) == 2 * SHORT_FACTOR
    assert sizes.count(SHORT_N + 2) == 2 + 1  # its pairs and the warm-up


def test_a_long_batch_timed_cheaper_than_a_shorter_one_is_timed_again(engine, monkeypatch) -> None:
    # A long batch gets a third of a short one's pairs; one disturbed pair priced 65 tokens at
    # 13.8 one-token decodes, below 49's, where measurements that hour said 18.2-21.0, and the
    # rising curve kept 49's figure. Here the real decodes run and only their clock is made
    # up: 9 tokens cost 3 one-token decodes, 17 cost 5, but the first 17-token decode reads
    # 2. Timed again as often as a short batch, 17 is priced at 5; once only (the pairs its
    # repeats give it), at 9's 3 and decoded once beside the warm-up.
    import specchat.core.decoding.pricing.cost_curve as cc

    rt = engine.target
    sizes = _decodes(rt, monkeypatch)
    real_clock, fast = cc.timed_decode, [0.02]

    def clock(runtime, tokens, logits_for):
        real_clock(runtime, tokens, logits_for)
        n = len(tokens)
        if n == 17 and fast:
            return fast.pop()
        return {1: 0.01, 9: 0.03, 17: 0.05}[n]

    monkeypatch.setattr(cc, "timed_decode", clock)
    curve = measure_cost_curve(rt, [1, 9, 17], repeats=1)
    assert curve.rel(9) == pytest.approx(3.0)
    assert curve.rel(17) == pytest.approx(5.0)
    assert sizes.count(17) == SHORT_FACTOR + 1  # the warm-up and as many pairs as n = 9's


def test_each_batch_follows_settled_one_token_decodes(engine, monkeypatch) -> None:
    # On a GPU the one-token decode right after a batch runs without llama.cpp's CUDA graph and
    # the next one captures it (H100: 2.96 ms against 1.85 ms replayed): the timed one-token
    # decode must come after two others, or every batch is priced against a slow decode.
    rt = engine.target
    rt.reset()
    sizes = _decodes(rt, monkeypatch)
    measure_cost_curve(rt, [1, 2, 3], repeats=1)
    timed = sizes[2:]  # after the filler and the warm-up
    runs, ones = [], 0
    for n in timed:
        if n == 1:
            ones += 1
        else:
            runs.append(ones)
            ones = 0
    # n = 1's own decodes run on into n = 2's: the shortest run is one batch's, two settling
    # one-token decodes and the timed one
    assert len(runs) == 2 * SHORT_FACTOR and min(runs) == 3


def test_the_engine_times_decodes_with_a_greedy_requests_chain_and_puts_its_own_back(
    engine, monkeypatch
) -> None:
    # On an H100 the greedy chain in llama.cpp's graph made a 65-row verification cost 14.2 ms
    # against 10.0 with raw logits, and its first use at a size cost up to 37 ms more: a curve
    # timed on raw logits priced the passes a greedy reply makes ~40 % too cheap there.
    rt = engine.target
    assert rt.use_sampler(OWN_CHAIN)
    seen = _decodes(rt, monkeypatch, lambda _: rt.sampler.active)
    try:
        engine.measure_cost_curve(ns=[1, 2], repeats=1)
        assert seen and all(s == SamplerSpec(GREEDY) for s in seen)
        assert rt.sampler.active == OWN_CHAIN  # the runtime's own chain is back
    finally:
        rt.use_sampler(None)


def test_the_host_floor_is_a_greedy_loop_that_decodes_each_token_it_read(
    engine, monkeypatch
) -> None:
    # The floor is what the barest loop costs outside llama_decode; reading the chosen token
    # is most of it (26 us right after a decode on this CPU, 2 us when repeated), so a loop
    # that did not read each token before decoding the next would price the floor too low.
    rt = engine.target
    assert rt.use_sampler(OWN_CHAIN)
    rt.reset()
    prompt = rt.tokenize("def add(a, b):\n    return", add_special=True)
    rt.decode(prompt, logits_for="last")
    decoded = _decodes(rt, monkeypatch, lambda tokens: (list(tokens), rt.sampler.active))
    read: list[int] = []
    token = rt.sampler.token

    def spied_token(i):
        read.append(token(i))
        return read[-1]

    monkeypatch.setattr(rt.sampler, "token", spied_token)
    try:
        llama0 = rt.llama_s
        floor = measure_host_floor(rt, tokens=5)
        llama_per_token = (rt.llama_s - llama0) / len(decoded)
        assert [len(d) for d, _ in decoded] == [1] * (SETTLE + 1 + 5)
        assert all(chain == SamplerSpec(GREEDY) for _, chain in decoded)
        assert len(read) == len(decoded)
        assert [d[0] for d, _ in decoded[1:]] == read[:-1]  # each decode is the token read
        assert 0.0 < floor < llama_per_token  # the decodes' own time is left out
        assert rt.cache == prompt  # the loop's tokens are cut off again
        assert rt.sampler.active == OWN_CHAIN  # the runtime's own chain is put back
    finally:
        rt.use_sampler(None)
        rt.reset()


def test_measuring_refuses_what_one_decode_cannot_do(engine) -> None:
    with pytest.raises(CostCurveError, match="rows"):
        measure_cost_curve(engine.target, [1, ROWS_MAX + 1])
    with pytest.raises(CostCurveError, match="repeats"):
        measure_cost_curve(engine.target, [1, 2], repeats=0)


def test_a_bench_report_sets_tau_and_the_ceiling_beside_the_speedup(
    small_engine, short_suite
) -> None:
    engine = small_engine  # the 0.5B pair: the report's arithmetic, not the model, is tested
    curve = measure_cost_curve(engine.target, [1, 2, 3, 5, 9], repeats=1)
    suite = short_suite.select(["edit-short"])
    engine.use_cost_curve(CostCurve.flat())
    try:
        bench = run_bench(
            engine, suite, "off,lookup", 1, max_tokens=24, warmup=False, cost_curve=curve
        )
    finally:
        engine.use_cost_curve(None)
    assert bench.planner_curve == FLAT
    report = build_report(bench, models=models_info(engine), argv=["bench"])
    assert report["settings"]["planner_cost_curve"] == FLAT
    assert report["cost_curve"]["points"][0] == [1, 1.0]
    recs = {r["mode"]: r for r in report["records"]}
    off, lookup = recs["off"], recs["lookup"]
    assert off["tau"] == 1.0 and off["ceiling"] == pytest.approx(1.0)
    run = next(r for r in bench.runs if r.label == "lookup")
    assert run.accepted, "the edit prompt repeats its code: lookup must draft and keep some"
    assert lookup["tau"] == pytest.approx(run.tokens / (run.tokens - run.accepted))
    # every pass costs at least one token's time: the ceiling is at most tokens per pass
    passes = run.plain_steps + run.verify_steps
    assert lookup["ceiling"] <= (run.tokens - 1) / passes + 1e-9
    assert lookup["efficiency"] == pytest.approx(lookup["speedup_vs_off"] / lookup["ceiling"])
    # on the flat curve the ceiling is tokens per pass: the tokens after the first came one
    # from each plain pass and verify_tokens from the verifications (the reply ran to its
    # limit, no end token), so the plain passes are what the verifications did not produce
    flat = copy.copy(bench)  # the same runs, their ceilings on the flat curve
    flat.cost_curve = CostCurve.flat()
    assert run.finish_reason == "length" and run.verify_tokens
    fpasses = (run.tokens - 1 - run.verify_tokens) + run.verify_steps
    frec = next(r for r in build_report(flat, models={})["records"] if r["mode"] == "lookup")
    assert frec["ceiling"] == pytest.approx((run.tokens - 1) / fpasses)
