"""`specchat-cli doctor`: versions, backends, devices, GPU offload, model store, and what to do."""

from __future__ import annotations

import argparse
import json


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
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from specchat.core.doctor import gather, render, to_dict

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
