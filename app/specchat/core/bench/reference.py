"""Whether the reference run can be trusted: SpecChat's off run against its peers, per prompt.

Every speedup in a report divides by SpecChat's off run of the same prompt. When that run is
slow for a reason of its own (it started with a thread fewer because the CPU looked busy, or it
always ran right after another process's heavy work) every variant looks faster than it is.
So, per prompt:

- off's decode speed beside llama-server's plain decoding (`llama.cpp:server-off`, the same
  model and prompt tokens, timed by the same client) when that peer ran: their ratio, and a
  flag when off is slower by more than the run's own spread (the spread of either one's
  repeats, at least `SPREAD_FLOOR`);
- off's time to first token beside every other variant's (each run from cold caches, the same
  prompt: a prefill is a prefill): a flag above `TTFT_LIMIT` times their median;
- a flag when an off run decoded with fewer CPU threads than the target was loaded with.

A flagged prompt's speedups are still computed (the figures are what was measured) and the
report says why they cannot be trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.core.bench.results import SERVER_OFF, RunResult
from specchat.core.bench.runner import REFERENCE
from specchat.core.bench.stats import median

__all__ = ["DEFINITIONS", "SPREAD_FLOOR", "TTFT_LIMIT", "reference_checks"]

SPREAD_FLOOR = 0.03  # off may be this much slower than llama-server's off before it is flagged
TTFT_LIMIT = 1.25  # off's time to first token over the other variants' median that is flagged

DEFINITIONS = {
    "reference": "per prompt, SpecChat's off run beside its peers: off and llama-server's off "
    f"tok/s (medians) and their ratio; flagged when off is slower than llama-server's off by "
    f"more than the spread of either one's repeats (at least {SPREAD_FLOOR:.0%}), when off's "
    f"time to first token is over {TTFT_LIMIT}x the other variants' median, or when an off run "
    "decoded with fewer CPU threads than loaded",
}


def _spread(xs: Sequence[float]) -> float:
    """(highest - lowest) / median of a variant's repeats (0 for one run)."""
    med = median(xs)
    return (max(xs) - min(xs)) / med if med and len(xs) > 1 else 0.0


def _check(prompt_id: str, runs: Sequence[RunResult]) -> dict[str, Any] | None:
    off = [r for r in runs if r.label == REFERENCE and r.tokens_per_s > 0]
    if not off:
        return None
    server = [r for r in runs if r.label == SERVER_OFF and r.tokens_per_s > 0]
    off_tps = median([r.tokens_per_s for r in off])
    server_tps = median([r.tokens_per_s for r in server])
    ratio = off_tps / server_tps if off_tps and server_tps else None
    spread = max(
        SPREAD_FLOOR,
        _spread([r.tokens_per_s for r in off]),
        _spread([r.tokens_per_s for r in server]),
    )
    off_ttft = median([r.ttft_s for r in off if r.ttft_s is not None])
    peers_ttft = median([r.ttft_s for r in runs if r.label != REFERENCE and r.ttft_s is not None])
    ttft_ratio = off_ttft / peers_ttft if off_ttft and peers_ttft else None
    few = [r for r in off if 0 < r.threads < r.threads_wanted]
    why = []
    if ratio is not None and ratio < 1.0 - spread:
        why.append(
            f"off ran {1.0 - ratio:.0%} slower than llama-server's plain decoding, more than "
            f"the run's spread ({spread:.0%})"
        )
    if off_ttft and peers_ttft and off_ttft > TTFT_LIMIT * peers_ttft:
        why.append(
            f"off's time to first token was {ttft_ratio:.2f}x the other variants' "
            f"({off_ttft * 1000:.0f} ms against {peers_ttft * 1000:.0f} ms)"
        )
    if few:
        r = min(few, key=lambda r: r.threads)
        why.append(
            f"off decoded with {r.threads} of {r.threads_wanted} CPU threads in {len(few)} of "
            f"{len(off)} runs (another program kept a CPU busy as it started)"
        )
    return {
        "id": prompt_id,
        "off_tokens_per_s": off_tps,
        "server_off_tokens_per_s": server_tps,
        "off_vs_server_off": ratio,
        "spread": spread,
        "off_ttft_s": off_ttft,
        "others_ttft_s": peers_ttft,
        "ttft_ratio": ttft_ratio,
        "off_threads": [r.threads for r in off if r.threads],
        "threads_wanted": max((r.threads_wanted for r in off), default=0) or None,
        "out_of_line": bool(why),
        "why": why,
    }


def reference_checks(prompt_ids: Sequence[str], runs: Sequence[RunResult]) -> dict[str, Any]:
    """The checks of every prompt (suite order) and their summary: the median and lowest
    off / llama-server off ratio over the prompts where that peer ran, and how many prompts
    were flagged."""
    prompts = []
    for pid in prompt_ids:
        c = _check(pid, [r for r in runs if r.prompt_id == pid])
        if c is not None:
            prompts.append(c)
    ratios = [c["off_vs_server_off"] for c in prompts if c["off_vs_server_off"] is not None]
    return {
        "prompts": prompts,
        "off_vs_server_off_median": median(ratios),
        "off_vs_server_off_lowest": min(ratios) if ratios else None,
        "out_of_line": sum(1 for c in prompts if c["out_of_line"]),
    }
