"""Benchmark statistics and reports (pure functions over the runs of a `BenchRun`; no Qt).

Definitions (also written into every JSON report):

- tokens/s: decode speed after the first token, ``(tokens - 1) / (last token - first token)``.
- end-to-end tokens/s: ``tokens / (request start -> last token)``, prefill included.
- speedup vs off: the **median of the per-pair ratios** ``tok/s(variant) / tok/s(off)``, each pair
  measured side by side. The ratio of the two medians is reported too; with a quiet machine the
  two agree, and when they do not, the paired figure is the one less affected by drift.
- TTFT ratio vs off: median of per-pair ``ttft(variant) / ttft(off)`` (below 1 is faster).
- Overall figures per variant: geometric means over prompts (and over the prompts of one kind).
- Acceptance rate: accepted / drafted, pooled over all runs; mean accepted length: 1 + accepted /
  verification passes, pooled.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from specchat.core.bench import ceilings, reference
from specchat.core.bench.host_overhead import host_overhead
from specchat.core.bench.machine import machine_info
from specchat.core.bench.runner import REFERENCE, BenchRun, RunResult
from specchat.core.bench.stats import geomean, median, ratio
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.engines.local import Engine
from specchat.core.machine.busy import BUSY_SHARE
from specchat.core.types import acceptance_rate, mean_accepted_length

SCHEMA_VERSION = 1

DEFINITIONS = {
    "tokens_per_s": "decode speed after the first token: (tokens - 1) / (last - first token)",
    "e2e_tokens_per_s": "tokens / (request start -> last token), prefill included",
    "speedup_vs_off": "median over repeats of the per-pair ratio tokens_per_s / off's, "
    "where each pair ran side by side (off, variant)",
    "speedup_vs_off_ratio_of_medians": "median tokens_per_s / median tokens_per_s of the "
    "paired off runs",
    "e2e_speedup_vs_off": "median of per-pair ratios of e2e_tokens_per_s",
    "ttft_s": "median time from request start to the first token (cold caches)",
    "ttft_ratio_vs_off": "median of per-pair ratios ttft_s / off's ttft_s (below 1 is faster)",
    "speedup_vs_baseline": "peers only: median tokens_per_s / median tokens_per_s of the "
    "peer's own no-speculation baseline",
    "acceptance_rate": "accepted / drafted, pooled over the repeats (null: nothing drafted "
    "or not reported)",
    "mean_accepted_length": "tokens the verification passes produced / verification passes, pooled",
    "identical_to_off": "every run's reply equals its paired off run's reply (peers: compared "
    "as text; their token ids are the target's tokenization of that text)",
    "first_divergence": "first token index at which a reply differs from its off pair "
    "(smallest over repeats)",
    "peak_rss_mb": "largest resident set seen while a run was going, sampled every 10 ms "
    "(the models are mmapped, so it includes every touched weight page)",
    "rss_growth_mb": "largest rise of the resident set during one run",
    "overall": "geometric mean over prompts of the per-prompt figures",
    "speedup_low, speedup_high": "lowest and highest per-pair ratio behind speedup_vs_off",
    "busy_runs": "runs of this variant, or of the off runs paired with them, during which other "
    "programs used more than busy_share_limit of the machine's CPU (a pair with such a run is "
    "run again, at most twice; what the last try measured is kept)",
    "redone_pairs": "pairs run again because other programs took the CPU during one of their runs",
    "threads": "runs: CPU threads SpecChat's target decoded with (the fewest during the reply; "
    "fewer than threads_wanted when another program kept a CPU busy)",
    **reference.DEFINITIONS,
    **ceilings.DEFINITIONS,
}


# -- text agreement --------------------------------------------------------------------------
def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None when the sequences are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def same_reply(a: RunResult, b: RunResult) -> tuple[bool, int | None]:
    """(identical, first divergent token index). Exact ids when both runs have them, else the
    text decides and the index comes from the (re-tokenized) ids."""
    if a.exact_ids and b.exact_ids:
        d = first_divergence(a.token_ids, b.token_ids)
        return d is None, d
    if a.text == b.text:
        return True, None
    d = first_divergence(a.token_ids, b.token_ids)
    return False, d if d is not None else min(len(a.token_ids), len(b.token_ids))


# -- records --------------------------------------------------------------------------------
def _med_ratio(pairs: Sequence[tuple[RunResult, RunResult]], attr: str) -> float | None:
    return median(
        r for r in (ratio(getattr(v, attr), getattr(o, attr)) for o, v in pairs) if r is not None
    )


def _pooled(runs: Sequence[RunResult]) -> tuple[float | None, float | None, int | None, int | None]:
    drafted = [r.drafted for r in runs if r.drafted is not None]
    accepted = [r.accepted for r in runs if r.accepted is not None]
    steps = [r.verify_steps for r in runs if r.verify_steps is not None]
    produced = [r.verify_tokens for r in runs if r.verify_tokens is not None]
    d = sum(drafted) if drafted else None
    a = sum(accepted) if accepted else None
    n_steps = sum(steps) if steps and len(steps) == len(produced) else None
    return (
        acceptance_rate(d, a),
        mean_accepted_length(sum(produced) if produced else None, n_steps),
        d,
        a,
    )


def record(
    runs: Sequence[RunResult],
    refs: dict[int, RunResult],
    baseline_runs: Sequence[RunResult] = (),
    curve: CostCurve | None = None,
) -> dict[str, Any]:
    """The figures of one (prompt, variant) from its runs and the off runs (by pair)."""
    first = runs[0]
    is_ref = first.label == REFERENCE
    if is_ref:
        pairs = [(r, r) for r in runs]
        same = [same_reply(runs[0], r) for r in runs]
    else:
        pairs = [(refs[r.pair], r) for r in runs if r.pair in refs]
        same = [same_reply(o, v) for o, v in pairs]
    divergences = [d for ok, d in same if not ok and d is not None]
    per_pair = [ratio(v.tokens_per_s, o.tokens_per_s) for o, v in pairs] if not is_ref else []
    spread = [r for r in per_pair if r is not None]
    watched = {id(r): r for pair in pairs for r in pair}.values()
    shares = [r.others_share for r in watched if r.others_share is not None]
    ref_tps = median(o.tokens_per_s for o, _ in pairs)
    rate, mal, drafted, accepted = _pooled(runs)
    ttfts = [r.ttft_s for r in runs if r.ttft_s is not None]
    tps = median(r.tokens_per_s for r in runs)
    base_tps = median(r.tokens_per_s for r in baseline_runs)
    out: dict[str, Any] = {
        "id": first.prompt_id,
        "kind": first.kind,
        "mode": first.label,
        "runner": first.runner,
        "speculation": first.mode,
        "repeats": len(runs),
        "prompt_tokens": first.prompt_tokens,
        "tokens": median(r.tokens for r in runs),
        "tokens_per_s": tps,
        "tokens_per_s_runs": [r.tokens_per_s for r in runs],
        "e2e_tokens_per_s": median(r.e2e_tokens_per_s for r in runs),
        "speedup_vs_off": 1.0 if is_ref else median(spread),
        "speedup_vs_off_ratio_of_medians": 1.0 if is_ref else ratio(tps, ref_tps),
        "speedup_low": min(spread) if spread else None,
        # pairs whose run drafted nothing did off's work twice: what parts them is the machine
        "idle_pair_speedups": [
            x for (_, v), x in zip(pairs, per_pair, strict=False) if x is not None and not v.drafted
        ],
        "speedup_high": max(spread) if spread else None,
        "busy_runs": sum(r.busy for r in watched),
        "others_cpu_share_max": max(shares) if shares else None,
        "e2e_speedup_vs_off": 1.0 if is_ref else _med_ratio(pairs, "e2e_tokens_per_s"),
        "ttft_s": median(ttfts),
        "ttft_ratio_vs_off": 1.0 if is_ref and ttfts else _med_ratio(pairs, "ttft_s"),
        "speedup_vs_baseline": ratio(tps, base_tps) if baseline_runs else None,
        "acceptance_rate": rate,
        "mean_accepted_length": mal,
        "drafted": drafted,
        "accepted": accepted,
        "identical_to_off": all(ok for ok, _ in same),
        "first_divergence": min(divergences) if divergences else None,
        "finish_reasons": sorted({r.finish_reason or "?" for r in runs}),
        "peak_rss_mb": max(r.peak_rss_bytes for r in runs) / 2**20,
        "rss_growth_mb": max(max(r.peak_rss_bytes - r.start_rss_bytes, 0) for r in runs) / 2**20,
        "notes": sorted({r.note for r in runs if r.note}),
        "host_ms_per_token": median(
            r.host_ms_per_token for r in runs if r.host_ms_per_token is not None
        ),
        "text": first.text,
    }
    out.update(ceilings.figures(runs, curve, out["speedup_vs_off"]))
    return out


def records(bench: BenchRun) -> list[dict[str, Any]]:
    """One record per (prompt, variant), prompts in suite order, variants in measured order."""
    out = []
    for prompt in bench.suite.prompts:
        mine = [r for r in bench.runs if r.prompt_id == prompt.id]
        refs = {r.pair: r for r in mine if r.label == REFERENCE}
        for label in bench.labels:
            runs = [r for r in mine if r.label == label]
            if not runs:
                continue
            base = bench.baselines.get(label)
            base_runs = [r for r in mine if r.label == base] if base else []
            out.append(record(runs, refs, base_runs, bench.cost_curve))
    return out


def overall(bench: BenchRun, recs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant: geometric means over prompts, per kind too; pooled acceptance."""
    out: dict[str, dict[str, Any]] = {}
    for label in bench.labels:
        rs = [r for r in recs if r["mode"] == label]
        if not rs:
            continue
        runs = [r for r in bench.runs if r.label == label]
        rate, mal, drafted, accepted = _pooled(runs)
        kinds = sorted({r["kind"] for r in rs})
        out[label] = {
            "runner": bench.runners.get(label, ""),
            "prompts": len(rs),
            "tokens_per_s_geomean": geomean(r["tokens_per_s"] for r in rs),
            "e2e_tokens_per_s_geomean": geomean(r["e2e_tokens_per_s"] for r in rs),
            "speedup_vs_off_geomean": geomean(r["speedup_vs_off"] for r in rs),
            "e2e_speedup_vs_off_geomean": geomean(r["e2e_speedup_vs_off"] for r in rs),
            "ttft_s_median": median(r["ttft_s"] for r in rs if r["ttft_s"] is not None),
            "ttft_ratio_vs_off_geomean": geomean(r["ttft_ratio_vs_off"] for r in rs),
            "speedup_vs_baseline_geomean": geomean(r["speedup_vs_baseline"] for r in rs),
            "acceptance_rate": rate,
            "mean_accepted_length": mal,
            "tau": ceilings.pooled_tau(runs),
            "ceiling_geomean": geomean(r["ceiling"] for r in rs),
            "efficiency_geomean": geomean(r["efficiency"] for r in rs),
            "drafted": drafted,
            "accepted": accepted,
            "identical_prompts": sum(1 for r in rs if r["identical_to_off"]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "speedup_by_kind": {
                k: geomean(r["speedup_vs_off"] for r in rs if r["kind"] == k) for k in kinds
            },
            "speedup_vs_baseline_by_kind": {
                k: geomean(r["speedup_vs_baseline"] for r in rs if r["kind"] == k) for k in kinds
            },
        }
    return out


# -- the whole report -----------------------------------------------------------------------
def models_info(engine: Engine) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, rt in (("target", engine.target), ("draft", engine.draft)):
        out[role] = (
            None
            if rt is None
            else {
                "file": rt.path.name,
                "path": str(rt.path),
                "size_bytes": rt.size_bytes,
                "name": rt.info.model_name,
                "quantization": rt.info.quantization,
                "n_ctx": rt.n_ctx,
                "threads": rt.n_threads,
            }
        )
    return out


def build_report(
    bench: BenchRun,
    *,
    models: dict[str, Any],
    argv: Sequence[str] | None = None,
    extra_settings: dict[str, Any] | None = None,
    host_pass: BenchRun | Sequence[BenchRun] | None = None,
    runtime_curves: dict[str, Any] | None = None,
    host_floor_s: float | None = None,
) -> dict[str, Any]:
    """The JSON-ready report: settings, machine, models, records, overall, host overhead (the
    main pass and, when given, more passes at another temperature or repeat penalty), the cost
    curves of SpecChat's runtime and llama-server side by side when measured, and every run."""
    if host_pass is None:
        host_passes: list[BenchRun] = []
    elif isinstance(host_pass, BenchRun):
        host_passes = [host_pass]
    else:
        host_passes = list(host_pass)
    argv = list(sys.argv if argv is None else argv)
    recs = records(bench)
    s = bench.settings
    settings: dict[str, Any] = {
        "suite": bench.suite.source or bench.suite.name,
        "prompts": [p.id for p in bench.suite.prompts],
        "modes": bench.labels,
        "repeats": s.repeats,
        "max_tokens": s.max_tokens,
        "temperature": s.params.temperature,
        "seed": s.params.seed,
        "k_max": s.params.k_max,
        "p_min": s.params.p_min,
        "warmup": s.warmup,
        "pairing": bench.pairing,
        "order": bench.order,
        "planner_cost_curve": bench.planner_curve,
    }
    settings.update(extra_settings or {})
    return {
        "schema": SCHEMA_VERSION,
        "command": shlex.join(argv),
        "argv": argv,
        "started_at": datetime.fromtimestamp(bench.started_at, timezone.utc).isoformat(),
        "duration_s": round(bench.duration_s, 2),
        "complete": not bench.interrupted and len(bench.runs) == bench.planned_runs,
        "planned_runs": bench.planned_runs,
        "redone_pairs": bench.redone_pairs,
        "busy_share_limit": BUSY_SHARE,
        "machine": machine_info(),
        "models": models,
        "settings": settings,
        "definitions": DEFINITIONS,
        "cost_curve": bench.cost_curve.as_dict() if bench.cost_curve else None,
        "runtime_curves": runtime_curves,
        "records": recs,
        "reference": reference.reference_checks([p.id for p in bench.suite.prompts], bench.runs),
        "overall": overall(bench, recs),
        "host_overhead": host_overhead([bench, *host_passes]),
        "host_floor_ms": None if host_floor_s is None else host_floor_s * 1000.0,
        "runs": [r.as_dict() for r in bench.runs],
        "host_pass_runs": [r.as_dict() for hp in host_passes for r in hp.runs],
    }


def to_json(report: dict[str, Any]) -> str:
    """The report as JSON text: floats rounded to 4 decimals, inf/nan written as null."""

    def clean(x: Any) -> Any:
        if isinstance(x, float):
            return round(x, 4) if math.isfinite(x) else None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
