"""What the drafting allowed, against what the engine got (no Qt).

Per prompt and variant, pooled over its runs:

- tau: tokens per target forward pass, N / (N - accepted);
- ceiling: the speedup over plain decoding that the passes those runs made allow on the
  machine's cost curve when drafting and host work cost nothing: tokens after the first over
  the passes' cost in one-token decodes (a pass verifying k drafted tokens costs c(k + 1));
- efficiency: the speedup measured over that ceiling: what the loop, the drafting costs and
  the host work lose.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.core.bench.results import RunResult, tau
from specchat.core.decoding.pricing.cost_curve import CostCurve, decode_cost

DEFINITIONS = {
    "tau": "tokens per target forward pass, N / (N - accepted), pooled over the repeats",
    "ceiling": "speedup the passes made allow on the machine's measured cost curve with free "
    "drafting and no host work: (tokens - 1) / sum over passes after the first token of "
    "cost(rows) / cost(1), pooled over the repeats",
    "efficiency": "speedup_vs_off / ceiling: the share of what the passes allow that the "
    "engine got",
    "cost_curve": "cost of one target llama_decode of n tokens relative to one token, the "
    "median of a few decodes per n, each timed beside a one-token decode, on this machine before "
    "the runs",
}


def pooled_tau(runs: Sequence[RunResult]) -> float | None:
    known = [r for r in runs if r.accepted is not None]
    if not known:
        return None
    return tau(sum(r.tokens for r in known), sum(r.accepted or 0 for r in known))


def pooled_ceiling(runs: Sequence[RunResult], curve: CostCurve | None) -> float | None:
    """None without a curve or without every run's passes (peers do not report them)."""
    if curve is None or not runs:
        return None
    tokens = cost = 0.0
    for r in runs:
        if r.plain_steps is None or r.draft_pos_proposed is None:
            return None
        tokens += max(r.tokens - 1, 0)
        cost += decode_cost(curve, r.draft_pos_proposed, r.plain_steps)
    return tokens / cost if cost > 0 and tokens > 0 else None


def figures(
    runs: Sequence[RunResult], curve: CostCurve | None, speedup: float | None
) -> dict[str, float | None]:
    """tau, ceiling and efficiency of one (prompt, variant)."""
    ceiling = pooled_ceiling(runs, curve)
    eff = None if ceiling is None or speedup is None or ceiling <= 0 else speedup / ceiling
    return {"tau": pooled_tau(runs), "ceiling": ceiling, "efficiency": eff}
