"""The benchmark report as Markdown (from the JSON-ready dict `report.build_report` makes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from specchat.core.decoding.pricing.cost_curve import FLAT, KEY_POINTS
from specchat.core.machine.busy import BUSY_SHARE
from specchat.core.units import format_bytes


def _f(x: float | None, fmt: str = "{:.2f}", none: str = "–") -> str:
    return none if x is None else fmt.format(x)


def _ms(x: float | None) -> str:
    return _f(None if x is None else x * 1000, "{:.0f}")


def _pct(x: float | None) -> str:
    return _f(None if x is None else x * 100, "{:.0f}%")


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def to_markdown(report: dict[str, Any]) -> str:
    m, s = report["machine"], report["settings"]
    lines = [
        "# SpecChat benchmark",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {m['cpu']}, {m['cpu_count_physical']} cores / {m['cpu_count_logical']} "
        f"threads, {m['memory_gb']} GB; llama-cpp-python {m['llama_cpp_python']}",
        f"- {s['repeats']} repeat(s), temperature {s['temperature']}, "
        f"max tokens {s['max_tokens'] or 'per prompt'}, started {report['started_at']}, "
        f"took {report['duration_s']:.0f} s",
    ]
    if not report.get("complete", True):
        lines.append(
            f"- **partial run**: {len(report['runs'])} of {report['planned_runs']} runs measured"
        )
    lines += _disturbed_lines(report)
    for role, info in report["models"].items():
        if info:
            lines.append(f"- {role}: {info['file']} ({format_bytes(info['size_bytes'])})")
    lines += _curve_lines(report)
    lines += runtime_curves_section(report)
    lines += ["", "## Overall (geometric means over prompts)", ""]
    ov = report["overall"]
    kinds = sorted({k for o in ov.values() for k in o["speedup_by_kind"]})
    head = ["mode", "tok/s", "speedup", "e2e speedup", "TTFT ratio", "accept", "mean len"]
    head += ["τ", "ceiling", "efficiency", "same text", "peak RSS MB", "vs own baseline"]
    head += [f"speedup {k}" for k in kinds]
    rows = []
    for label, o in ov.items():
        row = [
            label,
            _f(o["tokens_per_s_geomean"], "{:.1f}"),
            _f(o["speedup_vs_off_geomean"], "{:.2f}×"),
            _f(o["e2e_speedup_vs_off_geomean"], "{:.2f}×"),
            _f(o["ttft_ratio_vs_off_geomean"]),
            _pct(o["acceptance_rate"]),
            _f(o["mean_accepted_length"]),
            _f(o.get("tau")),
            _f(o.get("ceiling_geomean"), "{:.2f}×"),
            _f(o.get("efficiency_geomean")),
            f"{o['identical_prompts']}/{o['prompts']}",
            _f(o["peak_rss_mb"], "{:.0f}"),
            _f(o["speedup_vs_baseline_geomean"], "{:.2f}×"),
        ]
        row += [_f(o["speedup_by_kind"].get(k), "{:.2f}×") for k in kinds]
        rows.append(row)
    lines += _table(head, rows)
    lines += _per_prompt_section(report)
    lines += _host_section(report) + _ngram_section(report) + _targets_section(report)
    lines += [
        "",
        "speedup = median of per-pair tok/s ratios against the off run measured beside it; "
        "tok/s = decode speed after the first token; TTFT ratio below 1 is faster; τ = tokens "
        "per target pass; ceiling = the speedup those passes allow on the cost curve above "
        "(drafting and host work free); efficiency = speedup / ceiling. "
        "See docs/benchmarks.md.",
        "",
    ]
    return "\n".join(lines)


def _per_prompt_section(report: dict[str, Any]) -> list[str]:
    lines = ["", "## Per prompt", ""]
    head = ["prompt", "kind", "mode", "tokens", "tok/s", "speedup", "e2e tok/s", "TTFT ms"]
    head += ["TTFT ratio", "accept", "mean len", "τ", "ceiling", "efficiency", "same text"]
    head += ["peak RSS MB"]
    rows = []
    for r in report["records"]:
        same = "yes" if r["identical_to_off"] else f"no (token {r['first_divergence']})"
        rows.append(
            [
                r["id"],
                r["kind"],
                r["mode"],
                _f(r["tokens"], "{:.0f}"),
                _f(r["tokens_per_s"], "{:.1f}"),
                _speedup_cell(r),
                _f(r["e2e_tokens_per_s"], "{:.1f}"),
                _ms(r["ttft_s"]),
                _f(r["ttft_ratio_vs_off"]),
                _pct(r["acceptance_rate"]),
                _f(r["mean_accepted_length"]),
                _f(r.get("tau")),
                _f(r.get("ceiling"), "{:.2f}×"),
                _f(r.get("efficiency")),
                same,
                _f(r["peak_rss_mb"], "{:.0f}"),
            ]
        )
    lines += _table(head, rows)
    return lines


def _speedup_cell(r: dict[str, Any]) -> str:
    """The median per-pair speedup, its spread over two or more pairs, ⚠ when a run of it was
    disturbed by other programs."""
    cell = _f(r["speedup_vs_off"], "{:.2f}×")
    low, high = r.get("speedup_low"), r.get("speedup_high")
    if low is not None and high is not None and r["repeats"] > 1:
        cell += f" ({low:.2f}–{high:.2f})"
    return cell + (" ⚠" if r.get("busy_runs") else "")


def _disturbed_lines(report: dict[str, Any]) -> list[str]:
    """Whether other programs took the CPU during the runs (SpecChat's own runs are metered;
    a server's are not: its CPU time is another process's)."""
    runs = [r for r in report["runs"] if r.get("others_cpu_share") is not None]
    if not runs:
        return []
    limit = report.get("busy_share_limit", BUSY_SHARE)
    top = max(r["others_cpu_share"] for r in runs)
    busy = [r for r in runs if r.get("busy")]
    redone = report.get("redone_pairs", 0)
    if not busy and not redone:
        return [
            f"- other programs: at most {top:.1%} of the CPU during any of SpecChat's runs "
            f"(a run is disturbed above {limit:.0%})"
        ]
    names = sorted({n for r in busy for n in r.get("busiest_others", [])})
    who = f" (busiest: {', '.join(names[:3])})" if names else ""
    line = (
        f"- **other programs took the CPU**: {redone} pair(s) were run again because other "
        f"programs used more than {limit:.0%} of the CPU during one of their runs"
    )
    if busy:
        line += (
            f"; {len(busy)} run(s) stayed disturbed after the last try{who}, up to {top:.0%}: "
            "their speedups (marked ⚠) are unreliable; close other programs and run again"
        )
    return [line]


def _curve_lines(report: dict[str, Any]) -> list[str]:
    """The machine's cost curve and what drafting was priced with."""
    out = []
    curve = report.get("cost_curve")
    if curve:
        pts = ", ".join(f"{n} → {c:.2f}" for n, c in curve["points"] if n in KEY_POINTS)
        t1 = _f(curve.get("t1_ms"), "{:.1f} ms")
        out.append(
            f"- target cost curve (a decode of n tokens relative to one, one token {t1}): {pts}"
        )
        share = curve.get("others_share")
        if share is not None and share > BUSY_SHARE:
            out.append(
                f"- **the cost curve was measured while other programs used {share:.0%} of the "
                "CPU**: it is flatter than a quiet machine's, and the ceilings with it"
            )
    planner = report["settings"].get("planner_cost_curve")
    if planner == FLAT:
        out.append(
            "- **drafting priced with a flat cost curve** (verifying n tokens costs one "
            "token's time, an idealised GPU): τ is what drafting reaches when length costs "
            "nothing; the speedups are this machine's, not a GPU's. A measurement of drafting, "
            "not a speed claim."
        )
    elif planner:
        out.append(f"- drafting priced with the {planner} cost curve")
    return out


