"""`specchat-cli bench`: measure speculation modes (and peers) on a prompt suite."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specchat.cli.bench_host import add_host_options, host_params, host_passes
from specchat.cli.bench_peers import add_peer_options, add_peers, parse_peers
from specchat.cli.bench_resume import add_resume_option, open_journal, resume_settings
from specchat.cli.common import add_cost_curve_option, add_engine_options, engine_from_args
from specchat.core.bench.report import build_report, models_info, to_json
from specchat.core.bench.report_md import to_markdown
from specchat.core.bench.runner import (
    ORDERS,
    REFERENCE,
    BenchSettings,
    OnRun,
    RunResult,
    Variant,
    load_suite,
    parse_modes,
    run_bench,
)
from specchat.core.decoding.pricing.cost_curve import FLAT, MEASURED, CostCurve, CostCurveError
from specchat.core.engines.curve_policy import CurvePolicy
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams, params_from
from specchat.core.types import Mode


def add_commands(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser(
        "bench",
        help="benchmark speculation modes on a prompt suite (side by side with off)",
        description="Runs every prompt of a suite with speculation off and with each mode, "
        "side by side (off, A, B, ... per prompt and repeat, or off, A, off, B with "
        "--pairing alternate; each prompt and repeat starting one variant further on with "
        "--order rotate, the default) from cold caches, and reports tokens/s, speedup vs "
        "off, time to first token, acceptance and whether the text matches. "
        "See docs/benchmarks.md.",
    )
    b.add_argument(
        "--suite",
        type=Path,
        help="suite TOML, or a bundled suite's name: default, heldout (prompts lookup was never "
        "tuned on); default: the default suite",
    )
    b.add_argument(
        "--modes",
        default=None,
        help="comma-separated modes; off is always measured (default: "
        + ",".join(m.value for m in Mode)
        + ", without draft when no draft model is loaded)",
    )
    b.add_argument("--prompts", help="comma-separated prompt ids to run (default: all)")
    b.add_argument("--repeats", type=int, default=3, help="repeats per prompt (default: 3)")
    b.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="token limit for every prompt (default: each prompt's max_tokens, else 256)",
    )
    b.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    b.add_argument("--seed", type=int, default=None, help="sampling seed (with --temperature)")
    b.add_argument("--k-max", type=int, default=8, help="most tokens drafted per step")
    b.add_argument("--p-min", type=float, default=0.5, help="draft stops below this confidence")
    b.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    add_peer_options(b)
    b.add_argument(
        "--pairing",
        choices=("block", "alternate"),
        default="block",
        help="block: off, A, B, ... per prompt and repeat (default); alternate: off, A, off, B",
    )
    b.add_argument(
        "--order",
        choices=ORDERS,
        default="rotate",
        help="rotate: each prompt and repeat starts one variant further on (off, A, B, then A, "
        "B, off, ...), so no variant, off included, always runs right after the same other one "
        "(default); fixed: always in the order given",
    )
    add_cost_curve_option(b)
    add_host_options(b)
    add_resume_option(b)
    b.add_argument("--json", type=Path, metavar="OUT", help="write the JSON report here")
    b.add_argument("--md", type=Path, metavar="OUT", help="write the Markdown report here")
    b.add_argument("--png", type=Path, metavar="OUT", help="draw a speedup chart (PNG) here")
    b.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    add_engine_options(b)
    b.set_defaults(func=cmd_bench)


def progress_line(r: RunResult, done: int, total: int) -> str:
    parts = [
        f"[{done}/{total}]",
        f"{r.prompt_id}",
        f"{r.label}",
        f"rep {r.repeat + 1}",
        f"{r.tokens} tok",
        f"{r.tokens_per_s:.1f} tok/s",
    ]
    if r.ttft_s is not None:
        parts.append(f"ttft {r.ttft_s * 1000:.0f} ms")
    if r.acceptance_rate is not None:
        parts.append(f"accept {r.acceptance_rate:.0%}")
    if r.busy:
        parts.append(f"(other programs used {r.others_share:.0%} of the CPU)")
    return " ".join(parts)


def cmd_bench(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite)
    if args.prompts:
        suite = suite.select(args.prompts.split(","))
    if args.server:
        return cmd_bench_remote(args, suite)
    # unknown modes, peers and settings fail before any model loads
    modes = parse_modes(args.modes or [m.value for m in Mode])
    peers = parse_peers(args.peers, args.llama_cpp_bin)
    params = _params(args)
    BenchSettings(args.repeats, args.max_tokens, params).validate()
    host_params(args, params)  # the host passes' settings too
    if args.png is not None:
        from specchat.cli.png_chart import check_available

        check_available()  # fail now, not after an hour of measuring
    print(
        f"loading models… ({len(suite.prompts)} prompts, modes {','.join(modes)})", file=sys.stderr
    )
    with engine_from_args(args) as engine:
        if args.modes is None and not engine.has_draft:
            modes = [m for m in modes if m != Mode.DRAFT.value]
        journal = open_journal(args, engine, suite, modes, peers, params)
        # up to the longest draft either drafter may make (a lookup copy: 64 tokens)
        k_max = max(args.k_max, params.lookup_k_max)
        curve = use_cost_curve(engine, args.cost_curve, k_max, journal.curve if journal else None)
        if journal is not None:
            journal.begin(curve)
        floor = host_floor(engine)
        variants: list[Variant] = []
        try:
            add_peers(variants, args, engine, peers)
            on_run = _progress(args)
            bench = run_bench(
                engine,
                suite,
                modes,
                args.repeats,
                max_tokens=args.max_tokens,
                params=params,
                peers=variants,
                warmup=not args.no_warmup,
                on_run=on_run,
                pairing=args.pairing,
                order=args.order,
                cost_curve=curve,
                journal=journal,
            )
            # stopped (Ctrl+C, SIGTERM): no further passes, the report of what was measured
            stopped = bench.interrupted
            extra = None if stopped else host_passes(args, params, engine, suite, modes, on_run)
            report = build_report(
                bench,
                models=models_info(engine),
                extra_settings=_extra_settings(args, engine, peers) | resume_settings(journal),
                host_pass=extra,
                runtime_curves=None if stopped else _runtime_curves(args, engine, curve, variants),
                host_floor_s=floor,
            )
        finally:
            for v in variants:
                v.close()
    return _finish_report(args, report)


def use_cost_curve(
    engine: Engine, which: str, k_max: int, earlier: CostCurve | None = None
) -> CostCurve:
    """Measure the target's cost curve on this machine afresh (the curve policy's `fresh`: a
    report states its own run's curve, which is kept for the window and `generate`), or take
    the one a resumed bench's `earlier` run measured (its pairs were priced with it), and
    price drafting with it, or with a flat one (`which` = flat: an idealised GPU); returns the
    measured curve."""
    if earlier is not None:
        curve = earlier
        print("the cost curve the resumed run measured:", file=sys.stderr)
    else:
        print("measuring the target's cost curve…", file=sys.stderr, flush=True)
        curve = CurvePolicy().fresh(engine, k_max)
    print(curve.describe(), file=sys.stderr)
    engine.use_cost_curve(curve if which == MEASURED else CostCurve.flat())
    if which == FLAT:
        print(
            "drafting priced with a flat cost curve (an idealised GPU): the report's τ is what "
            "drafting reaches when length costs nothing; its speedups are this machine's",
            file=sys.stderr,
        )
    return curve


def host_floor(engine: Engine) -> float | None:
    """The host floor (`measure_host_floor`, about a second), printed; None without room."""
    try:
        floor = engine.measure_host_floor()
    except CostCurveError as exc:
        print(f"host floor not measured: {exc}", file=sys.stderr)
        return None
    print(f"host floor: {floor * 1000:.3f} ms per token outside llama_decode", file=sys.stderr)
    return floor


def _runtime_curves(
    args: argparse.Namespace, engine: Engine, curve: CostCurve, variants: Sequence[Variant]
) -> dict | None:
    """`--compare-runtimes`: SpecChat's runtime and llama-server timing the same decodes (on
    the llama-server peer without speculation when it runs, else on one started for it)."""
    if not args.compare_runtimes:
        return None
    from specchat.core.bench.runtime_curves import compare_runtimes

    print("timing the same decodes through llama-server…", file=sys.stderr, flush=True)
    curves = compare_runtimes(engine, curve, peers=variants, binary=args.llama_server)
    print(curves.describe(), file=sys.stderr)
    return curves.as_dict()


def _progress(args: argparse.Namespace) -> OnRun:
    def on_run(r: RunResult, done: int, total: int) -> None:
        if not args.quiet:
            print(progress_line(r, done, total), file=sys.stderr, flush=True)

    return on_run


def _extra_settings(args: argparse.Namespace, engine: Engine, peers: Sequence[str]) -> dict:
    return {
        "peers": list(peers),
        "peer_k": (args.peer_k or args.k_max) if peers else None,
        "llama_cpp_bin": str(args.llama_cpp_bin) if args.llama_cpp_bin else None,
        "threads": engine.target.n_threads,
        "ctx": engine.target.n_ctx,
        "gpu_layers": args.gpu_layers,  # as asked: "auto" or N (what it became below)
        "target_gpu_layers": engine.target.config.n_gpu_layers,
        "draft_gpu_layers": engine.draft.config.n_gpu_layers if engine.draft else None,
        "cost_curve": args.cost_curve,
    }


def _finish_report(args: argparse.Namespace, report: dict) -> int:
    md = to_markdown(report)
    if args.json is not None:
        _write(args.json, to_json(report))
    if args.md is not None:
        _write(args.md, md)
    if args.png is not None:
        from specchat.cli.png_chart import save_chart

        save_chart(report, args.png)
    print(md)
    for path in (args.json, args.md, args.png):
        if path is not None:
            print(f"wrote {path}", file=sys.stderr)
    if not report["complete"]:
        print("interrupted: the report covers the runs measured so far", file=sys.stderr)
        return 130
    return 0 if REFERENCE in report["overall"] else 1


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def cmd_bench_remote(args: argparse.Namespace, suite) -> int:
    """`bench --server URL`: the server's modes side by side (core/bench/server_runs.py)."""
    from specchat.core.bench.server_runs import (
        remote_models_info,
        remote_variants,
        run_remote_bench,
    )

    if args.peers:
        raise ValueError("--peers measures local runners: it does not go with --server")
    if args.resume:
        raise ValueError("--resume continues a local bench: it does not go with --server")
    params = _params(args)
    BenchSettings(args.repeats, args.max_tokens, params).validate()
    with engine_from_args(args) as engine:
        variants = remote_variants(engine, args.modes)
        print(
            f"{engine.info.summary()}; measuring {', '.join(v.label for v in variants)}",
            file=sys.stderr,
        )

        bench = run_remote_bench(
            variants,
            suite,
            args.repeats,
            max_tokens=args.max_tokens,
            params=params,
            warmup=not args.no_warmup,
            on_run=_progress(args),
            order=args.order,
        )
        extra = {"server": engine.config.base_url, "server_kind": engine.info.kind.value}
        report = build_report(bench, models=remote_models_info(engine), extra_settings=extra)
    return _finish_report(args, report)


def _params(args: argparse.Namespace) -> GenerationParams:
    """The sampling and speculation flags bench takes (each prompt sets its own max_tokens)."""
    return params_from({n: getattr(args, n) for n in ("temperature", "seed", "k_max", "p_min")})
