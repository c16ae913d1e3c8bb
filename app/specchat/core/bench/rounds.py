"""Whether a speedup measured over several rounds can be shown as a figure (no Qt).

A comparison alternates speculation off and on in short rounds; each round gives one speedup
(on / off tokens per second). `judge_rounds` turns them into the figure a user sees: the median
with its spread, "×1.12 (0.98–1.20 over 3 rounds)", or no figure and a sentence saying why:

- a run was disturbed: other processes used more than `busy.BUSY_SHARE` of the machine's CPU
  time during any single run (one disturbed run is enough to withhold the figure);
- the rounds disagree: their speedups spread (highest minus lowest) over more than
  `SPREAD_LIMIT` of the median;
- fewer than `MIN_ROUNDS` rounds finished: one round cannot show that the figure repeats.

The median of an even number of rounds is the lower middle one, so the figure is always one
round's measurement (`Verdict.middle` says which).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specchat.core.machine.busy import BUSY_SHARE, CpuUse

__all__ = ["MIN_ROUNDS", "SPREAD_LIMIT", "Verdict", "judge_rounds"]

SPREAD_LIMIT = 0.25  # rounds disagree when (highest - lowest) speedup > this × the median
MIN_ROUNDS = 2


@dataclass(frozen=True)
class Disturbed:
    """The most disturbed run: which round and pass, and how much CPU others took."""

    round: int  # 1-based
    run: str  # the pass name ("off", "on", ...)
    use: CpuUse


@dataclass(frozen=True)
class Verdict:
    speedups: tuple[float, ...]  # per finished round, in order
    middle: int | None  # index of the median round in `speedups`
    reliable: bool
    reason: str  # why there is no figure ("" when reliable)
    disturbed: Disturbed | None = None
    watched: bool = True  # the CPU use of the runs was measured (an in-process engine)

    @property
    def median(self) -> float | None:
        return None if self.middle is None else self.speedups[self.middle]

    @property
    def low(self) -> float | None:
        return min(self.speedups) if self.speedups else None

    @property
    def high(self) -> float | None:
        return max(self.speedups) if self.speedups else None

    def headline(self) -> str:
        """ "×1.12 (0.98–1.20 over 3 rounds)" when reliable; else ""."""
        if not self.reliable or self.median is None:
            return ""
        n = len(self.speedups)
        return f"×{self.median:.2f} ({self.low:.2f}–{self.high:.2f} over {n} rounds)"

    def as_dict(self) -> dict[str, Any]:
        d = self.disturbed
        return {
            "speedups": [round(s, 4) for s in self.speedups],
            "median": None if self.median is None else round(self.median, 4),
            "low": None if self.low is None else round(self.low, 4),
            "high": None if self.high is None else round(self.high, 4),
            "reliable": self.reliable,
            "reason": self.reason,
            "cpu_watched": self.watched,
            "busy_share_limit": BUSY_SHARE,
            "spread_limit": SPREAD_LIMIT,
            "disturbed": None if d is None else {"round": d.round, "run": d.run, **d.use.as_dict()},
        }


def _most_disturbed(uses: Sequence[Sequence[tuple[str, CpuUse | None]]]) -> Disturbed | None:
    worst: Disturbed | None = None
    for i, runs in enumerate(uses):
        for name, use in runs:
            if use is not None and (worst is None or use.others_share > worst.use.others_share):
                worst = Disturbed(i + 1, name, use)
    return worst


def _busy_reason(d: Disturbed) -> str:
    names = ", ".join(name for name, _ in d.use.top)
    close = f"close {names}" if names else "close other programs"
    return (
        f"the machine was busy during the runs: other processes used "
        f"{d.use.others_share:.0%} of the CPU during round {d.round} ({d.run}); "
        f"this figure is unreliable; {close} and run again"
    )


def judge_rounds(
    speedups: Sequence[float],
    uses: Sequence[Sequence[tuple[str, CpuUse | None]]] = (),
    *,
    watched: bool = True,
) -> Verdict:
    """The verdict on per-round `speedups`, given each round's runs' CPU use.

    `uses[i]` lists round i's runs as (pass name, CpuUse or None when not measured).
    `watched=False` says the work ran elsewhere (a server): others' CPU use is not judged.
    """
    values = tuple(float(s) for s in speedups)
    middle = None
    if values:
        order = sorted(range(len(values)), key=values.__getitem__)
        middle = order[(len(values) - 1) // 2]
    disturbed = _most_disturbed(uses) if watched else None
    reason = ""
    if disturbed is not None and disturbed.use.busy:
        reason = _busy_reason(disturbed)
    elif len(values) < MIN_ROUNDS:
        reason = (
            f"only {len(values)} round finished; one round cannot show that the figure "
            "repeats; run again with more rounds"
        )
    else:
        med, spread = values[middle or 0], max(values) - min(values)
        if med <= 0 or spread > SPREAD_LIMIT * med:
            reason = (
                f"the rounds disagree (×{min(values):.2f} to ×{max(values):.2f}, more than "
                f"{SPREAD_LIMIT:.0%} of the median apart); this figure is unreliable; "
                "close other programs and run again"
            )
    return Verdict(values, middle, not reason, reason, disturbed, watched)