def runtime_curves_section(report: dict[str, Any]) -> list[str]:
    """SpecChat's runtime and llama-server timing the same decodes (`--compare-runtimes`)."""
    rc = report.get("runtime_curves")
    if not rc:
        return []
    out = ["", "## One decode of n tokens: SpecChat's runtime and llama-server", ""]
    out.append(
        "Same model, machine and threads; n new tokens after a cached 128-token prefix, median "
        "of 3. llama-server can only time a prompt's shape (the last row's logits); SpecChat's "
        "runtime times that and a verification's (every row's logits)."
    )
    out.append("")
    rows = [
        [
            str(r["n"]),
            f"{r['specchat_all_ms']:.1f}",
            f"{r['specchat_last_ms']:.1f}",
            f"{r['server_last_ms']:.1f}",
            f"{r['ratio']:.3f}",
        ]
        for r in rc["rows"]
    ]
    head = ["n", "SpecChat, every row (ms)", "SpecChat, last row (ms)"]
    head += ["llama-server, last row (ms)", "SpecChat / llama-server (last row)"]
    out += _table(head, rows)
    out += ["", f"- largest ratio: {rc['max_ratio']:.3f} (target: at most 1.05)"]
    return out


def _host_section(report: dict[str, Any]) -> list[str]:
    rows = report.get("host_overhead") or []
    if not rows:
        return []
    out = ["", "## Host overhead per generated token (wall time outside llama_decode)", ""]
    out += _table(
        [
            "mode",
            "T",
            "repeat penalty",
            "runs",
            "decode ms/token (median)",
            "max",
            "whole request ms/token",
            "set-up ms/request",
            "budget",
        ],
        [
            [
                r["mode"],
                f"{r['temperature']:g}",
                f"{r.get('repeat_penalty', 1.0):g}",
                str(r["runs"]),
                _f(r.get("decode_host_ms"), "{:.3f}"),
                _f(r.get("decode_host_ms_max"), "{:.3f}"),
                _f(r["host_ms_per_token"], "{:.3f}"),
                _f(r.get("setup_host_ms"), "{:.2f}"),
                f"{r['budget_ms']:g} ms: {'met' if r['within_budget'] else 'NOT met'}",
            ]
            for r in rows
        ],
    )
    out += [
        "",
        "decode ms/token: after the first token, per token after it (the budget's figure); "
        "set-up: host time before the first token, per request.",
    ]
    floor = report.get("host_floor_ms")
    if floor is not None:
        out += [
            "",
            f"Host floor on this machine: {floor:.3f} ms/token, the barest greedy loop (decode "
            "one token, read the token llama.cpp chose, decode it) timed the same way: each "
            "decode leaves the CPU's caches holding the model's weights, so no mode goes below "
            "it.",
        ]
    return out


