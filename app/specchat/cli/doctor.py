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
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from specchat.core.doctor import gather, render, to_dict

    facts = gather()
    if args.json:
        print(json.dumps(to_dict(facts), indent=2, default=str))
    else:
        print(render(facts))
    return 0
