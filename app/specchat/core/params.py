"""What one reply is asked for: sampling, limits and drafting settings (`GenerationParams`),
refused when absurd, and built from user-facing settings in one place (`params_from`). No Qt,
no llama.cpp."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class GenerationParams:
    """Sampling and speculation settings for one reply. `validate()` refuses absurd values."""

    max_tokens: int = 512
    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    repeat_penalty: float = 1.0  # 1 = off
    repeat_last_n: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # speculation
    k_max: int = 8  # most tokens drafted per verification step
    k_init: int = 4  # first draft length (adapted to acceptance afterwards)
    p_min: float = 0.5  # model draft stops when its top probability falls below this
    # lookup drafts only after a match this long (tokens); the cost model decides whether a
    # short match is worth verifying (on a GPU it is, on a CPU it rarely is)
    lookup_min_match: int = 1
    lookup_max_ngram: int = 8
    lookup_k_max: int = 64  # most tokens a lookup draft copies (drafting from text costs nothing)
    # diagnostics: record the target's top-2 logits for every emitted token
    record_top2: bool = False

    def validate(self) -> GenerationParams:
        problems: list[str] = []

        def need(ok: bool, text: str) -> None:
            if not ok:
                problems.append(text)

        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                problems.append(f"{f.name} must be a finite number, not {v}")
        need(1 <= self.max_tokens <= 1_000_000, "max_tokens must be between 1 and 1,000,000")
        need(0.0 <= self.temperature <= 10.0, "temperature must be between 0 and 10")
        need(0 <= self.top_k <= 1_000_000, "top_k must be 0 (off) or a positive count")
        need(0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]")
        need(0.0 <= self.min_p < 1.0, "min_p must be in [0, 1)")
        need(0.0 < self.repeat_penalty <= 10.0, "repeat_penalty must be in (0, 10]")
        need(0 <= self.repeat_last_n <= 100_000, "repeat_last_n must be 0 or a positive count")
        need(self.seed is None or 0 <= self.seed < 2**63, "seed must be a non-negative integer")
        need(1 <= self.k_max <= 64, "k_max must be between 1 and 64")
        need(1 <= self.k_init <= self.k_max, "k_init must be between 1 and k_max")
        need(0.0 <= self.p_min < 1.0, "p_min must be in [0, 1)")
        need(1 <= self.lookup_min_match <= 64, "lookup_min_match must be between 1 and 64")
        need(
            self.lookup_min_match <= self.lookup_max_ngram <= 64,
            "lookup_max_ngram must be between lookup_min_match and 64",
        )
        need(1 <= self.lookup_k_max <= 64, "lookup_k_max must be between 1 and 64")
        need(all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty")
        if problems:
            raise ValueError("invalid generation settings: " + "; ".join(problems))
        return self

    def with_(self, **changes: object) -> GenerationParams:
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """The settings a reply was made with (saved beside it, written into reports)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "record_top2"}
        out["stop"] = list(self.stop)
        return out


_PARAM_NAMES = tuple(f.name for f in fields(GenerationParams))


def params_from(source: object, **overrides: Any) -> GenerationParams:
    """The one place generation parameters are built from user-facing settings: any object
    (the window's `Settings`, the CLI's parsed flags) or mapping whose attributes or keys carry
    `GenerationParams` field names. Missing names keep their defaults; `k_init` follows `k_max`
    (at most 4) unless given. The result is validated."""
    get = source.get if isinstance(source, Mapping) else lambda n: getattr(source, n, None)
    values: dict[str, Any] = {}
    for name in _PARAM_NAMES:
        v = get(name)
        if v is not None or name == "seed" and _has(source, name):
            values[name] = v
    if isinstance(values.get("stop"), (list, str)):
        stop = values["stop"]
        values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
    values.update(overrides)
    if "k_init" not in values and "k_max" in values:
        values["k_init"] = max(1, min(4, int(values["k_max"])))
    return GenerationParams(**values).validate()


def _has(source: object, name: str) -> bool:
    return name in source if isinstance(source, Mapping) else hasattr(source, name)
