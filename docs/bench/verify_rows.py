"""What a verification pass costs, and how much of it is the logits of every row.

    .venv/bin/python docs/bench/verify_rows.py [--target GGUF] [--context 300] [--repeats 5]

Prefills `--context` tokens of text into the target, then times decodes of 1, 9, 17, 33 and 65
tokens after it (each cut back before the next), every row's token chosen in llama.cpp's graph
(greedy, as SpecChat verifies at T = 0), and a 65-token decode with the last row's logits only.
Printed: medians in ms and in one-token decodes (docs/benchmarks.md, "Peers").
"""

from __future__ import annotations

import argparse
import statistics
import time

from specchat.core.decoding.choosing.backend_sampler import GREEDY, SamplerSpec
from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.store.local_models import default_pair_paths

TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps by the door. "


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", help="GGUF file (default: the default pair's target)")
    ap.add_argument("--context", type=int, default=300, help="tokens decoded before the batches")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rt = ModelRuntime(args.target or default_pair_paths()[0])
    text = rt.tokenize(TEXT * (args.context // 8 + 80), add_special=False)
    base, batch = text[: args.context], text[args.context : args.context + 65]
    rt.decode(base, logits_for="last")
    rt.use_sampler(SamplerSpec(GREEDY))

    def timed(k: int, rows: str, repeats: int) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            rt.decode(batch[:k], logits_for=rows)
            times.append(time.perf_counter() - t0)
            rt.truncate(len(base))
        return statistics.median(times) * 1000

    one = timed(1, "last", 3 * args.repeats)
    print(f"context {len(base)} tokens; one token: {one:.1f} ms")
    for k in (9, 17, 33, 65):
        ms = timed(k, "all", args.repeats)
        print(f"{k:3d} tokens, every row chosen: {ms:7.0f} ms = {ms / one:5.2f} one-token decodes")
    ms = timed(65, "last", args.repeats)
    print(f" 65 tokens, last row only:     {ms:7.0f} ms = {ms / one:5.2f} one-token decodes")
    rt.close()


if __name__ == "__main__":
    main()
