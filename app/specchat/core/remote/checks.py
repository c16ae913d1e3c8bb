"""The one validation step every figure a server reports goes through (no Qt, no network).

A server may send anything: negative counts, more tokens accepted than drafted, counters that
go backwards between two chunks, strings where numbers belong. None of that may reach the
gauge, the stats, the history or the benchmark as if it were measured. Each check here either
returns a value that can be true or raises `Inconsistent`, whose text is the stats' note
("the server's draft figures are inconsistent (accepted 9999 of 3 drafted): not shown").

Figures come in groups, dropped one group at a time (the reply's text is always kept):

- `DRAFT`: what the server drafted and accepted (llama-server's `draft_n` /
  `draft_n_accepted`, SGLang's `meta_info`);
- `COUNTS`: token counts and times (llama-server's `predicted_n`, `prompt_ms`…, `usage`);
- `METRICS`: the speculation counters of `/metrics`.

Plausible-but-noisy values are not this module's business: a `/metrics` change that also
counted another client's requests is consistent, and `core.engines.remote` handles it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = [
    "COUNTS",
    "DRAFT",
    "METRICS",
    "Inconsistent",
    "at_most",
    "count",
    "duration",
    "not_backwards",
    "per_position",
]

DRAFT = "draft figures"
COUNTS = "token counts and times"
METRICS = "/metrics counters"

_CONSEQUENCE = {DRAFT: "not shown", COUNTS: "not used", METRICS: "not used"}


class Inconsistent(ValueError):
    """A figure that cannot be true. `str()` is the note for the stats."""

    def __init__(self, group: str, detail: str) -> None:
        self.group = group
        self.detail = detail
        consequence = _CONSEQUENCE.get(group, "not used")
        super().__init__(f"the server's {group} are inconsistent ({detail}): {consequence}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def count(data: Mapping[str, object], key: str, group: str) -> int | None:
    """A count: None when the key is absent (or null), else a whole number >= 0."""
    v = data.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Inconsistent(group, f"{key} = {_show(v)}, not a number")
    if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
        raise Inconsistent(group, f"{key} = {_show(v)}, not a whole number")
    if v < 0:
        raise Inconsistent(group, f"{key} = {_show(v)}, below zero")
    return int(v)


def duration(data: Mapping[str, object], key: str, group: str) -> float | None:
    """A time or a rate: None when absent, else a finite number >= 0."""
    v = data.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Inconsistent(group, f"{key} = {_show(v)}, not a number")
    if not math.isfinite(v) or v < 0:
        raise Inconsistent(group, f"{key} = {_show(v)}")
    return float(v)


def at_most(part: int | None, whole: int | None, group: str, what: str) -> None:
    """`part` of `whole` ("accepted 9999 of 3 drafted"): part may not exceed whole."""
    if part is not None and whole is not None and part > whole:
        raise Inconsistent(group, what.format(part=part, whole=whole))


def not_backwards(key: str, now: float | None, before: float | None, group: str) -> None:
    """A running total within one reply only grows (absent after present is a fall to 0)."""
    if before is None:
        return
    if now is None or now < before:
        shown = "vanished" if now is None else f"went from {before:g} to {now:g}"
        raise Inconsistent(group, f"{key} {shown}")


def _whole(v: object, key: str, group: str) -> int:
    n = count({key: v}, key, group)
    if n is None:
        raise Inconsistent(group, f"{key} holds null")
    return n


def per_position(values: object, steps: int, group: str, key: str) -> tuple[int, ...]:
    """Per-position acceptance counts: whole numbers, none above the verification steps."""
    if values is None:
        return ()
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise Inconsistent(group, f"{key} = {_show(values)}, not a list")
    out = tuple(_whole(v, key, group) for v in values)
    for i, n in enumerate(out):
        if n > steps:
            raise Inconsistent(group, f"position {i} accepted {n} times in {steps} steps")
    return out
