"""Helpers shared by CLI subcommands: model paths, engine options."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.decoding.runtime import RuntimeConfig
from ..core.models.local_models import default_pair_paths

__all__ = ["add_engine_options", "default_pair_paths", "engine_from_args"]


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=Path, help="target GGUF (default: the default pair's)")
    p.add_argument("--draft", type=Path, help="draft GGUF (default: the default pair's)")
    p.add_argument("--no-draft", action="store_true", help="do not load a draft model")
    p.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = physical cores)")
    p.add_argument("--gpu-layers", type=int, default=0, help="target layers on the GPU (-1 = all)")
    p.add_argument("--draft-gpu-layers", type=int, default=None, help="draft layers on the GPU")


def engine_from_args(args: argparse.Namespace):
    from ..core.engine import Engine

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
    tcfg = RuntimeConfig(n_ctx=args.ctx, n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    dgl = args.gpu_layers if args.draft_gpu_layers is None else args.draft_gpu_layers
    dcfg = RuntimeConfig(n_ctx=args.ctx, n_threads=args.threads, n_gpu_layers=dgl)
    return Engine(target, draft, target_config=tcfg, draft_config=dcfg)
