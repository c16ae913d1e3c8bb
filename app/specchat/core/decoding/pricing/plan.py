"""What Auto's cost model hands the decoder each step: a `Plan` (which drafter, how many tokens,
and why), its reason kept as a `Why` until it is shown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specchat.core.decoding.drafters.base import DrafterKind


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
    drafter: DrafterKind | None  # None for a plain step
    k: int
    speedup: float  # expected rate relative to plain decoding
    why: Why
    rest: int = 0  # Auto: steps that look for no lookup draft (lookup far from paying)

    @property
    def reason(self) -> str:
        return str(self.why)
