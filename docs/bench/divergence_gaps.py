"""Why a bench report's greedy texts part from off's: off's own top-2 gap at each first divergence.

    .venv/bin/python docs/bench/divergence_gaps.py docs/bench/cpu-xeon-modes.json

For every prompt where a mode's text is not off's, off is decoded again alone (greedy; the
report's target, suite, prompt, token limit, context, threads and GPU layers; caches emptied
first: how a prompt's prefill is split into batches also moves the last bits of a logit) with its
top-2 recorded, its text checked against the report's off text, and the two best logits at the
first divergence printed. A gap of a few hundredths of a logit is a near-tie that batched
verification rounds the other way (docs/benchmarks.md); how far a batch moves the margin on a
backend is what docs/bench/batch_drift.py measures, and a gap beyond that would be a bug.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from specchat.core.bench.runner import BenchSettings, prepare
from specchat.core.bench.suite import load_suite
from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.store.local_models import default_pair_paths


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        report = json.load(f)
    parted = [
        (r["id"], r["mode"], r["first_divergence"])
        for r in report["records"]
        if r["mode"] != "off" and r.get("identical_to_off") is False
    ]
    s = report["settings"]
    target = Path(report["models"]["target"]["path"])
    if not target.is_file():  # a report from another machine: this one's default target
        target, _ = default_pair_paths()
    config = RuntimeConfig(
        n_ctx=s.get("ctx") or 4096,
        n_threads=s.get("threads") or 2,
        n_gpu_layers=s.get("target_gpu_layers") or 0,
    )
    engine = Engine(target, None, target_config=config)
    limit = s.get("max_tokens") or 64
    settings = BenchSettings(repeats=1, max_tokens=limit)
    params = replace(settings.params, max_tokens=limit, record_top2=True)
    prompts = {p.id: p for p in load_suite(s.get("suite")).prompts}
    for pid in sorted({p for p, _, _ in parted}):
        engine.reset_caches()
        prepared = prepare(engine, prompts[pid], settings)
        top2, text = [], ""
        for ev in engine.generate_tokens(prepared.tokens, params, "off"):
            top2 += ev.top2
            text += ev.text
        off_text = next(
            r["text"] for r in report["records"] if r["id"] == pid and r["mode"] == "off"
        )
        print(f"{pid}: off's text as in the report: {text == off_text}")
        for _, mode, at in (p for p in parted if p[0] == pid):
            if at is None or at >= len(top2):
                print(f"  {mode}: parts at token {at} (past off's reply)")
                continue
            t = top2[at]
            first, second = engine.target.piece(t.first_id), engine.target.piece(t.second_id)
            print(
                f"  {mode}: parts at token {at}; off's top-2 gap there {t.gap:.3f} logits "
                f"({first!r} vs {second!r})"
            )


if __name__ == "__main__":
    main()
