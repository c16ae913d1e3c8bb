"""Helpers shared by CLI subcommands: model paths, engine options."""

from __future__ import annotations

import argparse
from pathlib import Path

from specchat.core.decoding.runtime import RuntimeConfig
from specchat.core.engines.curve_policy import how_long
from specchat.core.store.local_models import default_pair_paths

__all__ = [
    "add_cost_curve_option",
    "add_engine_options",
    "default_pair_paths",
    "engine_from_args",
    "remote_engine_from_args",
]


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=Path, help="target GGUF (default: the default pair's)")
    p.add_argument("--draft", type=Path, help="draft GGUF (default: the default pair's)")
    p.add_argument("--no-draft", action="store_true", help="do not load a draft model")
    p.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = physical cores)")
    p.add_argument(
        "--gpu-layers",
        type=_gpu_layers,
        default="auto",
        metavar="auto|N|-1",
        help="target layers on the GPU: auto (default: all that fit, the draft first), N, -1 = all",
    )
    p.add_argument(
        "--draft-gpu-layers",
        type=_gpu_layers,
        default=None,
        metavar="auto|N|-1",
        help="draft layers on the GPU (default: as --gpu-layers)",
    )
    add_remote_options(p)


def add_cost_curve_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cost-curve",
        choices=("measured", "flat"),
        default="measured",
        help="what a verification of n tokens is priced at when choosing draft lengths: the "
        "target's decode times measured on this machine and kept per model file (default; "
        f"{how_long()}; bench measures afresh), or flat (n tokens cost one token's time: an "
        "idealised GPU; docs/gpu.md has an H100's measured curve)",
    )


def engine_from_args(args: argparse.Namespace):
    if getattr(args, "server", None):
        return remote_engine_from_args(args)
    from specchat.core.engines.local import Engine

    target_default, draft_default = default_pair_paths()
    target = args.target or target_default
    draft = None if args.no_draft else (args.draft or draft_default)
    for label, path in (("target", target), ("draft", draft)):
        if path is not None and not Path(path).exists():
            hint = (
                " (run `specchat-cli models fetch-default`)"
                if path
                in (
                    target_default,
                    draft_default,
                )
                else ""
            )
            raise FileNotFoundError(f"{label} model not found: {path}{hint}")
    tgl, dgl = _as_asked(args, *_offload(args, target, draft))
    tcfg = RuntimeConfig(n_ctx=args.ctx, n_threads=args.threads, n_gpu_layers=tgl)
    dcfg = RuntimeConfig(n_ctx=args.ctx, n_threads=args.threads, n_gpu_layers=dgl)
    return Engine(target, draft, target_config=tcfg, draft_config=dcfg)


def _as_asked(args: argparse.Namespace, tgl: int, dgl: int) -> tuple[int, int]:
    """Explicit GPU layer counts reach the engine as the user gave them: where the build cannot
    offload, the engine runs on the CPU and says so (core/decoding/config.py)."""
    asked_d = args.gpu_layers if args.draft_gpu_layers is None else args.draft_gpu_layers
    return (
        args.gpu_layers if isinstance(args.gpu_layers, int) else tgl,
        asked_d if isinstance(asked_d, int) else dgl,
    )


def _gpu_layers(text: str):
    from specchat.core.placement.offload import parse_gpu_layers

    try:
        return parse_gpu_layers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _offload(args: argparse.Namespace, target: Path, draft: Path | None) -> tuple[int, int]:
    """GPU layers of target and draft, "auto" resolved (core/placement/offload.py)."""
    import logging
    import sys

    from specchat.core.placement.offload import resolve_offload

    dgl = args.gpu_layers if args.draft_gpu_layers is None else args.draft_gpu_layers
    decision = resolve_offload(target, draft, args.ctx, args.gpu_layers, dgl)
    logging.getLogger(__name__).info("GPU offload: %s", decision.summary())
    if decision.advice:
        print(f"specchat-cli: note: {decision.advice}", file=sys.stderr)
    draft_layers = decision.draft.layers if decision.draft is not None else 0
    return decision.target.layers, draft_layers


# -- remote servers (docs/remote.md) --------------------------------------------------------
def add_remote_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "remote server",
        "chat through an OpenAI-compatible server (llama-server, vLLM, SGLang) instead of "
        "local models; see docs/remote.md",
    )
    g.add_argument("--server", metavar="URL", help="server URL, or the name of a saved server")
    g.add_argument(
        "--server-off",
        metavar="URL",
        help="the same model served without speculation: mode off (and bench's off) runs there",
    )
    g.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="environment variable holding the API key (keys are never taken on the command "
        "line); a saved server's key comes from the keyring",
    )
    g.add_argument("--model", metavar="NAME", help="model name on the server (default: its first)")
    g.add_argument(
        "--server-kind",
        default="auto",
        choices=["auto", "llama.cpp", "vllm", "sglang", "openai"],
        help="what the server is (default: detect)",
    )
    g.add_argument("--timeout", type=float, default=None, metavar="S", help="read timeout (s)")
    g.add_argument(
        "--no-stream",
        action="store_true",
        help="ask for whole replies (SGLang sends its per-reply speculation figures only so)",
    )
    g.add_argument("--ca-file", metavar="PEM", help="extra CA certificates to trust (TLS)")


def remote_engine_from_args(args: argparse.Namespace):
    """A RemoteEngine (or, with --server-off, a RemotePair) from the remote options."""
    import os

    from specchat.core.engines.remote_connect import config_from_entry, connect
    from specchat.core.remote.config import RemoteConfig, ServerKind

    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"the environment variable {args.api_key_env} is not set")

    def config_for(text: str) -> RemoteConfig:
        if "://" not in text and ":" not in text and "." not in text and text != "localhost":
            from specchat.core.state.servers import ServerStore

            store = ServerStore()
            entry = store.find(text)
            if entry is None:
                raise ValueError(f"no saved server called {text!r} (give a URL)")
            cfg = config_from_entry(entry, key or store.api_key(entry.id))
        else:
            cfg = RemoteConfig(base_url=text, api_key=key, kind=ServerKind.parse(args.server_kind))
        changes: dict[str, object] = {"stream": cfg.stream and not args.no_stream}
        if args.model:
            changes["model"] = args.model
        if args.timeout is not None:
            changes["read_timeout_s"] = args.timeout
        if args.ca_file:
            changes["ca_file"] = args.ca_file
        return cfg.with_(**changes).validate()

    off = config_for(args.server_off) if getattr(args, "server_off", None) else None
    return connect(config_for(args.server), off)
