"""Lookup's and Auto's drafting replayed on recorded greedy replies, priced on a measured curve.

    .venv/bin/python docs/bench/replay_drafting.py REPORT.json [REPORT.json ...]
        [--modes lookup,auto] [--curve REPORT.json] [--order given|reversed|fresh] [--drafts]

Each report is a `specchat-cli bench --json` file: its off runs' replies (re-tokenized) are
what the target "says", and its `cost_curve` what a verification of n tokens costs. SpecChat's
own `DraftStep`, `NgramDrafter` and `CostModel` (timing fixed with `steady`, so the choices
depend on the text and the curve alone) draft each reply; a draft is judged against the
reply, as a greedy target would judge it. Printed per prompt and mode: τ (tokens per target
pass) and the modeled speedup, tokens / the passes' cost in one-token decodes on the curve
(target time only: no host work, no noise). One cost model serves every prompt in the order
given, as one engine does in a bench run (`--order fresh`: a new one per prompt), so a policy
is best judged over several orders and curves (docs/benchmarks.md, "Why Auto drafts what
it drafts").
Re-tokenizing a reply can differ from the tokens decoded by a token here and there.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Sequence

from specchat.core.bench.runner import DEFAULT_MAX_TOKENS
from specchat.core.bench.suite import BenchPrompt, load_suite
from specchat.core.decoding.choosing.backend_sampler import ROWS_MAX
from specchat.core.decoding.draft_step import DraftStep
from specchat.core.decoding.drafters.history_index import HistoryIndex
from specchat.core.decoding.drafters.ngram import NgramDrafter
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.cost_model import CostModel
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams
from specchat.core.store.local_models import default_pair_paths
from specchat.core.types import GenerationStats, Mode


def curve_of(report: dict) -> CostCurve:
    c = report["cost_curve"]
    return CostCurve(tuple((int(n), float(r)) for n, r in c["points"]), t1_s=c["t1_ms"] / 1000)


def replay(
    engine: Engine,
    mode: Mode,
    prompt: BenchPrompt,
    reply: list[int],
    curve: CostCurve,
    cost: CostModel,
) -> tuple[float, float, list[tuple[int, int, int]]]:
    """τ, modeled speedup and (position, drafted, kept) per verification of one reply."""
    t = engine.target
    history = HistoryIndex()
    docs = [t.tokenize(x, add_special=False, parse_special=False) for x in prompt.history]
    if docs:
        history.add(docs)
        history.finish()
    prompt_ids = engine.prompt_tokens(prompt.messages())
    ctx = list(prompt_ids)
    stats = GenerationStats(mode=mode.value, prompt_tokens=len(ctx))
    lookup = NgramDrafter(history=history)
    step = DraftStep(GenerationParams(temperature=0.0), cost, stats, ctx)
    step.prepare(mode, [lookup], t.n_vocab, random.Random(0), frozenset(t.eog), t.ends_paragraph)
    lookup.begin(prompt_ids)
    ctx.append(reply[0])  # the first token comes from the prefill
    stats.tokens, units, passes, drafts = 1, 0.0, 0, []
    most = prompt.max_tokens or DEFAULT_MAX_TOKENS
    while (pos := len(ctx) - len(prompt_ids)) < len(reply):
        # (the decoder's limit: it does not know where the reply ends)
        drafter, sent, classes = step.choose(min(ROWS_MAX - 1, most - pos))
        k, base = len(sent.tokens), len(ctx)
        if drafter is not None and k:
            kept = 0
            while kept < k and pos + kept < len(reply) and sent.tokens[kept] == reply[pos + kept]:
                kept += 1
            cost.observe_accept(drafter.kind, classes, k, kept)
            offer = step.offer
            drafter.feedback(offer[1] if offer and offer[0] is drafter else sent, k, kept)
            new = reply[pos : pos + kept + 1]
            step.verified(drafter, k, kept, len(new))
            units += curve.rel(k + 1)
            drafts.append((pos, k, kept))
        else:
            new = reply[pos : pos + 1]
            step.plain()
            units += 1.0
        ctx.extend(new)
        stats.tokens += len(new)
        passes += 1
        step.judge_unsent(drafter if k else None, base)
    return len(reply) / max(passes, 1), len(reply) / max(units, 1.0), drafts


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+", help="bench --json reports with off runs")
    ap.add_argument("--modes", default="lookup,auto")
    ap.add_argument("--curve", help="price every reply on this report's curve")
    ap.add_argument("--order", choices=("given", "reversed", "fresh"), default="given")
    ap.add_argument("--drafts", action="store_true", help="print (position, drafted, kept)")
    args = ap.parse_args(argv)
    prompts = {p.id: p for name in (None, "heldout") for p in load_suite(name).prompts}
    engine = Engine(default_pair_paths()[0])
    t = engine.target
    end = min(t.eog)
    cases = []
    for path in args.reports:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        curve = curve_of(report)
        for r in report["records"]:
            if r["mode"] == "off" and r["id"] in prompts:
                ids = t.tokenize(r["text"], add_special=False, parse_special=False) + [end]
                cases.append((prompts[r["id"]], ids, curve))
    if args.curve:
        with open(args.curve, encoding="utf-8") as f:
            one = curve_of(json.load(f))
        cases = [(p, ids, one) for p, ids, _ in cases]
    if args.order == "reversed":
        cases.reverse()
    for name in args.modes.split(","):
        mode, cost, speedups = Mode.parse(name), None, []
        for prompt, ids, curve in cases:
            if cost is None or args.order == "fresh":
                cost = CostModel(curve=curve).steady(t1=curve.t1_s or 0.05, host=0.0)
            tau, speedup, drafts = replay(engine, mode, prompt, ids, curve, cost)
            speedups.append(speedup)
            print(f"{name:7s} {prompt.id:22s} {len(ids):4d} tokens  τ {tau:5.2f}  {speedup:.2f}x")
            if args.drafts:
                print("       ", drafts)
        mean = math.exp(sum(map(math.log, speedups)) / len(speedups))
        print(f"{name}: geometric mean {mean:.3f}x, lowest {min(speedups):.3f}x")
    engine.close()


if __name__ == "__main__":
    main()
