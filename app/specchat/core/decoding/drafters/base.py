"""What every drafter is to the decoder: one interface (`Drafter`), one shape for what it
proposes (`Proposal`), and the names of the kinds of drafter (`DrafterKind`).

A step asks a drafter for up to `limit` tokens after the conversation so far (`propose`), has
the target verify them, tells the drafter how many were kept (`feedback`), and cuts the
drafter's own state back to the tokens the conversation now holds (`rollback`). A drafter that
drafts from the target's own hidden states (an MTP head, a Gemma 4 assistant) `reads_target`:
the decoder shows it every target decode (`observe_target`). A drafter whose drafting costs
target-like work (a draft model, an MTP head) is `costly`: the decoder sizes its draft before
asking for it. One that only looks things up (lookup) is not: it proposes the most
it can, and the pricing keeps the part worth verifying (`Proposal.cut`).

The drafters also answer llama-cpp-python's `LlamaDraftModel` call (`__call__(input_ids,
**kwargs)` -> draft ids), so the benchmark's stock peer can wrap them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from specchat.core.decoding.choosing.dist import Dist, Uniform
    from specchat.core.decoding.choosing.sampling import Warp
    from specchat.core.decoding.runtime import ModelRuntime


class DrafterKind(str, Enum):
    """The kinds of drafter; the value names it in plans, costs and statistics."""

    MODEL = "draft"  # a small draft model with the target's vocabulary
    LOOKUP = "lookup"  # n-grams of the conversation and the earlier ones
    MTP = "mtp"  # the target's own multi-token-prediction head, or a Gemma 4 assistant

    def __str__(self) -> str:
        return self.value


@dataclass
class Proposal:
    """Drafted tokens, with what the decoder and the pricing need to know of them.

    `q`: the distribution each token was drawn from (a sampling drafter at T > 0), None for a
    deterministic draft. `classes()`: each token's acceptance class (the pricing learns one
    estimate per drafter and class). `source`: where the draft came from, for the statistics."""

    tokens: list[int] = field(default_factory=list)
    q: list[Dist] | None = None
    source: str = ""

    def classes(self) -> list[str]:
        return [""] * len(self.tokens)

    def first_class(self) -> str:
        return ""

    def copy_match(self) -> int:
        """How long a match of the text the first token continues (a copy's evidence; 0 for
        a drafter that copies nothing)."""
        return 0

    def is_guess(self) -> bool:
        """Whether the draft is a fresh guess with nothing behind it (no copy, no proposal the
        text just followed): a drafter's own mode risks on one only what the reply has won."""
        return False

    def cut(self, k: int) -> Proposal:
        """The first k tokens (the pricing's choice), as a proposal of their own."""
        q = self.q[:k] if self.q is not None else None
        return Proposal(self.tokens[:k], q, self.source)


@dataclass(frozen=True)
class DraftSettings:
    """How a costly drafter drafts in this reply: the warp its tokens are chosen with (None:
    greedy, no penalty), the uniform numbers it draws with, the confidence below which it
    stops, and how much of the context a repeat penalty looks back on. `more`: asked, by a
    drafter that can look far (lookup), once it has a few tokens, whether looking further is
    worth it (the pricing's answer: a guess it refuses costs no 64-token walk). `ends`: the
    target's end-of-generation tokens; lookup drafts none after one (the reply ends there, and
    a copy of a message goes on into the chat template's next turn)."""

    warp: Warp | None = None
    rng: Uniform | None = None
    p_min: float = 0.0
    history_tail: int = 64
    more: Callable[[Proposal], bool] | None = None
    ends: frozenset[int] = frozenset()


class Drafter(Protocol):
    """What the decoder asks of every drafter."""

    kind: DrafterKind
    costly: bool  # drafting runs a model: the decoder sizes the draft before asking
    name: str  # what the window and the statistics call it ("draft model", "Built-in MTP")
    reads_target: bool  # it drafts from the target's own hidden states (observe_target)
    catch_up_s: float  # seconds the last proposal spent on tokens it had not seen

    @property
    def k(self) -> int:
        """The draft length it adapts to by itself (its own mode drafts this many)."""
        ...

    @property
    def runtime(self) -> ModelRuntime | None:
        """The llama context it drafts with, if it has one of its own (its draft chain and
        clocks; a model that cannot roll back cannot draft)."""
        ...

    def lag(self, context_len: int) -> int:
        """Tokens of a context this long it would catch up before drafting."""
        ...

    def begin(self, prompt: Sequence[int]) -> None:
        """A new reply after `prompt`: keep what the drafter's state shares with it."""

    def propose(self, context: Sequence[int], limit: int, settings: DraftSettings) -> Proposal:
        """Up to `limit` tokens after `context` (the conversation so far)."""
        ...

    def feedback(self, proposal: Proposal, sent: int, accepted: int) -> None:
        """The target judged the first `sent` tokens of `proposal` and kept `accepted`."""

    def rollback(self, kept: int) -> None:
        """The conversation now agrees with the drafter's state for its first `kept` tokens."""

    def observe_target(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        """The target just decoded `tokens` at positions `start`.. in one call, with logits
        for `outputs` ("all", "last", "none") of them (only drafters that `reads_target`)."""
