"""The lookup drafter on hand-made token streams: span copies up to 64 tokens from the first
step, the longest match before the most frequent continuation, the earlier conversations as a
second source, and an index kept right when the conversation is unwound."""

from __future__ import annotations

import numpy as np

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.drafters.history_index import HistoryIndex
from specchat.core.decoding.drafters.lookup_proposal import CONVERSATION, HISTORY
from specchat.core.decoding.drafters.ngram import FIRST_LOOK, NgramDrafter
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.cost_model import CostModel

LOOKUP = DrafterKind.LOOKUP


def span(n: int, seed: int) -> list[int]:
    """n distinct-looking token ids (no n-gram repeats inside)."""
    return [int(t) for t in np.random.default_rng(seed).choice(50_000, size=n, replace=False)]


def test_a_copy_in_progress_drafts_the_rest_of_the_span_from_the_first_step() -> None:
    doc = span(200, 1)
    d = NgramDrafter()
    d.begin([*span(30, 2), *doc, *span(10, 3), *doc[:40]])  # the reply has copied 40 tokens
    prop = d.look(64)
    assert prop.tokens == doc[40:104]
    assert prop.source == CONVERSATION
    assert prop.context[0] == 40  # the whole copy so far, not the n-gram's 8 tokens
    assert prop.classes()[0] == "span32/c95"


def test_a_fresh_match_is_sized_by_its_length() -> None:
    doc = span(100, 4)
    d = NgramDrafter()
    d.begin([*doc, *span(10, 5), *doc[:5]])
    prop = d.look(64)
    assert prop.tokens[:10] == doc[5:15]
    assert prop.context[:3] == [5, 6, 7]  # the match grows along the draft
    assert prop.classes()[:2] == ["o-mid/c95", "long/c95"]  # the first token is an opening


def test_a_guess_the_text_followed_is_no_opening_and_a_steeper_curve_drafts_only_that() -> None:
    """The first token of a proposal is an opening guess (`o-`, a lower prior) unless the text
    has just followed the drafter's last proposal. On a curve where a refused token costs most
    of a decode, a fresh 8-token match is not verified; once the text has taken the token it
    proposed, the same copy is. Fails if openings are not told apart (both or neither drafts)
    or if following is not remembered from one proposal to the next."""
    doc = span(100, 40)
    d = NgramDrafter()
    d.begin([*doc, *span(10, 41), *doc[:8]])
    curve = CostCurve(((1, 1.0), (2, 1.7), (5, 3.6), (9, 5.5), (17, 7.5), (65, 27.0)))
    cm = CostModel(curve=curve)
    cm.steps.t1 = 0.01
    fresh = d.look(64)
    assert fresh.classes()[0] == "o-long/c95"
    assert cm.steps.best_chain(LOOKUP, cm.acceptances(LOOKUP, fresh.classes()))[0] == 0
    d.extend([fresh.tokens[0]])  # a plain step: the target chose the proposed token
    followed = d.look(64)
    assert followed.tokens[:4] == doc[9:13]
    assert followed.classes()[0] == "long/c95"
    assert cm.steps.best_chain(LOOKUP, cm.acceptances(LOOKUP, followed.classes()))[0] > 0
    d.extend([*followed.tokens[:3], 7])  # three drafts accepted, the fourth refused: a 7
    assert not d.look(64).tokens  # nothing was ever followed by a 7
    d.extend(doc[12:20])  # the text comes back to the copy on its own: an opening again
    again = d.look(64)
    assert again.tokens[:2] == doc[20:22] and again.classes()[0] == "o-long/c95"
    d.extend(again.tokens[:2])  # two drafts accepted, and the proposal went further
    assert d.look(64).classes()[0] == "long/c95"


def test_the_draft_stops_where_the_copied_text_ends() -> None:
    doc = span(50, 6)
    d = NgramDrafter()
    tail = span(20, 7)
    d.begin([*doc, *tail, *doc[:30]])
    prop = d.look(64)
    # doc[30:] and then what followed the copy the first time (the tail), as far as it goes
    assert prop.tokens[:20] == doc[30:]
    assert prop.tokens[20:40] == tail


def test_the_longest_match_beats_a_more_frequent_continuation() -> None:
    ctx = span(8, 8)
    a, b = 60_001, 60_002
    long_span = span(40, 9)
    text = []
    for i in range(3):  # ctx is followed by `a` three times, after unrelated text
        text += span(12, 100 + i) + ctx + [a]
    text += long_span + ctx + [b] + span(5, 10)  # once by `b`, inside a long span
    d = NgramDrafter()
    d.begin([*text, *span(7, 11), *long_span, *ctx])
    assert d.look(1).tokens == [b]
    d.begin([*text, *span(7, 11), *ctx])  # a short match: the most frequent wins
    assert d.look(1).tokens == [a]


