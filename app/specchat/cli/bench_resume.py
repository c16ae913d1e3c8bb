"""`specchat-cli bench --resume FILE`: keep each measured pair in FILE and, when FILE already
holds pairs of the same bench, measure only the rest (core/bench/journal.py)."""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specchat.core.bench.journal import Journal, prompt_digest
from specchat.core.bench.report import models_info
from specchat.core.bench.suite import Suite
from specchat.core.engines.curve_store import machine_id
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams

__all__ = ["add_resume_option", "open_journal", "resume_settings"]


def add_resume_option(b: argparse.ArgumentParser) -> None:
    b.add_argument(
        "--resume",
        type=Path,
        metavar="FILE",
        help="keep every measured pair in FILE as it is measured; when FILE already holds pairs "
        "of the same command (stopped by Ctrl+C, a crash or a reboot), measure only the rest "
        "and report them all",
    )


def open_journal(
    args: argparse.Namespace,
    engine: Engine,
    suite: Suite,
    modes: Sequence[str],
    peers: Sequence[str],
    params: GenerationParams,
) -> Journal | None:
    """The journal `--resume` names (None without it), checked against this run: models,
    machine, prompts, modes, peers and settings must be the earlier run's (JournalError)."""
    if args.resume is None:
        return None
    models = models_info(engine)
    identity: dict[str, Any] = {
        "models": {
            role: None if m is None else [m["file"], m["size_bytes"], m["n_ctx"], m["threads"]]
            for role, m in models.items()
        },
        "machine": machine_id(),
        "specchat": code_fingerprint(),
        "prompts": [[p.id, prompt_digest(p)] for p in suite.prompts],
        "modes": list(modes),
        "peers": [list(peers), args.peer_k, args.ngram_peer_settings],
        "schedule": [args.repeats, args.pairing, args.order, not args.no_warmup],
        "sampling": [args.max_tokens, params.temperature, params.seed, args.k_max, args.p_min],
        "cost_curve": args.cost_curve,
        "gpu_layers": [args.gpu_layers, args.draft_gpu_layers],
    }
    journal = Journal.open(args.resume, identity)
    if journal.pairs:
        when = _iso(journal.started_at)
        cut = "; its last pair was cut short and is measured again" if journal.cut_short else ""
        print(
            f"resuming {args.resume}: {len(journal.pairs)} pair(s) measured by the run started "
            f"{when}{cut}",
            file=sys.stderr,
        )
    return journal


def code_fingerprint() -> str:
    """SpecChat's version and a digest of its Python sources: a run resumed by other code
    would mix two programs' figures in one report."""
    import specchat

    digest = hashlib.sha256()
    root = Path(specchat.__file__).parent
    for path in sorted(root.rglob("*.py")):
        try:
            digest.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
        except OSError:
            continue
    return f"{specchat.__version__} {digest.hexdigest()[:12]}"


def resume_settings(journal: Journal | None) -> dict[str, Any]:
    """What the report says about the journal (nothing without one)."""
    if journal is None:
        return {}
    return {
        "resume": {
            "file": str(journal.path),
            "pairs_kept": journal.kept_at_start,
            "first_started_at": _iso(journal.started_at),
        }
    }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")
