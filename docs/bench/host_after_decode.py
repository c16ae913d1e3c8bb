"""What a decode costs the host's next steps: off mode's host time per token (wall time outside
`llama_decode`, after the first token) with the real decode, and with the decode replaced, after
the first plain step, by work of about the same length that leaves the caches alone (a busy
wait) or streams memory through them as the weights do (a sum over a 256 MB array). The same
Python runs in all three; only what the caches hold when it runs differs (docs/benchmarks.md,
"What the decode costs the host").

    .venv/bin/python docs/bench/host_after_decode.py [PROMPT_ID] [REPEATS]   # code-lru-cache, 6

The replaced decodes compute nothing: the reply repeats the last real token, so only off mode
(no drafter to draft from the repetition) is timed.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from dataclasses import replace

import numpy as np

from specchat.core.bench.runner import BenchSettings, prepare
from specchat.core.bench.suite import load_suite
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.store.local_models import default_pair_paths

BUSY_S = 0.030  # about one decode of the 1.5B target on a 2-core CPU
STREAMED = np.ones(64 * 1024 * 1024, dtype=np.float32)  # 256 MB


def main() -> None:
    prompt_id = sys.argv[1] if len(sys.argv) > 1 else "code-lru-cache"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    target, _ = default_pair_paths()
    engine = Engine(target, None, target_config=RuntimeConfig(n_ctx=4096, n_threads=2))
    settings = BenchSettings(repeats=1, max_tokens=64)
    prompt = {p.id: p for p in load_suite().prompts}[prompt_id]
    prepared = prepare(engine, prompt, settings)
    params = replace(settings.params, max_tokens=64, seed=1)
    rt = engine.target
    real = rt._llama_decode
    calls = [0]

    def replaced(work):  # the first call decodes for real: it maps the output row read next
        def decode(ctx, batch):
            calls[0] += 1
            if calls[0] == 1:
                return real(ctx, batch)
            work()
            return 0

        return decode

    def busy() -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < BUSY_S:
            pass

    arms = {
        "real decode": real,
        "busy wait": replaced(busy),
        "256 MB streamed": replaced(STREAMED.sum),
    }
    gc.collect()
    gc.freeze()
    figures: dict[str, list[float]] = {name: [] for name in arms}
    for rep in range(repeats + 1):  # the first round warms up
        for name, decode in arms.items():
            engine.reset_caches()
            rt._llama_decode = real
            it = engine.generate_tokens(prepared.tokens, params, "off")
            first = next(it)
            calls[0] = 0
            rt._llama_decode = decode
            llama0, t0, n0 = rt.llama_s, time.perf_counter(), first.stats.tokens
            last = first
            for last in it:  # noqa: B007 (the last event's stats are read below)
                pass
            wall, llama = time.perf_counter() - t0, rt.llama_s - llama0
            rt._llama_decode = real
            if rep:
                figures[name].append((wall - llama) / (last.stats.tokens - n0) * 1000)
    for name, values in figures.items():
        runs = " ".join(f"{v:.3f}" for v in values)
        print(f"{name:16s} host ms/token median {statistics.median(values):.3f}  ({runs})")


if __name__ == "__main__":
    main()
