"""`specchat-cli bench --peers`: the runtimes measured beside SpecChat (llama-cpp-python's own
speculation, llama.cpp's speculative binaries, llama-server's n-gram modes): their options, the
names they are asked by, and starting them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specchat.core.bench.runner import Variant
from specchat.core.engines.local import Engine

PEER_CHOICES = ("llama-cpp-python", "llama.cpp", "llama.cpp-ngram")


def add_peer_options(b: argparse.ArgumentParser) -> None:
    """The peers measured beside SpecChat (llama-cpp-python, llama.cpp, llama-server)."""
    b.add_argument(
        "--peers",
        default="",
        help="comma-separated peers to measure too: llama-cpp-python, llama.cpp (native "
        "speculative binaries), llama.cpp-ngram (llama-server's n-gram modes), or all",
    )
    b.add_argument(
        "--llama-cpp-bin",
        type=Path,
        help="folder with llama.cpp's llama-speculative-simple and llama-completion",
    )
    b.add_argument("--peer-k", type=int, default=None, help="peers' draft length (default: k-max)")
    b.add_argument(
        "--ngram-peer-settings",
        choices=["both", "defaults", "k"],
        default="both",
        help="llama.cpp-ngram peer: each n-gram mode at llama.cpp's defaults, at --peer-k, or "
        "both (default)",
    )
    b.add_argument(
        "--llama-server",
        type=Path,
        help="llama-server binary for the llama.cpp-ngram peer (default: the cached build of "
        "packaging/build-llama-server.sh, built if missing)",
    )
    b.add_argument(
        "--compare-runtimes",
        action="store_true",
        help="also time one decode of n tokens through llama-server (built from the same "
        "llama.cpp) beside SpecChat's runtime, and report both curves side by side",
    )


def parse_peers(text: str, bin_dir: Path | None) -> list[str]:
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    if "all" in names:
        names = list(PEER_CHOICES) if bin_dir else ["llama-cpp-python", "llama.cpp-ngram"]
    out: list[str] = []
    for n in names:
        n = {"lcpp-py": "llama-cpp-python", "native": "llama.cpp", "ngram": "llama.cpp-ngram"}.get(
            n, n
        )
        if n not in PEER_CHOICES:
            raise ValueError(f"unknown peer {n!r} (choose from: {', '.join(PEER_CHOICES)})")
        if n not in out:
            out.append(n)
    if bin_dir is not None and "llama.cpp" not in out:
        out.append("llama.cpp")
    if "llama.cpp" in out and bin_dir is None:
        raise ValueError("the llama.cpp peer needs --llama-cpp-bin DIR (see docs/benchmarks.md)")
    return out


def add_peers(
    variants: list[Variant], args: argparse.Namespace, engine: Engine, peers: Sequence[str]
) -> None:
    """The peers asked for, into `variants` as they start (closed by the caller)."""
    peer_k = args.peer_k or args.k_max
    if "llama-cpp-python" in peers:
        from specchat.core.bench.peers import stock_peers

        variants += stock_peers(engine, k=peer_k, p_min=args.p_min)
    if "llama.cpp" in peers:
        from specchat.core.bench.native_peers import native_peers

        variants += native_peers(engine, args.llama_cpp_bin, k=peer_k)
    if "llama.cpp-ngram" in peers:
        from specchat.core.bench.server_peers import find_llama_server, ngram_peers

        print("starting llama-server peers…", file=sys.stderr)
        variants += ngram_peers(
            find_llama_server(args.llama_server),
            engine.target.path,
            k=peer_k,
            threads=engine.target.n_threads,
            ctx=engine.target.n_ctx,
            retokenize=lambda text: engine.target.tokenize(text, add_special=False),
            settings=("defaults", "k")
            if args.ngram_peer_settings == "both"
            else (args.ngram_peer_settings,),
        )
