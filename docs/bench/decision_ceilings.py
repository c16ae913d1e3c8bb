"""Auto's drafting decisions judged by their ceiling alone: Auto over the suite on one engine,
each reply priced by the ceiling of its own target passes on one fixed cost curve (the speedup
those passes allow with drafting and host work free, docs/benchmarks.md "The ceiling"). No off
runs and no wall times: the decisions' worth without the machine's noise, a few minutes a pass.

    .venv/bin/python docs/bench/decision_ceilings.py [PASSES] [CURVE_JSON] [PROMPT_IDS]

PASSES (default 2) passes over the suite, in order, on one engine (the estimates learned on a
prompt carry to the next, as in a bench run). CURVE_JSON: a curve saved by an earlier run of this
script (`{"points": [[n, rel], ...], "t1_ms": ...}`), so that two versions of the rules are priced
on the same curve; missing, the curve is measured and written there. PROMPT_IDS: a comma-separated
subset (default: the whole default suite). Prints every reply's ceiling, tokens drafted and kept,
and the geometric mean over all replies.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from specchat.core.bench.ceilings import pooled_ceiling
from specchat.core.bench.runner import BenchSettings, EngineVariant, prepare
from specchat.core.bench.suite import load_suite
from specchat.core.decoding.cost_curve import CostCurve
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.store.local_models import default_pair_paths
from specchat.core.types import GenerationParams

MAX_TOKENS = 64


def load_or_measure(engine: Engine, path: Path) -> CostCurve:
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        points = tuple((int(n), float(c)) for n, c in saved["points"])
        return CostCurve(points, t1_s=saved["t1_ms"] / 1000 if saved.get("t1_ms") else None)
    curve = engine.measure_cost_curve(k_max=16)
    path.write_text(json.dumps(curve.as_dict()), encoding="utf-8")
    return curve


def main() -> None:
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    curve_path = Path(sys.argv[2] if len(sys.argv) > 2 else "decision-curve.json")
    target, draft = default_pair_paths()
    config = RuntimeConfig(n_threads=2)
    engine = Engine(target, draft, target_config=config, draft_config=config)
    curve = load_or_measure(engine, curve_path)
    print(curve.describe())
    engine.use_cost_curve(curve)
    suite = load_suite(None)
    if len(sys.argv) > 3:
        suite = suite.select(sys.argv[3].split(","))
    settings = BenchSettings(1, MAX_TOKENS, GenerationParams()).validate()
    prepared = [(p, prepare(engine, p, settings)) for p in suite.prompts]
    auto = EngineVariant(engine, "auto")  # the bench's own run: cold caches, the history
    params = GenerationParams(max_tokens=MAX_TOKENS)
    rows: dict[str, list[tuple[float, int, int]]] = {}
    for _ in range(passes):
        for prompt, pp in prepared:
            r = auto.run(pp, params)
            c = pooled_ceiling([r], curve)
            rows.setdefault(prompt.id, []).append((c or 0.0, r.drafted or 0, r.accepted or 0))
    everything = [c for runs in rows.values() for c, _, _ in runs if c > 0]
    for pid, runs in rows.items():
        cells = " ".join(f"{c:.3f}" for c, _, _ in runs)
        kept = " ".join(f"{d}/{a}" for _, d, a in runs)
        print(f"{pid:24s} {cells}  drafted/kept {kept}")
    mean = math.exp(sum(map(math.log, everything)) / len(everything))
    print(
        f"geometric mean {mean:.3f}, lowest {min(everything):.3f}, below 0.98: "
        f"{sum(c < 0.98 for c in everything)} of {len(everything)}"
    )


if __name__ == "__main__":
    main()
