"""Speculation counters from a server's Prometheus `/metrics` text (no Qt, no network).

- llama-server (started with `--metrics`): `llamacpp:spec_decode_num_drafts_total`
  (verification steps), `llamacpp:spec_decode_num_draft_tokens_total`,
  `llamacpp:spec_decode_num_accepted_tokens_total` and
  `llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`.
- vLLM (only when started with a speculative config): the same names under `vllm:`, with
  `engine` and `model_name` labels (summed over engines, filtered by model).
- SGLang: the gauges `sglang:spec_accept_rate` and `sglang:spec_accept_length`, averages over
  the server's recent batches, not counters: they describe the server, not one reply.

Counters are server-wide: a reply's figures are the difference between a snapshot taken before
it and one after, which is exact only while nobody else uses the server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from specchat.core.remote.checks import METRICS, Inconsistent

__all__ = ["Sample", "SglangGauges", "SpecCounters", "parse_prometheus"]

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def _parse_labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            break
        value = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        out[m.group(1)] = value
        pos = m.end()
    return out


def parse_prometheus(text: str) -> Iterator[Sample]:
    """Every sample line of a Prometheus text exposition (comments and junk skipped)."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        yield Sample(m.group("name"), _parse_labels(m.group("labels") or ""), value)


@dataclass(frozen=True)
class SpecCounters:
    """One snapshot of a server's speculation counters (or, from `minus`, the change between
    two). `drafts` counts verification steps: drafts the target checked."""

    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: tuple[int, ...] = ()  # steps in which draft position i was accepted

    @classmethod
    def from_text(cls, text: str, prefix: str, model: str | None = None) -> SpecCounters | None:
        """The counters under `prefix` ("llamacpp:" or "vllm:"); None when the server exposes
        none (no speculation configured, or an older server). `model` keeps only samples whose
        `model_name` label matches (vLLM). A counter below zero or infinite raises
        Inconsistent (`METRICS`)."""
        totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
        names = {
            f"{prefix}spec_decode_num_drafts_total": "drafts",
            f"{prefix}spec_decode_num_draft_tokens_total": "draft_tokens",
            f"{prefix}spec_decode_num_accepted_tokens_total": "accepted",
        }
        per_pos_name = f"{prefix}spec_decode_num_accepted_tokens_per_pos_total"
        per_pos: dict[int, float] = {}
        seen = False
        for s in parse_prometheus(text):
            if model and s.labels.get("model_name", model) != model:
                continue
            key = names.get(s.name)
            if (key is not None or s.name == per_pos_name) and not (
                math.isfinite(s.value) and s.value >= 0
            ):
                raise Inconsistent(METRICS, f"{s.name} = {s.value:g}")
            if key is not None:
                totals[key] += s.value
                seen = True
            elif s.name == per_pos_name:
                try:
                    pos = int(s.labels.get("position", ""))
                except ValueError:
                    continue
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
        if not seen:
            return None
        n = max(per_pos) + 1 if per_pos else 0
        return cls(
            drafts=int(totals["drafts"]),
            draft_tokens=int(totals["draft_tokens"]),
            accepted=int(totals["accepted"]),
            per_pos=tuple(int(per_pos.get(i, 0.0)) for i in range(n)),
        )

    def minus(self, before: SpecCounters | None) -> SpecCounters:
        """The change since `before` (a server restart in between gives the counts as they
        are: counters only grow, so smaller drafts or draft tokens mean they started again from
        zero). Accepted tokens falling while the drafts grew raise Inconsistent (`METRICS`)."""
        if before is None:
            return self
        if self.drafts < before.drafts or self.draft_tokens < before.draft_tokens:
            return self
        n = max(len(self.per_pos), len(before.per_pos))
        now = self.per_pos + (0,) * (n - len(self.per_pos))
        old = before.per_pos + (0,) * (n - len(before.per_pos))
        if self.accepted < before.accepted:
            raise Inconsistent(METRICS, f"accepted tokens fell from {before.accepted}")
        for i, (a, b) in enumerate(zip(now, old, strict=True)):
            if a < b:
                raise Inconsistent(METRICS, f"position {i}'s accepted tokens fell from {b}")
        return SpecCounters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted=self.accepted - before.accepted,
            per_pos=tuple(a - b for a, b in zip(now, old, strict=True)),
        )

    def trimmed_per_pos(self) -> tuple[int, ...]:
        """Per-position counts without the trailing positions nothing reached."""
        out = list(self.per_pos)
        while out and out[-1] == 0:
            out.pop()
        return tuple(out)


@dataclass(frozen=True)
class SglangGauges:
    """SGLang's speculation gauges: recent server-wide averages, not this reply's."""

    accept_rate: float | None
    accept_length: float | None

    @classmethod
    def from_text(cls, text: str, model: str | None = None) -> SglangGauges | None:
        rate = length = None
        for s in parse_prometheus(text):
            if model and s.labels.get("model_name", model) != model:
                continue
            if s.name == "sglang:spec_accept_rate":
                rate = s.value
            elif s.name == "sglang:spec_accept_length":
                length = s.value
        if rate is None and length is None:
            return None
        return cls(rate, length)