def test_a_refused_span_token_is_trusted_less() -> None:
    doc = span(100, 12)
    d = NgramDrafter()
    d.begin([*doc, *span(5, 13), *doc[:30]])
    prop = d.look(8)
    d.feedback(prop, 8, 0)  # the target refused the first token
    again = d.look(8)
    assert again.confidence[0] < 1.0
    assert again.classes()[0] != prop.classes()[0]


def test_unwinding_to_another_conversation_forgets_where_spans_were() -> None:
    doc = span(60, 14)
    d = NgramDrafter()
    d.begin([*doc, *span(4, 15), *doc[:20]])
    assert d.look(4).tokens == doc[20:24]
    other = span(40, 16)
    d.begin([*doc[:10], *other, *doc[:5]])  # shares 10 tokens, then differs
    prop = d.look(64)
    assert prop.tokens[:5] == doc[5:10]  # only what this text holds
    assert prop.tokens[5:45] == other


def history_with(doc: list[int]) -> HistoryIndex:
    h = HistoryIndex()
    h.add([span(30, 20), [*span(10, 21), *doc, *span(10, 22)]])
    h.finish()
    return h


def sampled_prefix(h: HistoryIndex, doc: list[int], start: int) -> int:
    """A prefix length of doc (from `start`) whose last gram the history index sampled."""
    for n in range(start, len(doc)):
        if h.propose(doc[:n], 1) is not None:
            return n
    raise AssertionError("no sampled gram in the document")


def test_the_earlier_conversations_draft_when_this_one_has_no_match() -> None:
    doc = span(150, 23)
    h = history_with(doc)
    d = NgramDrafter(history=h)
    n = sampled_prefix(h, doc, 6)
    d.begin([*span(20, 24), *doc[:n]])
    prop = d.look(64)
    assert prop.source == HISTORY
    assert prop.tokens == doc[n : n + 64]
    assert prop.classes()[0].startswith("o-h-")  # an opening, from the history
    # accepted: the next step follows the same span, whatever gram the text ends on
    d.feedback(prop, 10, 10)
    d.extend(doc[n : n + 11])  # 10 accepted drafts and the target's own token
    follow = d.look(64)
    assert follow.source == HISTORY
    assert follow.tokens == doc[n + 11 : n + 75]
    # the target went elsewhere: the span is dropped, nothing is made up
    d.feedback(follow, 5, 2)
    d.extend([*doc[n + 11 : n + 13], 61_000])
    assert d.look(64).tokens == []


def test_no_draft_goes_past_an_end_token_in_either_source() -> None:
    """A copy of this conversation and one of the earlier ones both stop at the target's end
    token, drafting it (the reply may end there) and nothing after it. Fails if either source
    walks on past it."""
    end = 60_000
    doc = span(150, 26)
    stops = [*doc[:30], end, *doc[30:]]
    d = NgramDrafter()
    d.begin([*span(20, 27), *stops, *span(10, 28), *doc[:20]])
    assert d.look(64, ends=frozenset({end})).tokens == [*doc[20:30], end]
    assert len(d.look(64).tokens) == 64  # (without ends: on into what follows the end)
    h = history_with(stops)
    n = sampled_prefix(h, stops, 6)
    d = NgramDrafter(history=h)
    d.begin([*span(20, 24), *stops[:n]])
    prop = d.look(64, ends=frozenset({end}))
    assert prop.source == HISTORY and prop.tokens == stops[n:31]


def test_without_history_nothing_comes_from_it() -> None:
    doc = span(150, 25)
    h = history_with(doc)
    n = sampled_prefix(h, doc, 6)
    d = NgramDrafter()
    d.begin([*span(20, 24), *doc[:n]])
    assert d.look(64).tokens == []


def test_a_gpu_shaped_cost_curve_verifies_the_whole_copy() -> None:
    """With the flat curve the planner takes the whole 64-token span on offer; with a CPU's
    steep curve it takes a shorter one."""
    doc = span(200, 26)
    d = NgramDrafter()
    d.begin([*doc, *span(5, 27), *doc[:40]])
    prop = d.look(64)
    flat = CostModel(curve=CostCurve.flat())
    flat.t1 = 0.01
    alphas = flat.acceptances(LOOKUP, prop.classes())
    assert flat.chosen_chain(LOOKUP, alphas) == 64
    steep = CostModel(curve=CostCurve(((1, 1.0), (17, 11.0), (65, 44.0))))
    steep.t1 = 0.01
    k = steep.chosen_chain(LOOKUP, alphas)
    assert 1 <= k < 64


