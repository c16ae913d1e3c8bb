"""What a verification pass costs at a real context, and how much of it is every row's logits.

    .venv/bin/python docs/bench/verify_rows.py [--target GGUF] [--context 300] [--repeats 5]

Decodes `--context` tokens of text into the target, then measures the cost curve after them
with SpecChat's own measurement (`pricing.cost_curve.measure_cost_curve`: each n-token decode
paired with a one-token decode just before it) twice: with every row's token chosen in
llama.cpp's graph (greedy, as SpecChat verifies at T = 0), and with the last row's only.
Printed: a decode of 9, 17, 33 and 65 tokens in one-token decodes, both ways
(docs/benchmarks.md, "Peers").
"""

from __future__ import annotations

import argparse

from specchat.core.decoding.pricing.cost_curve import GREEDY_CHAIN, measure_cost_curve
from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.store.local_models import default_pair_paths

TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps by the door. "
SIZES = (9, 17, 33, 65)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", help="GGUF file (default: the default pair's target)")
    ap.add_argument("--context", type=int, default=300, help="tokens decoded before the batches")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rt = ModelRuntime(args.target or default_pair_paths()[0])
    text = rt.tokenize(TEXT * (args.context // 8 + 1), add_special=False)
    rt.decode(text[: args.context], logits_for="none")
    every = measure_cost_curve(rt, SIZES, args.repeats, rows="all", sampler=GREEDY_CHAIN)
    last = measure_cost_curve(rt, SIZES, args.repeats, rows="last", sampler=GREEDY_CHAIN)
    print(f"context {len(rt.cache)} tokens; one token {(every.t1_s or 0.0) * 1000:.1f} ms")
    print("tokens  every row chosen  last row only  (one-token decodes)")
    for n in SIZES:
        print(f"{n:6d}  {every.rel(n):16.2f}  {last.rel(n):13.2f}")
    rt.close()


if __name__ == "__main__":
    main()
