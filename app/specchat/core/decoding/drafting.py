"""What every drafter hands the decoder: a `Draft` (tokens, and the distributions they were drawn
from when the drafter samples); and what Auto's cost model hands it: a `Plan` (which drafter, how
many tokens, and why).

The drafters also answer llama-cpp-python's `LlamaDraftModel` call (`__call__(input_ids, **kwargs)`
-> draft ids), so the benchmark's stock peer can wrap them; nothing here loads llama.cpp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specchat.core.decoding.sampling import Dist

DRAFT, LOOKUP = "draft", "lookup"  # the drafters' names (in plans, costs and statistics)


@dataclass
class Draft:
    tokens: list[int]
    q: list[Dist] | None  # the draft's distribution per token; None = a deterministic draft


class Why:
    """A reason: a template and its values, formatted only when shown (a plan is made every
    step, its reason read far less often). The template may be a function of the values,
    for a reason whose figures are worth working out only when it is shown."""

    __slots__ = ("template", "args")

    def __init__(self, template: str | Callable[..., str], *args: Any) -> None:
        self.template, self.args = template, args

    def __str__(self) -> str:
        if callable(self.template):
            return self.template(*self.args)
        return self.template.format(*self.args) if self.args else self.template

    def __format__(self, spec: str) -> str:  # a reason inside another's
        return str(self)


@dataclass(frozen=True)
class Plan:
    drafter: str | None  # DRAFT, LOOKUP, or None for a plain step
    k: int
    speedup: float  # expected rate relative to plain decoding
    why: Why
    rest: int = 0  # Auto: steps that look for no lookup draft (lookup far from paying)

    @property
    def reason(self) -> str:
        return str(self.why)
