"""`specchat-cli doctor`: versions, backends, devices, GPU offload, model store, and what to do."""

from __future__ import annotations

import argparse
import json
import sys


def add_commands(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "doctor",
        help="show what llama.cpp can use here (backends, devices, GPU offload) and what to fix",
        description="Python, llama-cpp-python and llama.cpp versions, the compiled backends, each "
        "device with the memory llama.cpp reports, whether GPU offload works, the model store, "
        "free disk, Qt's system libraries, and what to do about anything missing.",
    )
    d.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    d.add_argument(
        "--cost-curve",
        action="store_true",
        help="also load the default target and measure its cost curve here (a few seconds): "
        "what one decode of n tokens costs relative to one (docs/benchmarks.md)",
    )
    d.add_argument(
        "--drafter-costs",
        metavar="TARGET",
        help="instead of the checks, load TARGET (and its MTP head or Gemma 4 assistant) and "
        "measure what speculation costs here: a verification of k+1 tokens, a head step per "
        "drafted token and its catch-up, a hybrid model's state snapshot and rollback, each "
        "relative to one target token (about a minute for a 0.8B model on 2 cores)",
    )
    d.add_argument(
        "--draft",
        metavar="DRAFTER",
        help="with --drafter-costs: the head to draft with (an mtp-*.gguf or a Gemma 4 "
        "assistant); by default the one built into TARGET or beside it",
    )
    d.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="with --drafter-costs: pairs per figure (default 5)",
    )
    d.add_argument(
        "--threads",
        type=int,
        default=0,
        help="with --drafter-costs: CPU threads (default 0: one per physical core)",
    )
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from specchat.core.doctor import gather, render, to_dict

    if args.drafter_costs is not None:
        return _drafter_costs(args)
    if args.draft is not None:
        print("specchat-cli doctor: --draft goes with --drafter-costs TARGET", file=sys.stderr)
        return 2
    facts = gather()
    curve = _cost_curve(bool(facts.backend.gpu_offload)) if args.cost_curve else None
    if args.json:
        out = to_dict(facts)
        out["cost_curve"] = curve.as_dict() if curve is not None else None
        print(json.dumps(out, indent=2, default=str))
    else:
        print(render(facts))
        if curve is not None:
            print(f"\nTarget cost curve: {curve.describe()}")
    return 0


def _cost_curve(gpu: bool):
    from specchat.cli.common import default_pair_paths
    from specchat.core.decoding.pricing.cost_curve import measure_model

    target = default_pair_paths()[0]
    if not target.is_file():
        raise FileNotFoundError(f"the default target is not installed: {target}")
    return measure_model(target, gpu_layers=-1 if gpu else 0)


def _drafter_costs(args: argparse.Namespace) -> int:
    """`doctor --drafter-costs TARGET [--draft DRAFTER]`: the table, or JSON with --json."""
    from specchat.core.bench.drafter_costs import measure_drafter_costs
    from specchat.core.decoding.config import ModelLoadError
    from specchat.core.gguf.header import GGUFError

    try:
        import llama_cpp

        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        costs = measure_drafter_costs(
            args.drafter_costs,
            args.draft,
            repeats=args.repeats,
            threads=args.threads,
            gpu_layers=-1 if gpu else 0,
            progress=None if args.json else lambda s: print(f"measuring {s}", file=sys.stderr),
        )
    except (ValueError, ModelLoadError, GGUFError, OSError) as exc:
        print(f"specchat-cli doctor: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(costs.as_dict(), indent=2) if args.json else costs.to_text())
    return 0