def ngram_peers(report: dict[str, Any]) -> list[str]:
    return [
        label
        for label, o in report["overall"].items()
        if o["runner"] == "llama.cpp" and "ngram" in label
    ]


def _ngram_section(report: dict[str, Any]) -> list[str]:
    peers = ngram_peers(report)
    if not peers:
        return []
    ov = report["overall"]
    ours = [m for m in ("lookup", "auto") if m in ov]
    kinds = sorted({k for o in ov.values() for k in o["speedup_by_kind"]})
    out = ["", "## N-gram drafting: SpecChat against llama.cpp's n-gram modes, per prompt kind", ""]
    out.append(
        "SpecChat's figures are speedups over SpecChat with speculation off; llama.cpp's are "
        "over llama-server without speculation (`llama.cpp:server-off`), same prompts and token "
        "ids, same run."
    )
    out.append("")
    head = ["kind"] + ours + peers + ["best llama.cpp"]
    rows = []
    for k in kinds:
        peer_vals = {p: ov[p]["speedup_vs_baseline_by_kind"].get(k) for p in peers}
        best = max((v for v in peer_vals.values() if v is not None), default=None)
        rows.append(
            [k]
            + [_f(ov[m]["speedup_by_kind"].get(k), "{:.2f}×") for m in ours]
            + [_f(peer_vals[p], "{:.2f}×") for p in peers]
            + [_f(best, "{:.2f}×")]
        )
    return out + _table(head, rows)


