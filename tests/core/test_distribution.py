"""T > 0: speculative sampling reproduces the target's own distribution.

Thousands of two-token continuations are drawn through the real engine in draft mode (the
second token is drafted by the 0.5B model and verified by the 1.5B target, so both the
acceptance test min(1, p/q) and the residual draw from max(0, p - q) are exercised). Their
empirical joint distribution is compared with the target's exact one, computed from its logits.

The bound on the total-variation distance is not a guess: it is the 99.9th percentile of the TV
distance that N samples drawn from the exact distribution itself show (Monte Carlo), plus a
small allowance for llama.cpp's batched arithmetic. The test also checks that it has power: a
sampler that kept the draft's token (q) would sit far outside the bound.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from specchat.core.decoding.sampling import Warp
from specchat.core.engine import Engine
from specchat.core.types import GenerationParams

N = int(os.environ.get("SPECCHAT_DIST_SAMPLES", "2000"))
END = -1  # outcome id for "the reply ended" (an end-of-generation token)
PROMPT = [{"role": "user", "content": "Write a short surreal poem."}]

CONFIGS = {
    "plain T=1": GenerationParams(temperature=1.0),
    "top-k 20, top-p 0.8, T=1": GenerationParams(temperature=1.0, top_k=20, top_p=0.8),
}


def _draw(engine: Engine, prompt: list[int], params: GenerationParams) -> tuple[dict, dict]:
    counts: dict[tuple[int, int], int] = {}
    totals = {"drafted": 0, "accepted": 0}
    for seed in range(N):
        p = params.with_(seed=seed, max_tokens=2, p_min=0.0, k_init=1)
        toks = []
        for ev in engine.generate_tokens(prompt, p, "draft"):
            toks.extend(ev.token_ids)
            last = ev
        totals["drafted"] += last.stats.drafted
        totals["accepted"] += last.stats.accepted
        assert len(toks) >= 1
        key = (toks[0], toks[1] if len(toks) > 1 else END)
        counts[key] = counts.get(key, 0) + 1
    return counts, totals


def _rows(rt, prompt: list[int], first: list[int]):
    """The row after the prompt (as the engine's prefill computes it) and, for each first token,
    the row after it as a 2-row verification batch computes it."""
    rt.reset()
    row0 = rt.decode(prompt, logits_for="last")[0]
    after = {}
    for t1 in first:
        rt.truncate(len(prompt))
        after[t1] = rt.decode([t1, t1], logits_for="all")[0]
    rt.reset()
    return row0, after


def _joint(warp: Warp, row0, after, eog) -> dict[tuple[int, int], float]:
    p1 = warp.dist(row0, [])
    joint: dict[tuple[int, int], float] = {}
    for t1, pr1 in zip(p1.ids.tolist(), p1.probs.tolist(), strict=True):
        if t1 not in after:
            joint[(t1, -2)] = pr1  # first tokens never drawn: lumped (their mass counts in full)
            continue
        p2 = warp.dist(after[t1], [])
        for t2, pr2 in zip(p2.ids.tolist(), p2.probs.tolist(), strict=True):
            key = (t1, END if eog[t2] else t2)
            joint[key] = joint.get(key, 0.0) + pr1 * pr2
    return joint


REST = (-3, -3)


def _lump(dist: dict, keep: set) -> dict:
    """Outcomes outside `keep` (chosen from the exact distribution alone) share one bin, so
    the millions of rare two-token outcomes of a 150k vocabulary stay countable. TV over bins
    never exceeds TV over outcomes, and empirical, exact and simulated figures all use the
    same bins, so the comparison stays fair."""
    out: dict = {}
    for k, v in dist.items():
        key = k if k in keep else REST
        out[key] = out.get(key, 0.0) + v
    return out


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def _tv_bound(exact: dict, n: int, rng: np.random.Generator) -> float:
    """99.9th percentile of the TV distance of n samples drawn from `exact` itself."""
    probs = np.array(list(exact.values()))
    probs = probs / probs.sum()
    sims = rng.multinomial(n, probs, size=1000) / n
    tvs = 0.5 * np.abs(sims - probs).sum(axis=1)
    return float(np.quantile(tvs, 0.999))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_speculative_sampling_matches_the_target_distribution(engine: Engine, name: str) -> None:
    params = CONFIGS[name]
    warp = Warp(params)
    prompt = engine.prompt_tokens(PROMPT)
    engine.reset_caches()
    counts, totals = _draw(engine, prompt, params)
    rejected = totals["drafted"] - totals["accepted"]
    assert totals["drafted"] >= 0.9 * N, "the draft did not propose the second token"
    assert rejected >= 50, "too few rejections to exercise the residual distribution"

    t = engine.target
    eog = np.array([t.is_eog(i) for i in range(t.n_vocab)])
    p1 = warp.dist(_rows(t, prompt, [])[0], [])
    firsts = sorted(
        {k[0] for k in counts} | {int(i) for i, p in zip(p1.ids, p1.probs, strict=True) if p > 2e-3}
    )
    row0, after = _rows(t, prompt, firsts)
    exact = _joint(warp, row0, after, eog)
    assert abs(sum(exact.values()) - 1.0) < 1e-6

    # What a broken sampler that kept the draft's token would produce: t2 ~ q instead of p.
    assert engine.draft is not None
    _, draft_after = _rows(engine.draft, prompt, firsts)
    naive = _joint(warp, row0, draft_after, eog)
    keep = {k for k, p in exact.items() if p >= 2e-4}
    exact_b = _lump(exact, keep)
    empirical_b = _lump({k: c / N for k, c in counts.items()}, keep)
    naive_b = _lump(naive, keep)
    rng = np.random.default_rng(12345)
    bound = _tv_bound(exact_b, N, rng) + 0.01  # + allowance for batched-arithmetic logit noise
    tv = _tv(exact_b, empirical_b)
    tv_naive = _tv(exact_b, naive_b)
    engine.reset_caches()
    print(
        f"\n[{name}] N={N} outcomes seen={len(counts)} bins={len(exact_b)} "
        f"drafted={totals['drafted']} "
        f"accepted={totals['accepted']} TV={tv:.4f} bound={bound:.4f} "
        f"TV(target, draft-kept)={tv_naive:.4f}"
    )
    assert tv < bound, f"empirical TV {tv:.4f} exceeds the sampling-noise bound {bound:.4f}"
    assert tv_naive > bound, "the test has no power: the draft's distribution is within the bound"
