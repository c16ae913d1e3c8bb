"""`specchat-cli bench`'s host-overhead passes: every mode once more at another temperature
and with a repeat penalty, for the host table (`--host-temperature`, `--repeat-penalty`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from specchat.core.bench.runner import BenchRun, OnRun, run_bench
from specchat.core.bench.suite import Suite
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams

__all__ = ["add_host_options", "host_params", "host_passes"]


def add_host_options(b: argparse.ArgumentParser) -> None:
    b.add_argument(
        "--host-temperature",
        type=float,
        default=None,
        metavar="T",
        help="also measure every mode once more at temperature T (1 repeat) for the host "
        "overhead table",
    )
    b.add_argument(
        "--repeat-penalty",
        type=float,
        default=None,
        metavar="P",
        help="with --host-temperature: also measure the host overhead with repeat penalty P "
        "(at --temperature and at the host temperature), so the host table shows both",
    )


def host_passes(
    args: argparse.Namespace,
    params: GenerationParams,
    engine: Engine,
    suite: Suite,
    modes: Sequence[str],
    on_run: OnRun,
) -> list[BenchRun]:
    """The host table's extra passes (one run of every mode each)."""
    return [
        run_bench(
            engine,
            suite,
            modes,
            1,
            max_tokens=args.max_tokens,
            params=hp,
            warmup=False,
            on_run=on_run,
            pairing="block",
            order=args.order,
        )
        for hp in host_params(args, params)
    ]


def host_params(args: argparse.Namespace, params: GenerationParams) -> list[GenerationParams]:
    """The extra passes of the host table: the host temperature, and with a repeat penalty
    the main temperature and the host temperature again with it."""
    if args.host_temperature is None:
        return []
    hot = params.with_(temperature=args.host_temperature, seed=args.seed or 1)
    out = [hot]
    if args.repeat_penalty is not None and args.repeat_penalty != 1.0:
        pen = args.repeat_penalty
        out += [params.with_(repeat_penalty=pen), hot.with_(repeat_penalty=pen)]
    return [p.validate() for p in out]
