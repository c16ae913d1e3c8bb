"""T > 0: speculative sampling reproduces the target's own distribution.

Hundreds of short continuations are drawn through the real engine, in its default path (llama.cpp
samples inside its graph: the target's distribution p and a sample from it, the draft's top-10
distribution q and a sample from it; SpecChat applies min(1, p/q) and draws rejected positions
from max(0, p - q) on the host). Their empirical distribution is compared with the target's
exact one, computed from its logits with the same warp (llama.cpp's order: top-k, top-p, min-p,
temperature).

Cases: one drafted token (the residual draw is exercised on every rejection), three drafted
tokens with top-k/top-p (acceptance chains across positions), and prompt lookup at T > 0 (a
deterministic draft: accept with probability p(d), else draw from p without d).

Outcomes are binned: each outcome the exact distribution gives at least `MIN_P` is a bin, the
rest share one bin (chosen from the exact distribution alone, so the comparison stays fair). The
bound on the total-variation distance is the 99.9th percentile of the TV distance that N samples
drawn from the exact distribution itself show (Monte Carlo), plus 0.01 for llama.cpp's batched
arithmetic. The test also checks its power: a sampler that kept the drafter's token would sit
outside the bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest

from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.decoding.sampling import Dist, Warp
from specchat.core.engine import Engine
from specchat.core.types import GenerationParams

SCALE = float(os.environ.get("SPECCHAT_DIST_SCALE", "1"))  # more samples: SCALE > 1
END = -1  # a token position after the reply ended (an end-of-generation token)
REST = (-3,)  # the bin of all rare outcomes
MIN_P = 4e-3

POEM = [{"role": "user", "content": "Write a short surreal poem."}]
ECHO = [
    {
        "role": "user",
        "content": "Say it back to me, word for word: the quiet river carries paper boats "
        "past the mill, and the quiet river never stops.",
    }
]


def probs(d: Dist) -> dict[int, float]:
    if d.ids is None:
        assert d.w is not None
        w = np.asarray(d.w, dtype=np.float64)
        nz = np.flatnonzero(w > w.max() * 1e-7)
        return dict(zip(nz.tolist(), (w[nz] / w.sum()).tolist(), strict=True))
    assert d.probs is not None
    return dict(zip(d.ids.tolist(), d.probs.tolist(), strict=True))


class Rows:
    """The target's (or draft's) warped next-token distribution after prompt + prefix, from
    raw logits (the backend sampler detached), cached per prefix."""

    def __init__(self, rt: ModelRuntime, prompt: list[int], warp: Warp) -> None:
        self.rt, self.prompt, self.warp = rt, prompt, warp
        self.cache: dict[tuple[int, ...], dict[int, float]] = {}
        rt.use_sampler(None)
        rt.reset()

    def __call__(self, prefix: tuple[int, ...]) -> dict[int, float]:
        if prefix not in self.cache:
            rt = self.rt
            rt.truncate(len(self.prompt) - 1)
            if len(rt.cache) < len(self.prompt) - 1:
                rt.reset()
                rt.decode(self.prompt[:-1], logits_for="none")
            rows = rt.decode([self.prompt[-1], *prefix], logits_for="all")
            self.cache[prefix] = probs(self.warp.dist(rows[-1], []))
        return self.cache[prefix]


def exact_joint(
    rows: Callable[[tuple[int, ...]], dict[int, float]],
    length: int,
    eog: Callable[[int], bool],
    prune: float = MIN_P / 4,
) -> dict[tuple[int, ...], float]:
    """P(first `length` tokens), expanded only along prefixes likely enough to matter (the mass
    of the pruned prefixes is what the REST bin gets)."""
    out: dict[tuple[int, ...], float] = {}

    def walk(prefix: tuple[int, ...], mass: float) -> None:
        if len(prefix) == length:
            out[prefix] = out.get(prefix, 0.0) + mass
            return
        if prefix and prefix[-1] == END:
            walk(prefix + (END,), mass)
            return
        for t, p in rows(prefix).items():
            m = mass * p
            if m < prune:
                continue
            walk(prefix + ((END,) if eog(t) else (t,)), m)

    walk((), 1.0)
    return out


def draw(
    engine: Engine, prompt: list[int], params: GenerationParams, mode: str, length: int, n: int
):
    counts: dict[tuple[int, ...], int] = {}
    totals = {"drafted": 0, "accepted": 0}
    for seed in range(n):
        p = params.with_(seed=seed, max_tokens=length)
        toks: list[int] = []
        last = None
        for ev in engine.generate_tokens(prompt, p, mode):
            toks.extend(ev.token_ids)
            last = ev
        assert last is not None and toks
        totals["drafted"] += last.stats.drafted
        totals["accepted"] += last.stats.accepted
        key = tuple(toks[:length]) + (END,) * (length - len(toks))
        counts[key] = counts.get(key, 0) + 1
    return counts, totals


def binned(dist: dict, keep: set) -> dict:
    out: dict = {}
    for k, v in dist.items():
        key = k if k in keep else REST
        out[key] = out.get(key, 0.0) + v
    return out


def tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def tv_bound(exact: dict, n: int) -> float:
    """99.9th percentile of the TV distance of n samples drawn from `exact` itself."""
    p = np.array(list(exact.values()))
    p = p / p.sum()
    sims = np.random.default_rng(12345).multinomial(n, p, size=2000) / n
    return float(np.quantile(0.5 * np.abs(sims - p).sum(axis=1), 0.999))


def check(name: str, counts: dict, exact: dict, naive: dict) -> None:
    n = sum(counts.values())
    keep = {k for k, p in exact.items() if p >= MIN_P}
    exact_b = binned(exact, keep)
    exact_b[REST] = exact_b.get(REST, 0.0) + max(0.0, 1.0 - sum(exact.values()))
    empirical_b = binned({k: c / n for k, c in counts.items()}, keep)
    naive_b = binned(naive, keep)
    naive_b[REST] = naive_b.get(REST, 0.0) + max(0.0, 1.0 - sum(naive.values()))
    bound = tv_bound(exact_b, n) + 0.01
    d, d_naive = tv(exact_b, empirical_b), tv(exact_b, naive_b)
    print(
        f"\n[{name}] N={n} bins={len(exact_b)} TV={d:.4f} bound={bound:.4f} "
        f"TV(target, drafter-kept)={d_naive:.4f}"
    )
    assert d < bound, f"empirical TV {d:.4f} exceeds the sampling-noise bound {bound:.4f}"
    assert d_naive > bound, "no power: the drafter's own distribution is within the bound"


def eog_of(rt: ModelRuntime) -> Callable[[int], bool]:
    return rt.is_eog


@pytest.mark.parametrize(
    ("name", "params", "length", "n"),
    [
        ("draft, 1 token, T=1", GenerationParams(temperature=1.0, k_init=1, k_max=1), 2, 600),
        (
            "draft, 3 tokens, top-k 20, top-p 0.9, T=0.8",
            GenerationParams(temperature=0.8, top_k=20, top_p=0.9, k_init=3, k_max=3),
            4,
            400,
        ),
    ],
)
def test_draft_model_sampling_matches_the_target(
    engine: Engine, name: str, params: GenerationParams, length: int, n: int
) -> None:
    n = int(n * SCALE)
    params = params.with_(p_min=0.0)
    prompt = engine.prompt_tokens(POEM)
    engine.reset_caches()
    counts, totals = draw(engine, prompt, params, "draft", length, n)
    assert totals["drafted"] >= 0.45 * n * (length - 1), "the draft model barely drafted"
    assert totals["drafted"] - totals["accepted"] >= 30, "too few rejections to test residuals"
    t, d = engine.target, engine.draft
    assert d is not None
    horizon = min(length, 3)  # the exact joint over 3 tokens; a 4th only extends the run
    exact = exact_joint(Rows(t, prompt, Warp(params, t.n_vocab)), horizon, eog_of(t))
    # what a broken sampler that kept the draft's tokens would give: token 1 from the target's
    # prefill, the rest from the draft model's (top-10, like the engine's q) distribution
    target_rows = Rows(t, prompt, Warp(params, t.n_vocab))
    q_params = params.with_(top_k=min(params.top_k or 10, 10), top_p=1.0)
    draft_rows = Rows(d, prompt, Warp(q_params, d.n_vocab))
    naive = exact_joint(
        lambda pre: target_rows(pre) if not pre else draft_rows(pre), horizon, eog_of(t)
    )
    short = {k[:horizon]: 0 for k in counts}
    for k, c in counts.items():
        short[k[:horizon]] += c
    engine.reset_caches()
    check(name, short, exact, naive)


def test_prompt_lookup_sampling_matches_the_target(engine: Engine) -> None:
    n = int(500 * SCALE)
    params = GenerationParams(temperature=1.0, lookup_min_match=1, k_max=2, k_init=2)
    prompt = engine.prompt_tokens(ECHO)
    engine.reset_caches()
    counts, totals = draw(engine, prompt, params, "lookup", 2, n)
    assert totals["drafted"] >= 0.5 * n, "lookup barely drafted"
    assert totals["drafted"] - totals["accepted"] >= 20, "too few rejections to test residuals"
    t = engine.target
    rows = Rows(t, prompt, Warp(params, t.n_vocab))
    exact = exact_joint(rows, 2, eog_of(t))
    # a sampler that kept lookup's token: the second token is what followed the first in the
    # prompt (when the first occurs there), whatever the target thinks
    after = {a: b for a, b in zip(prompt[:-1], prompt[1:], strict=False)}
    naive: dict[tuple[int, ...], float] = {}
    for (t1, t2), p in exact.items():
        key = (t1, after.get(t1, t2))
        naive[key] = naive.get(key, 0.0) + p
    engine.reset_caches()
    check("lookup, T=1", counts, exact, naive)
