"""What a verification pass costs at a real context, and how much of it is every row's logits.

    .venv/bin/python docs/bench/verify_rows.py [--target GGUF] [--context 300[,1024,...]]
        [--repeats 5] [--every-row-only]

Decodes `--context` tokens of text into the target, then measures the cost curve after them
with SpecChat's own measurement (`pricing.cost_curve.measure_cost_curve`: each n-token decode
paired with a one-token decode just before it) twice: with every row's token chosen in
llama.cpp's graph (greedy, as SpecChat verifies at T = 0), and with the last row's only
(`--every-row-only`: the first alone). Several contexts, comma-separated, are measured one
after the other. Printed per context: the one-token decode and a decode of 9, 17, 33 and 65
tokens in one-token decodes (docs/benchmarks.md, "The ceiling" and "Peers").
"""

from __future__ import annotations

import argparse

from specchat.core.decoding.pricing.cost_curve import GREEDY_CHAIN, measure_cost_curve
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.store.local_models import default_pair_paths

TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps by the door. "
SIZES = (9, 17, 33, 65)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", help="GGUF file (default: the default pair's target)")
    ap.add_argument(
        "--context", default="300", help="tokens decoded before the batches (comma-separated)"
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--every-row-only", action="store_true")
    args = ap.parse_args()
    contexts = sorted({int(c) for c in args.context.split(",")})
    n_ctx = max(4096, contexts[-1] + max(SIZES) + 8)
    rt = ModelRuntime(args.target or default_pair_paths()[0], RuntimeConfig(n_ctx=n_ctx))
    text = rt.tokenize(TEXT * (contexts[-1] // 8 + 1), add_special=False)
    print("context  one token  rows      " + "  ".join(f"{n:>5d}" for n in SIZES))
    for context in contexts:
        rt.reset()
        rt.decode(text[:context], logits_for="none")
        for rows in ("all",) if args.every_row_only else ("all", "last"):
            c = measure_cost_curve(rt, SIZES, args.repeats, rows=rows, sampler=GREEDY_CHAIN)
            ms = (c.t1_s or 0.0) * 1000
            figures = "  ".join(f"{c.rel(n):5.2f}" for n in SIZES)
            print(f"{len(rt.cache):7d}  {ms:6.1f} ms  {rows:8s}  {figures}", flush=True)
    rt.close()


if __name__ == "__main__":
    main()
