"""Lookup's copies through the reply's edits (copy_edits.py), on hand-made token streams: a
rename seen once is drafted at every later occurrence, a one-off change is forgotten after one
refused draft, and a match is measured through the edits. The replies are replayed greedily:
each step's draft is kept as far as it agrees with the reply, then the reply's own token
follows (what a target that writes the reply does)."""

from __future__ import annotations

import numpy as np

from specchat.core.decoding.drafters.base import DraftSettings
from specchat.core.decoding.drafters.copy_edits import CopyEdits, Edit
from specchat.core.decoding.drafters.lookup_proposal import SPAN
from specchat.core.decoding.drafters.ngram import NgramDrafter

OLD, NEW, NEW2, DROP = 900_001, 900_002, 900_003, 900_004


def span(n: int, seed: int) -> list[int]:
    """n distinct-looking token ids (no n-gram repeats inside)."""
    return [int(t) for t in np.random.default_rng(seed).choice(50_000, size=n, replace=False)]


def with_name(name: list[int], parts: list[list[int]]) -> list[int]:
    """The parts joined by `name` (a name used between every two stretches of code)."""
    out = list(parts[0])
    for p in parts[1:]:
        out += [*name, *p]
    return out


def replay(prompt: list[int], reply: list[int]) -> list[tuple[int, int, int]]:
    """Each verification as (where in the reply it started, tokens drafted, tokens kept)."""
    d = NgramDrafter()
    d.begin(prompt)
    text, j, steps = list(prompt), 0, []
    while j < len(reply):
        prop = d.propose(text, 64, DraftSettings())
        k = min(len(prop.tokens), len(reply) - j)
        kept = 0
        while kept < k and prop.tokens[kept] == reply[j + kept]:
            kept += 1
        if k:
            d.feedback(prop, k, kept)
            steps.append((j, k, kept))
        text += reply[j : j + kept + 1]
        j += kept + 1
    return steps


def refused_at(steps: list[tuple[int, int, int]], reply: list[int], tokens: set[int]) -> list[int]:
    """Where in the reply a draft was refused at one of `tokens`."""
    return [j + kept for j, k, kept in steps if kept < k and reply[j + kept] in tokens]


PARTS = [span(24, seed) for seed in range(10, 18)]  # eight stretches, seven uses of the name
CODE = with_name([OLD], PARTS)
PROMPT = [*span(12, 1), *CODE, *span(6, 2)]


def test_a_rename_seen_once_is_drafted_at_every_later_occurrence() -> None:
    """The reply renames OLD to a two-token name everywhere: the copy is refused at the first
    two uses only (the draft that passed the second began one token after the first new
    name, before the text had rejoined the copy: REJOIN); every later use is drafted with the
    new name inside a long copy. Fails if edits are not learned (a refusal at each of the
    seven), or not drafted where the source reads the old name."""
    reply = with_name([NEW, NEW2], PARTS)
    steps = replay(PROMPT, reply)
    uses = [i for i, t in enumerate(reply) if t == NEW]
    assert refused_at(steps, reply, {NEW}) == uses[:2]
    later = uses[2:]
    across = [(j, kept) for j, k, kept in steps if any(j < i < j + kept for i in later)]
    assert len(across) >= len(later) // 2  # drafts kept whole through the new name
    assert sum(kept for *_, kept in steps) >= len(reply) - 3 * len(PARTS[0])


def test_the_match_behind_a_copy_runs_through_the_edit() -> None:
    """Right after a later occurrence of the renamed name, the match behind the copy is the
    whole copy so far (a span), not the few tokens since the name. Fails if the match stops
    at the edit."""
    reply = with_name([NEW, NEW2], PARTS)
    cut = [i for i, t in enumerate(reply) if t == NEW][2] + 4  # past the third use, and 2 more
    d = NgramDrafter()
    d.begin(PROMPT)
    text = list(PROMPT)
    for j in range(cut):  # the reply up to `cut`, with a copy refused at the first use
        prop = d.propose(text, 64, DraftSettings())
        if prop.tokens:
            kept = next((i for i, t in enumerate(prop.tokens) if t != reply[j + i]), 1)
            d.feedback(prop, 1, min(kept, 1))
        text.append(reply[j])
    prop = d.propose(text, 64, DraftSettings())
    assert prop.context[0] >= 2 * SPAN
    assert prop.tokens[:8] == reply[cut : cut + 8]


def test_a_one_off_change_is_forgotten_after_one_refused_draft() -> None:
    """The reply changes only the first use of the name: the edit learned there is drafted at
    one later use, refused there, and never drafted again. Fails if a refused edit is kept (a
    refusal at every later use) or if the edit is never drafted (no refusal at all)."""
    reply = [*PARTS[0], NEW, NEW2, *with_name([OLD], PARTS[1:])]
    steps = replay(PROMPT, reply)
    assert len(refused_at(steps, reply, {OLD})) == 1
    assert refused_at(steps, reply, {NEW}) == [reply.index(NEW)]


def test_a_token_the_reply_drops_everywhere_is_dropped_from_the_drafts() -> None:
    """The reply removes a token after every use of the name (an annotation, say): after the
    first two uses (as in the rename above), the drafts skip it. Fails if a deletion is not
    learned or not drafted (a refusal after each of the seven)."""
    code = with_name([OLD, DROP], PARTS)
    reply = with_name([OLD], PARTS)
    steps = replay([*span(12, 1), *code, *span(6, 2)], reply)
    uses = [i for i, t in enumerate(reply) if t == OLD]
    assert [j + kept for j, k, kept in steps if kept < k] == [u + 1 for u in uses[:2]]


def test_a_name_used_twice_on_a_line_is_learned_as_one_rename() -> None:
    """The source uses the name twice a few tokens apart (`b.buf = append(b.buf, item)`); the
    edit learned is the name alone, not the stretch between the two uses. Fails if the text
    must follow the source unchanged for SURE tokens after the edit (the first rejoin that
    does is after the second use)."""
    src = span(20, 30)
    line = [*src[:3], OLD, *src[3:6], OLD, *src[6:20]]
    text = [*src[:3], NEW, NEW2, *src[3:6], NEW, NEW2, *src[6:20]]
    toks = [*span(5, 31), *line, *span(5, 32), *text]
    edits = CopyEdits()
    edits.refused(5 + 3, 5 + len(line) + 5 + 3)  # the copy drafted OLD; the text wrote NEW
    assert edits.learn(toks) == [Edit((OLD,), (NEW, NEW2))]
