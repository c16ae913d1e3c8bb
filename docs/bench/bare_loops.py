"""The barest greedy loops beside SpecChat's own, on the same prompts, in turn: what the host's
work per token (wall time outside `llama_decode`, after the first token) cannot go below here.

- bare off: decode one token, read the token llama.cpp chose in its graph, decode it (the bench's
  host floor, run on each prompt's text);
- bare draft: the draft model drafts k tokens the same way (its own greedy chain, one token read
  per decode, no confidence test), the target verifies them in one batch and the loop reads its
  k + 1 chosen tokens, keeps the agreeing prefix and rolls both caches back; k adapts as the
  draft model's own rule does (one past the running mean of kept tokens, 1..k_max);
- SpecChat's off and draft modes, T = 0, as the bench's host table times them.

    .venv/bin/python docs/bench/bare_loops.py [ROUNDS]   # 2 rounds of the host table's 6 prompts

Each line gives the host ms a token and τ (tokens per target pass) of the draft loops, so a
reader can check the bare draft loop drafted about as SpecChat did (docs/benchmarks.md, "The
barest loops").
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from specchat.core.bench.runner import BenchSettings, prepare
from specchat.core.bench.suite import load_suite
from specchat.core.decoding.backend_sampler import GREEDY, SamplerSpec
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.store.local_models import default_pair_paths
from specchat.core.types import GenerationParams

PROMPTS = (
    "code-lru-cache,edit-rename,quote-paragraph,chat-threads,conv-edit-twice,conv-summary-cite"
)
TOKENS = 64
CHAIN = SamplerSpec(GREEDY)


def start(rt: ModelRuntime, prompt: tuple[int, ...]) -> int:
    """An empty cache, the prompt decoded, the token llama.cpp chose after it."""
    rt.use_sampler(CHAIN)
    rt.reset()
    rt.decode(list(prompt), logits_for="last")
    return rt.sampler.token(-1)


def bare_off(rt: ModelRuntime, prompt: tuple[int, ...]) -> float:
    token = start(rt, prompt)
    llama0, t0 = rt.llama_s, time.perf_counter()
    for _ in range(TOKENS - 1):
        rt.decode([token], logits_for="last")
        token = rt.sampler.token(0)
    return (time.perf_counter() - t0 - (rt.llama_s - llama0)) / (TOKENS - 1)


def bare_draft(
    target: ModelRuntime, draft: ModelRuntime, prompt: tuple[int, ...], p: GenerationParams
) -> tuple[float, float]:
    """(host seconds a token, tokens per target pass)."""
    ctx = [*prompt, start(target, prompt)]
    start(draft, prompt)
    llama0, t0 = target.llama_s + draft.llama_s, time.perf_counter()
    made, passes, k, ema = 1, 0, p.k_init, float(p.k_init)
    while made < TOKENS:
        n = min(k, TOKENS - made)
        draft.decode(ctx[len(draft.cache) :], logits_for="last")  # the tokens it has not seen
        drafted = [draft.sampler.token(-1)]
        for _ in range(n - 1):
            draft.decode([drafted[-1]], logits_for="last")
            drafted.append(draft.sampler.token(0))
        base = len(ctx)
        target.decode([ctx[-1], *drafted], logits_for="all")
        m = 0
        while m < n and target.sampler.token(m) == drafted[m]:
            m += 1
        ctx += [*drafted[:m], target.sampler.token(m)]
        made, passes = made + m + 1, passes + 1
        target.truncate(base + m)
        draft.truncate(min(len(draft.cache), base + m))
        ema = 0.7 * ema + 0.3 * m
        k = max(1, min(p.k_max, math.ceil(ema) + 1))
    host = time.perf_counter() - t0 - (target.llama_s + draft.llama_s - llama0)
    return host / (made - 1), (made - 1) / passes


def specchat(engine: Engine, prompt: tuple[int, ...], mode: str) -> tuple[float, float]:
    engine.reset_caches()
    params = GenerationParams(max_tokens=TOKENS, temperature=0.0)
    for event in engine.generate_tokens(prompt, params, mode):
        stats = event.stats
    host = stats.decode_host_ms_per_token or 0.0
    return host / 1000.0, (stats.tokens - 1) / max(stats.target_steps, 1)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    target_path, draft_path = default_pair_paths()
    config = RuntimeConfig(n_ctx=4096, n_threads=2)
    engine = Engine(target_path, draft_path, target_config=config, draft_config=config)
    target, draft = engine.target, engine.draft
    assert draft is not None
    suite = load_suite().select(PROMPTS.split(","))
    settings = BenchSettings(repeats=1, max_tokens=TOKENS)
    p = GenerationParams()
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        for prompt in suite.prompts:
            tokens = prepare(engine, prompt, settings).tokens
            row = {"bare off": (bare_off(target, tokens), 1.0)}
            row["off"] = specchat(engine, tokens, "off")
            row["bare draft"] = bare_draft(target, draft, tokens, p)
            row["draft"] = specchat(engine, tokens, "draft")
            for name, (host, _) in row.items():
                figures.setdefault(name, []).append(host)
            cells = "  ".join(f"{n} {h * 1e3:.3f} ms (τ {tau:.2f})" for n, (h, tau) in row.items())
            print(f"{prompt.id:18s} {cells}", flush=True)
    medians = "  ".join(f"{n} {statistics.median(v) * 1e3:.3f}" for n, v in figures.items())
    print(f"median ms a token: {medians}")


if __name__ == "__main__":
    main()