def test_a_one_token_match_is_a_guess_only_a_flat_curve_verifies() -> None:
    """By default lookup proposes from a match of a single token, priced as the guess it is
    (about a third of such tokens are accepted): the flat curve verifies it, a CPU's steep
    curve does not until acceptance measured on this text says otherwise."""
    text = span(60, 28)
    d = NgramDrafter()
    d.begin([*text, text[10]])  # only the last token matches, once
    prop = d.look(64)
    assert prop.tokens[:3] == text[11:14]
    assert prop.classes()[:3] == ["o-one/c95", "two/c95", "short/c95"]
    flat = CostModel(curve=CostCurve.flat())
    flat.t1 = 0.01
    assert flat.chosen_chain(LOOKUP, flat.acceptances(LOOKUP, prop.classes())) >= 1
    steep = CostModel(curve=CostCurve(((1, 1.0), (2, 1.73), (5, 3.99), (17, 11.5))))
    steep.t1 = 0.01
    assert steep.steps.best_chain(LOOKUP, steep.acceptances(LOOKUP, prop.classes()))[0] == 0


def test_a_draft_the_planner_refuses_is_not_walked_to_its_end() -> None:
    """propose(more=...) drafts FIRST_LOOK tokens, and the rest of a 64-token copy only when
    the planner would verify all of those (the host walks no 64 tokens for a refused guess)."""
    doc = span(200, 29)
    d = NgramDrafter()
    d.begin([*doc, *span(5, 30), *doc[:40]])
    seen: list[list[int]] = []

    def refuse(first) -> bool:
        seen.append(list(first.tokens))
        return False

    assert d.look(64, more=refuse).tokens == doc[40 : 40 + FIRST_LOOK]
    assert seen == [doc[40 : 40 + FIRST_LOOK]]
    assert d.look(64, more=lambda first: True).tokens == doc[40:104]


def test_the_longest_context_bound_never_changes_a_proposal() -> None:
    """Each search for the longest context starts from the last one found plus the tokens
    since (not from n_max). Over a text of short repeats, copies and fresh tokens, every
    proposal equals the one a drafter that has just indexed the whole text makes, and each of
    its tokens continues the longest context (up to 8 tokens) the text holds before it."""
    rng = np.random.default_rng(41)
    text = [int(t) for t in rng.integers(0, 30, size=60)]
    while len(text) < 700:  # fresh tokens from a small vocabulary, and copies of earlier text
        if rng.random() < 0.3:
            at = int(rng.integers(0, len(text) - 40))
            text += text[at : at + int(rng.integers(10, 40))]
        else:
            text += [int(t) for t in rng.integers(0, 30, size=int(rng.integers(1, 12)))]
    contexts: set[tuple[int, ...]] = set()  # every n-gram (n <= 8) some token followed

    def index(upto: int) -> None:
        for q in range(len_indexed[0], upto):
            contexts.update(tuple(text[q - n : q]) for n in range(1, min(8, q) + 1))
        len_indexed[0] = upto

    def longest(ctx: list[int]) -> int:
        return next((n for n in range(min(8, len(ctx)), 0, -1) if tuple(ctx[-n:]) in contexts), 0)

    d = NgramDrafter()
    d.begin(text[:60])
    seen, checked, grew, len_indexed = 60, 0, 0, [1]
    while seen < len(text):
        step = int(rng.integers(1, 6))  # a plain step, or a verification's few tokens
        d.extend(text[seen : seen + step])
        seen += step
        index(seen)
        got = d.look(16)
        fresh = NgramDrafter()
        fresh.begin(text[:seen])
        want = fresh.look(16)
        assert (got.tokens, got.confidence, got.context, got.keys) == (
            want.tokens,
            want.confidence,
            want.context,
            want.keys,
        )
        for i, key in enumerate(got.keys):
            ctx = text[:seen] + got.tokens[:i]
            assert len(key) == longest(ctx) and list(key) == ctx[-len(key) :]
        checked += bool(got.tokens)
        grew += any(len(b) > len(a) for a, b in zip(got.keys, got.keys[1:], strict=False))
    assert checked > 100 and grew > 50  # most steps proposed; many walks' contexts grew
