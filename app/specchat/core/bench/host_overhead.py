"""The report's host table: per SpecChat mode, temperature and repeat penalty, the wall time
per generated token spent outside llama_decode, against its budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.core.bench.runner import BenchRun
from specchat.core.bench.stats import median

# Host ms per generated token in the decode phase: T = 0 without a penalty; else the other.
HOST_BUDGET_MS = {0.0: 0.12}
HOST_BUDGET_SAMPLED_MS = 0.30


def host_overhead(passes: Sequence[BenchRun]) -> list[dict[str, Any]]:
    """Per SpecChat mode, temperature and repeat penalty: host time per generated token in the
    decode phase (wall time outside llama_decode after the first token), median over runs, the
    whole-request figure beside it, the set-up before the first token (ms per request), and the
    budget."""
    rows = []
    for bench in passes:
        temp = bench.settings.params.temperature
        penalty = bench.settings.params.repeat_penalty
        sampled = temp > 0.0 or penalty != 1.0
        budget = HOST_BUDGET_SAMPLED_MS if sampled else HOST_BUDGET_MS.get(temp, 0.12)
        for label in bench.labels:
            runs = [
                r
                for r in bench.runs
                if r.label == label and r.runner == "specchat" and r.host_ms_per_token is not None
            ]
            if not runs:
                continue
            decode = [r.decode_host_ms for r in runs if r.decode_host_ms is not None]
            host = median(decode) if decode else None
            rows.append(
                {
                    "mode": label,
                    "temperature": temp,
                    "repeat_penalty": penalty,
                    "runs": len(runs),
                    "decode_host_ms": host,
                    "decode_host_ms_max": max(decode) if decode else None,
                    "host_ms_per_token": median(
                        r.host_ms_per_token for r in runs if r.host_ms_per_token is not None
                    ),
                    "setup_host_ms": median(
                        r.setup_host_ms for r in runs if r.setup_host_ms is not None
                    ),
                    "budget_ms": budget,
                    "within_budget": host is not None and host <= budget,
                }
            )
    return rows
