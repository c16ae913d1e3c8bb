"""Small statistics for benchmark figures: median, geometric mean, a guarded ratio."""

from __future__ import annotations

import math
from collections.abc import Iterable


def median(xs: Iterable[float]) -> float | None:
    v = sorted(xs)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def geomean(xs: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive finite values (None when there are none)."""
    v = [x for x in xs if x is not None and math.isfinite(x) and x > 0]
    if not v:
        return None
    return math.exp(sum(math.log(x) for x in v) / len(v))


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0 or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b
