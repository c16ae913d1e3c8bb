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
    resumed = s.get("resume")
    if resumed and resumed["pairs_kept"]:
        lines.append(
            f"- resumed: {resumed['pairs_kept']} pair(s) were measured by an earlier run of this "
            f"command (started {resumed['first_started_at']}, kept in `{resumed['file']}`); "
            "the runs of each pair come from one run, side by side"
        )
    lines += _disturbed_lines(report) + _threads_lines(report) + _reference_warning(report)
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
    lines += _reference_section(report)
    lines += _host_section(report) + _ngram_section(report)
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
    """Whether other programs took the CPU during the runs (every local run is metered, the
    llama.cpp peers' servers counted as the bench's own; a remote server's runs are not)."""
    runs = [r for r in report["runs"] if r.get("others_cpu_share") is not None]
    if not runs:
        return []
    limit = report.get("busy_share_limit", BUSY_SHARE)
    top = max(r["others_cpu_share"] for r in runs)
    busy = [r for r in runs if r.get("busy")]
    redone = report.get("redone_pairs", 0)
    if not busy and not redone:
        return [
            f"- other programs: at most {top:.1%} of the CPU during any run "
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
    out += ["", f"- largest ratio: {rc['max_ratio']:.3f}"]
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
            ]
            for r in rows
        ],
    )
    out += [
        "",
        "decode ms/token: after the first token, per token after it; "
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


def _threads_lines(report: dict[str, Any]) -> list[str]:
    """SpecChat's runs that decoded with fewer CPU threads than loaded (Engine.fit_threads)."""
    ours = [r for r in report["runs"] if r.get("threads")]
    few = [r for r in ours if r["threads"] < (r.get("threads_wanted") or 0)]
    if not few:
        return []
    by_mode: dict[str, int] = {}
    for r in few:
        by_mode[r["mode"]] = by_mode.get(r["mode"], 0) + 1
    each = ", ".join(f"{mode} {n}" for mode, n in by_mode.items())
    return [
        f"- **{len(few)} of {len(ours)} of SpecChat's runs decoded with fewer CPU threads than "
        f"loaded** ({each}): another program kept a CPU busy as they started"
    ]


def _reference_warning(report: dict[str, Any]) -> list[str]:
    ref = report.get("reference") or {}
    n = ref.get("out_of_line", 0)
    if not n:
        return []
    return [
        f"- **the reference run (off) is out of line with its peers on {n} prompt(s)**: the "
        'speedups over it on those prompts are too high (see "Reference run")'
    ]


def _reference_section(report: dict[str, Any]) -> list[str]:
    """Per prompt: off beside llama-server's plain decoding (when it ran) and what is out of
    line about it; the machine's noise in this run."""
    ref = report.get("reference") or {}
    prompts = ref.get("prompts") or []
    if not prompts:
        return []
    out = ["", "## Reference run", ""]
    for c in prompts:
        line = f"- {c['id']}: reference run: off {_f(c['off_tokens_per_s'], '{:.1f}')} tok/s"
        if c["server_off_tokens_per_s"] is not None:
            line += (
                f", llama-server off {c['server_off_tokens_per_s']:.1f} tok/s "
                f"({_f(c['off_vs_server_off'])})"
            )
        if c["out_of_line"]:
            line += " ⚠ " + "; ".join(c["why"])
        out.append(line)
    med, low = ref.get("off_vs_server_off_median"), ref.get("off_vs_server_off_lowest")
    if med is not None:
        out += [
            "",
            f"off / llama-server off: median {med:.2f}, lowest {low:.2f} over the prompts "
            "(SpecChat's plain decoding against llama.cpp's, timed by the same client).",
        ]
    idle = [x for r in report["records"] for x in r.get("idle_pair_speedups") or []]
    if len(idle) >= 3:
        out += [
            "",
            f"The machine's noise in this run: {len(idle)} pairs in which a mode drafted "
            f"nothing (off's work twice) read {min(idle):.2f}–{max(idle):.2f}×.",
        ]
    return out
