"""Entry point of `specchat-cli`. Each subcommand module registers itself with `add_commands`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from specchat.cli import bench, doctor, generate, models
from specchat.cli.stopping import sigterm_as_ctrl_c


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specchat-cli",
        description="Chat with local GGUF models, sped up by speculative decoding.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (bench, doctor, generate, models):
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        with sigterm_as_ctrl_c():
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one readable line, never a traceback, unless --verbose
        if args.verbose:
            raise
        print(f"specchat-cli: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