def _geo(xs: Iterable[float | None]) -> float | None:
    import math

    v = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def _noise(records: Sequence[dict[str, Any]], lowest: float | None) -> str:
    """What this run's pairs say about the machine's noise: the speedups of the pairs in which
    the mode drafted nothing (off's work in both runs) should all read 1.00x."""
    idle = [x for r in records for x in r.get("idle_pair_speedups") or []]
    if len(idle) < 3:
        return ""
    lo, hi = min(idle), max(idle)
    within = lowest is not None and lowest >= lo
    return (
        f" (the machine's noise in this run: {len(idle)} pairs in which auto drafted nothing,"
        f" off's work twice, read {lo:.2f}–{hi:.2f}×"
        + ("; the lowest figure is within it)" if within else ")")
    )


def _targets_section(report: dict[str, Any]) -> list[str]:
    recs, ov = report["records"], report["overall"]
    out = ["", "## Targets", ""]

    def per_prompt(mode: str, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return [r for r in recs if r["mode"] == mode and (kinds is None or r["kind"] in kinds)]

    for mode in ("lookup", "auto"):
        rs = per_prompt(mode, ("edit", "quote"))
        if rs:
            g = _geo(r["speedup_vs_off"] for r in rs)
            ok = g is not None and g >= 1.5
            out.append(
                f"- edit and quote prompts, {mode}: {_f(g, '{:.2f}×')} over off (geometric mean of "
                f"{len(rs)} prompts); target ≥ 1.5×: {'met' if ok else 'NOT met'}"
            )
    peers = ngram_peers(report)
    if peers:
        kinds = sorted({k for o in ov.values() for k in o["speedup_by_kind"]})
        for mode in [m for m in ("lookup", "auto") if m in ov]:
            for k in kinds:
                mine = ov[mode]["speedup_by_kind"].get(k)
                best = max(
                    (
                        v
                        for p in peers
                        if (v := ov[p]["speedup_vs_baseline_by_kind"].get(k)) is not None
                    ),
                    default=None,
                )
                ok = mine is not None and best is not None and mine >= best
                out.append(
                    f"- {k}, {mode} {_f(mine, '{:.2f}×')} vs the best llama.cpp n-gram mode "
                    f"{_f(best, '{:.2f}×')}: {'met' if ok else 'NOT met'}"
                )
    for mode in ("lookup", "auto"):
        for r in per_prompt(mode, ("edit", "quote")):
            eff = r.get("efficiency")
            if eff is None:
                continue
            out.append(
                f"- {r['id']}, {mode}: {_f(r['speedup_vs_off'], '{:.2f}×')} of a "
                f"{_f(r['ceiling'], '{:.2f}×')} ceiling (τ {_f(r['tau'])}): efficiency "
                f"{eff:.2f}, target ≥ 0.8: {'met' if eff >= 0.8 else 'NOT met'}"
            )
    auto = per_prompt("auto")
    if auto:
        worst = min(auto, key=lambda r: r["speedup_vs_off"] or 0.0)
        ok = (worst["speedup_vs_off"] or 0.0) >= 0.97
        why = ""
        if not worst.get("drafted"):  # the same work as off: what parts them is the machine
            why = "; it drafted nothing, so it did off's work"
            if worst.get("speedup_low") is not None:
                why += f" (its pairs {worst['speedup_low']:.2f}–{worst['speedup_high']:.2f})"
        if worst.get("busy_runs"):
            why += "; other programs took the CPU during its runs"
        out.append(
            f"- auto on every prompt ≥ 0.97× off: lowest {_f(worst['speedup_vs_off'], '{:.2f}×')} "
            f"({worst['id']}, {worst['kind']}{why}): {'met' if ok else 'NOT met'}"
            + _noise(auto, worst["speedup_vs_off"])
        )
    for r in report.get("host_overhead") or []:
        out.append(
            f"- host overhead, {r['mode']} at T={r['temperature']:g}, repeat penalty "
            f"{r.get('repeat_penalty', 1.0):g}: {_f(r.get('decode_host_ms'), '{:.3f}')} ms/token "
            f"in the decode phase against {r['budget_ms']:g} ms: "
            f"{'met' if r['within_budget'] else 'NOT met'}"
        )
    return out
