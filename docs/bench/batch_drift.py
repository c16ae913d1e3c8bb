"""How far a verification batch's logits lie from one-token decoding's, on this build's backend.

    .venv/bin/python docs/bench/batch_drift.py [--target GGUF] [--gpu-layers N] [--threads N]
        [--prompts id,id] [--tokens 128] [--sizes 2,5,17,65]

For each prompt of the default suite: off's greedy reply, then that reply's logits computed from
the same prefill (a) one token at a time, as plain decoding does, (b) one token at a time again
(is the backend deterministic?), and (c) in consecutive batches of n tokens with every row's
logits, as a verification pass computes them. Printed per n: how far the margin between (a)'s two
best tokens moves (largest and median over positions), how many positions' argmax differs from
(a)'s, and (a)'s top-2 gap at those positions.
A greedy speculative reply that parts from off's at a position whose gap is below what (c)
moves the logits by is the backend's arithmetic, not the engine's (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from specchat.core.bench.runner import BenchSettings, prepare
from specchat.core.bench.suite import load_suite
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.store.local_models import default_pair_paths


def one_at_a_time(t, prompt: list[int], reply: list[int]) -> np.ndarray:
    t.reset()
    rows = [t.decode(prompt, logits_for="last")[0].copy()]
    for tok in reply[:-1]:
        rows.append(t.decode([tok], logits_for="last")[0].copy())
    return np.stack(rows)


def in_batches(t, prompt: list[int], reply: list[int], n: int) -> np.ndarray:
    t.reset()
    rows = [t.decode(prompt, logits_for="last")[0].copy()]
    inputs = reply[:-1]
    for at in range(0, len(inputs), n):
        chunk = inputs[at : at + n]
        got = t.decode(chunk, logits_for="all") if len(chunk) > 1 else t.decode(chunk)
        rows.extend(r.copy() for r in got)
    return np.stack(rows)


def compare(ref: np.ndarray, other: np.ndarray) -> str:
    """How much `other` moves the margin between `ref`'s two best tokens (what decides a greedy
    choice; a shift of the whole row changes nothing), and where the argmax differs."""
    pos = np.arange(len(ref))
    order = np.argsort(ref, axis=1)
    a, b = order[:, -1], order[:, -2]
    gap = ref[pos, a] - ref[pos, b]
    moved = np.abs((other[pos, a] - other[pos, b]) - gap)
    flips = np.nonzero(ref.argmax(axis=1) != other.argmax(axis=1))[0]
    gap_text = ", ".join(f"{g:.3f}" for g in gap[flips][:8]) if len(flips) else "-"
    return (
        f"top-2 margin moved by at most {moved.max():.3f} (median {np.median(moved):.3f}); "
        f"argmax differs at {len(flips)}/{len(ref)} (off's top-2 gap there: {gap_text})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=Path)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompts", default="edit-docstring,quote-paragraph,chat-threads")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--sizes", default="2,5,17,65")
    a = ap.parse_args()
    target = a.target or default_pair_paths()[0]
    config = RuntimeConfig(n_ctx=4096, n_threads=a.threads, n_gpu_layers=a.gpu_layers)
    engine = Engine(target, None, target_config=config)
    t = engine.target
    t.use_sampler(None)  # raw logits in every row
    settings = BenchSettings(repeats=1, max_tokens=a.tokens)
    params = replace(settings.params, max_tokens=a.tokens)
    suite = {p.id: p for p in load_suite().prompts}
    print(f"target {target.name}, GPU layers {a.gpu_layers}, {a.tokens} tokens a reply")
    for pid in a.prompts.split(","):
        engine.reset_caches()
        prepared = prepare(engine, suite[pid], settings)
        events = engine.generate_tokens(prepared.tokens, params, "off")
        reply = [i for ev in events for i in ev.token_ids]
        t.use_sampler(None)
        prompt = list(prepared.tokens)
        ref = one_at_a_time(t, prompt, reply)
        print(f"{pid} ({len(prompt)} prompt tokens, {len(reply)} reply tokens)")
        print(f"  one at a time again: {compare(ref, one_at_a_time(t, prompt, reply))}")
        for n in (int(s) for s in a.sizes.split(",")):
            print(f"  batches of {n}: {compare(ref, in_batches(t, prompt, reply, n))}")


if __name__ == "__main__":
    main()
