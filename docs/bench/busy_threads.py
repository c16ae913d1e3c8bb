"""Replies beside a program that keeps CPUs busy: the engine fitting its threads to what is
free (`Engine.fit_threads`, the default) against always the threads it loaded with, in turn, on
the same prompts; and the same two on a quiet machine, where fitting must cost nothing.

    .venv/bin/python docs/bench/busy_threads.py [ROUNDS]   # 2 rounds, default pair, T = 0

The busy program is one Python busy loop per CPU the decode threads would have to share
(logical CPUs - threads + 1: one loop on a 2-core machine). Each reply waits 1 s after the
previous one (both sides), so what runs beside it is what the engine sees, and starts from
cold caches (the draft model's catch-up on the prompt falls in the decode phase: a reply after
another on the same prompt would start warm). Printed: tok/s of
each side (geometric mean over prompts and rounds), the threads the replies used at the fewest,
and the ratio fitted / as loaded, with the quiet machine's tok/s beside it (the ceiling a busy
machine cannot pass). docs/benchmarks.md, "A busy core", has the figures.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import psutil

from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams
from specchat.core.store.local_models import default_pair_paths
from specchat.core.types import Mode

PROMPTS = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in three sentences what a hash map is.",
)
MODES = (Mode.OFF, Mode.DRAFT, Mode.LOOKUP)
TOKENS = 48
LOOP = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"


def reply(engine: Engine, prompt: str, mode: Mode, fit: bool) -> tuple[float, int]:
    engine.fit_threads = fit
    if not fit:
        for rt in (engine.target, engine.draft):
            if rt is not None:
                rt.use_threads(rt.n_threads)
    engine.reset_caches()  # each reply from cold caches: neither side inherits the other's
    time.sleep(1.0)
    params = GenerationParams(max_tokens=TOKENS, temperature=0.0)
    events = list(engine.generate([{"role": "user", "content": prompt}], params, mode))
    st = events[-1].stats
    return st.tokens_per_s, st.threads


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs and min(xs) > 0 else 0.0


def main(rounds: int) -> None:
    target, draft = default_pair_paths()
    engine = Engine(target, draft)
    wanted = engine.target.n_threads
    cpus = psutil.cpu_count() or 1
    loops = max(1, cpus - wanted + 1)
    print(f"{cpus} logical CPUs, {wanted} threads as loaded; busy: {loops} busy loop(s)")
    for situation in ("quiet", "busy"):
        procs = []
        if situation == "busy":
            procs = [subprocess.Popen([sys.executable, "-c", LOOP]) for _ in range(loops)]
        try:
            speeds: dict[tuple[Mode, bool], list[float]] = {}
            fewest: dict[tuple[Mode, bool], int] = {}
            for _ in range(rounds):
                for prompt in PROMPTS:
                    for mode in MODES:
                        for fit in (True, False):
                            tps, threads = reply(engine, prompt, mode, fit)
                            speeds.setdefault((mode, fit), []).append(tps)
                            fewest[mode, fit] = min(fewest.get((mode, fit), threads), threads)
            for mode in MODES:
                on, off = geomean(speeds[mode, True]), geomean(speeds[mode, False])
                print(
                    f"{situation:5s} {mode.value:6s} fitted {on:5.1f} tok/s "
                    f"({fewest[mode, True]} threads at the fewest) | as loaded {off:5.1f} tok/s "
                    f"({fewest[mode, False]}) | fitted / as loaded {on / off:4.2f}x",
                    flush=True,
                )
        finally:
            for p in procs:
                p.kill()
                p.wait()
    engine.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
