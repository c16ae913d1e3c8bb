"""The decoder's bookkeeping on a deterministic stand-in runtime (tests/core/standin.py): what
the counts say when a reply ends inside a step, rollback, held-back text, and the fallbacks for
models that cannot roll back. Exactness and speed are tested on the real models elsewhere."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest
from standin import EOS, N_VOCAB, StandIn, reply_script

from specchat.core.decoding.choosing.sampling import Warp
from specchat.core.decoding.decoder import Decoder
from specchat.core.decoding.drafters.base import DrafterKind, DraftSettings
from specchat.core.decoding.drafters.draft_model import ModelDrafter
from specchat.core.decoding.drafters.lookup_proposal import OPENING
from specchat.core.decoding.drafters.ngram import NgramDrafter
from specchat.core.decoding.kv_cache import CacheBook
from specchat.core.decoding.pricing.cost_model import CostModel
from specchat.core.decoding.pricing.tuning import GROWTH
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.types import FinishReason, Mode

DRAFT = DrafterKind.MODEL
LOOKUP = DrafterKind.LOOKUP

PROMPT = [9, 10, 11]


def decoder(
    target: StandIn,
    mode: Mode,
    *,
    draft: StandIn | None = None,
    prompt: Sequence[int] = PROMPT,
    cost: CostModel | None = None,
    **kw,
) -> Decoder:
    params = GenerationParams(**({"p_min": 0.0, "k_init": 4} | kw))
    lookup = NgramDrafter(min_match=params.lookup_min_match, k_max=params.k_max)
    model = ModelDrafter(draft, k_init=params.k_init, k_max=params.k_max) if draft else None
    return Decoder(
        target,  # type: ignore[arg-type]
        prompt,
        params,
        mode,
        drafters=[lookup, model] if model is not None else [lookup],
        cost=cost or CostModel(),
    )


def confident_lookup() -> CostModel:
    """A cost model that has seen lookup drafts always accepted: it drafts as far as it can."""
    cm = CostModel(gpu=True)
    cm.steps.observe_target(1, 0.01)
    for cls in (
        f"{o}{n}/{c}"
        for o in ("", OPENING)
        for n in ("one", "two", "short")
        for c in ("c95", "c75", "c50", "c00")
    ):
        for _ in range(60):
            cm.observe_accept(LOOKUP, [cls] * 4, 4, 4)
    return cm


def run(dec: Decoder) -> Reply:
    return Reply.collect(dec.run())


def test_draft_after_an_end_token_is_not_counted() -> None:
    # The prompt holds "5 6 EOS 8 8" earlier, so after "5" lookup drafts "6 EOS 8 8": the
    # target accepts all four, but the reply ends at EOS; only 2 drafts were of any use.
    prompt = [9, 5, 6, EOS, 8, 8, 10, 11]
    target = StandIn(reply_script(len(prompt), [5, 6, EOS, 8, 8]))
    dec = decoder(
        target, Mode.LOOKUP, prompt=prompt, cost=confident_lookup(), lookup_min_match=1, k_max=4
    )
    reply = run(dec)
    st = reply.final_stats
    assert reply.finish_reason is FinishReason.STOP
    assert reply.token_ids == [5, 6]
    assert (st.drafted, st.accepted) == (2, 2)
    assert st.verify_tokens == 2 and st.mean_accepted_length == 2.0
    assert st.draft_pos_proposed == [1, 1] and st.draft_pos_accepted == [1, 1]


def test_bonus_token_cut_by_max_tokens_does_not_count() -> None:
    reply_ids = [4, 5, 6, 7, 8, 4, 5]
    target = StandIn(reply_script(len(PROMPT), reply_ids))
    draft = StandIn(reply_script(len(PROMPT), reply_ids))
    reply = run(decoder(target, Mode.DRAFT, draft=draft, max_tokens=5))
    st = reply.final_stats
    assert reply.finish_reason is FinishReason.LENGTH
    assert reply.token_ids == reply_ids[:5]
    assert st.verify_steps == 1 and (st.drafted, st.accepted) == (4, 4)
    assert st.mean_accepted_length == 4.0  # 4 tokens came out of that pass, not 5


def test_stop_string_inside_an_accepted_run() -> None:
    reply_ids = [4, 5, 6, 7, 8, 4]  # "abcdea"
    target = StandIn(reply_script(len(PROMPT), reply_ids))
    draft = StandIn(reply_script(len(PROMPT), reply_ids))
    reply = run(decoder(target, Mode.DRAFT, draft=draft, stop=("cd",), k_init=5))
    st = reply.final_stats
    assert reply.finish_reason is FinishReason.STOP
    assert reply.text == "ab"
    # first token "a" from the prefill, then drafts "b c d e a": "d" completes the stop
    assert (st.drafted, st.accepted) == (3, 3)


def test_text_held_for_a_stop_prefix_is_kept_when_the_end_token_comes() -> None:
    reply_ids = [1, 2, 3, EOS]  # "Hello #" then the end token
    target = StandIn(reply_script(len(PROMPT), reply_ids))
    for mode, draft in ((Mode.OFF, None), (Mode.DRAFT, StandIn(reply_script(3, reply_ids)))):
        reply = run(decoder(target, mode, draft=draft, stop=("###",)))
        assert reply.finish_reason is FinishReason.STOP
        assert reply.text == "Hello #", mode


def test_rollback_keeps_both_caches_consistent_every_step() -> None:
    target_ids = [4, 5, 6, 7, 8, 4, 5, 6, 7, 8]
    wrong = [4, 5, 6, 8, 8, 4, 5, 7, 7, 8]  # the draft goes wrong at positions 3 and 7
    target = StandIn(reply_script(len(PROMPT), target_ids))
    draft = StandIn(reply_script(len(PROMPT), wrong))
    dec = decoder(target, Mode.DRAFT, draft=draft, max_tokens=10)
    for ev in dec.run():
        if ev.finish_reason is None:
            assert target.cache == dec.ctx[:-1]
            assert draft.cache == dec.ctx[: len(draft.cache)], "draft cache is not a prefix"
    assert dec.ctx[len(PROMPT) :] == target_ids
    st = dec.stats
    assert st.accepted < st.drafted and st.verify_tokens == st.tokens - 1


def test_recurrent_models_decode_plainly_and_say_why() -> None:
    reply_ids = [4, 5, 6, 7, 8]
    target = StandIn(reply_script(len(PROMPT), reply_ids), can_rollback=False)
    draft = StandIn(reply_script(len(PROMPT), reply_ids))
    for mode in (Mode.DRAFT, Mode.LOOKUP, Mode.AUTO):
        target.reset()
        reply = run(decoder(target, mode, draft=draft, max_tokens=5))
        st = reply.final_stats
        assert reply.token_ids == reply_ids
        assert st.drafted == 0 and st.mode == "off"
        assert "recurrent" in st.note and "cannot roll back" in st.note, st.note


def test_a_failed_partial_erase_is_decoded_again_not_continued_at_position_0() -> None:
    # llama.cpp answers "cannot erase part of the sequence" (forced): the decoder must decode
    # the kept tokens again instead of carrying on with an empty cache.
    reply_ids = [4, 5, 6, 7, 8, 4, 5, 6, 7, 8]
    wrong = [4, 5, 7, 7, 8, 4, 6, 6, 7, 8]
    target = StandIn(reply_script(len(PROMPT), reply_ids))
    target.fail_partial_erase = True
    draft = StandIn(reply_script(len(PROMPT), wrong))
    dec = decoder(target, Mode.DRAFT, draft=draft, max_tokens=10)
    reply = run(dec)
    assert reply.token_ids == reply_ids
    assert any(len(call) > 3 for call in target.decoded[1:]), "nothing was decoded again"


def test_greedy_draft_confidence_uses_the_penalised_logits() -> None:
    # Unpenalised the draft is unsure (tokens 4 and 5 tie near 6); with the repeat penalty on 4
    # and 5 (both in the prompt), token 6 stands out and is confidently drafted.
    def row(ctx: Sequence[int]) -> np.ndarray:
        z = np.full(N_VOCAB, -20.0, dtype=np.float32)
        z[4], z[5], z[6] = 5.0, 5.0, 4.9
        return z

    rt = StandIn(lambda ctx: 6, row=row)
    drafter = ModelDrafter(rt)  # type: ignore[arg-type]
    params = GenerationParams(repeat_penalty=100.0, p_min=0.6)
    prompt = [4, 5, 9]
    drafter.begin(prompt)
    draft = drafter.propose(prompt, 2, DraftSettings(Warp(params, N_VOCAB), p_min=0.6))
    assert draft.tokens[:1] == [6]


@pytest.mark.parametrize("mode", [Mode.DRAFT, Mode.LOOKUP])
def test_counts_add_up(mode: Mode) -> None:
    target_ids = [4, 5, 6, 7, 8] * 6
    wrong = [4, 5, 6, 7, 7] * 6
    prompt = PROMPT + [4, 5, 6, 7, 8, 4, 5]
    target = StandIn(reply_script(len(prompt), target_ids))
    draft = StandIn(reply_script(len(prompt), wrong))
    reply = run(decoder(target, mode, draft=draft, prompt=prompt, max_tokens=25, k_max=4))
    st = reply.final_stats
    assert reply.token_ids == target_ids[:25]
    assert st.tokens == 25 == len(reply.token_ids)
    assert st.accepted == sum(reply.draft_flags)
    assert st.verify_tokens + (st.target_steps - st.verify_steps) + 1 == st.tokens
    assert sum(st.draft_pos_proposed) == st.drafted
    assert sum(st.draft_pos_accepted) == st.accepted


def test_cache_book_rollback_recall_and_a_failed_erase() -> None:
    """The bookkeeping ModelRuntime and the stand-in share: what is kept, what is forgotten,
    and what a memory that cannot erase part of a sequence leaves."""
    erased: list[int] = []
    cleared: list[bool] = []

    def erase(n: int) -> bool:
        erased.append(n)
        return True

    book = CacheBook()
    book.tokens.extend([5, 6, 7, 8, 9])
    book.remember(3, "greedy", "first")
    assert book.recall(3, "greedy") == "first"
    assert book.recall(3, "sampled") is None and book.recall(4, "greedy") is None
    assert book.common_prefix([5, 6, 7, 1]) == 3 and book.common_prefix([5, 6]) == 2
    assert book.common_prefix([]) == 0 and book.common_prefix([5, 6, 7, 8, 9, 10]) == 5
    assert book.truncate(5, erase, lambda: cleared.append(True)) and erased == []  # no-op
    assert book.truncate(4, erase, lambda: cleared.append(True))
    assert book.tokens == [5, 6, 7, 8] and erased == [4]
    assert book.recall(3, "greedy") == "first", "a cut above n forgot the remembered value"
    assert book.truncate(2, erase, lambda: cleared.append(True))
    assert book.tokens == [5, 6] and book.recall(3, "greedy") is None
    book.tokens.extend([7, 8])
    assert book.recall(3, "greedy") is None, "a value outlived the tokens it was made from"
    # the memory cannot erase part of the sequence: it is cleared, and so is the record
    book.remember(1, "greedy", "x")
    assert not book.truncate(1, lambda n: False, lambda: cleared.append(True))
    assert book.tokens == [] and cleared == [True] and book.recall(1, "greedy") is None
    book.tokens.extend([1, 2])
    assert book.truncate(0, lambda n: False, lambda: cleared.append(True))  # nothing to keep
    assert book.tokens == []


def test_auto_risks_only_what_the_reply_has_won() -> None:
    """Auto on a CPU's cost curve (a 5-token verification costs 3.99 one-token decodes), with
    estimates that trust every copy: the prompt ends with the first 20 tokens of a text it
    showed earlier (a copy of 20 matched tokens before the reply starts); the reply copies 4
    more, leaves the text for 4 and copies the rest. Every verification that does not follow
    a draft kept whole drafts only what a refusal at its first token could lose within the
    reply's budget (risk.RiskBudget: START decodes, SHARE of every token, and what the reply
    has won so far), recomputed here step by step from the decodes the stand-in saw: the
    first draft is at most 2 tokens; a copy kept whole grows past the budget (GROWTH times as long,
    tuning.GROWTH times) and is charged only what the budget allowed, so the budget is never
    overdrawn. Fails if the decoder does not pass or keep the budget (its first draft would
    send the 40 tokens a 20-token match may copy)."""
    from specchat.core.decoding.pricing.cost_curve import CostCurve
    from specchat.core.decoding.pricing.tuning import SHARE, START

    curve = CostCurve(((1, 1.0), (2, 1.73), (5, 3.99), (9, 7.47), (17, 11.5)), t1_s=0.04)
    cm = CostModel().steady(t1=0.04, host=0.0).use_curve(curve)
    for length in ("one", "two", "short", "mid", "long", "span16", "span32"):
        for band in ("c95", "c75", "c50", "c00"):
            for opening in ("", OPENING):
                for _ in range(60):
                    cm.observe_accept(LOOKUP, [f"{opening}{length}/{band}"] * 4, 4, 4)
    text = [int(x) for x in np.random.default_rng(7).permutation(np.arange(10, 200))[:72]]
    prompt = PROMPT + text + [3] + text[:20]
    target_ids = text[20:24] + [4, 5, 6, 7] + text[28:72]
    target = StandIn(reply_script(len(prompt), target_ids))
    target.n_vocab = 200  # room for a text of 72 distinct tokens
    dec = decoder(target, Mode.AUTO, prompt=prompt, cost=cm, max_tokens=len(target_ids))
    events = list(dec.run())
    assert [t for ev in events for t in ev.token_ids] == target_ids

    def fits(left: float) -> int:  # the longest draft whose refusal loses at most `left`
        return max([1] + [k for k in range(1, 65) if curve.rel(k + 1) - 1.0 <= left + 1e-9])

    left, batches, whole = START, [], False
    for call, ev in zip(target.decoded[1:], events[1:], strict=False):
        n, produced = len(call), len(ev.token_ids)
        assert n == 1 or whole or curve.rel(n) - 1.0 <= left + 1e-9, (batches, n, left)
        # a copy's growth is charged as the draft the budget allowed
        charged = curve.rel(min(n - 1, fits(left)) + 1) if n > 1 else 1.0
        whole = n > 1 and produced == n  # every drafted token kept, and the target's own
        left += produced * (1.0 + SHARE) - charged
        assert left >= 0.0, (batches, n, left)
        batches.append(n)
    verifications = [n for n in batches if n > 1]
    assert verifications[0] <= 3 and len(verifications) >= 2, batches


def test_a_refused_draft_counts_every_token_sent() -> None:
    """Lookup drafts the prompt's 5, 6, 7, 8 after a 3, 4 (a match of 2: a copy's draft is at
    most twice its match); the target takes the 5 and then leaves the copy. The stats count
    the 4 tokens sent, 1 accepted (25 %, not the 1 of 2 the target got to before refusing),
    and positions 1-4 proposed once. Fails if only the tokens up to the refusal count."""
    prompt = PROMPT + [3, 4, 5, 6, 7, 8, 3]
    target = StandIn(reply_script(len(prompt), [4, 5, 1, 2, 1, 2, 1, 2]))
    dec = decoder(target, Mode.LOOKUP, prompt=prompt, cost=confident_lookup(), max_tokens=8)
    first = next(ev.stats.copy() for ev in dec.run() if ev.stats.verify_steps)  # live stats
    assert target.decoded[1] == [4, 5, 6, 7, 8]  # the first verification: 4 drafted
    st = first
    assert (st.drafted, st.accepted, st.verify_steps) == (4, 1, 1)
    assert st.draft_pos_proposed == [1, 1, 1, 1] and st.draft_pos_accepted == [1, 0, 0, 0]


class _SlowBatches(StandIn):
    """A draft model whose batches (catching up tokens it has not seen) take 200 ms."""

    def decode(self, tokens: Sequence[int], *, logits_for: str = "last", cancel=None):
        if len(tokens) > 1:
            time.sleep(0.2)
        return super().decode(tokens, logits_for=logits_for, cancel=cancel)


def test_catching_up_is_not_priced_as_drafting() -> None:
    # The draft model's first proposal decodes the whole prompt (a 200 ms batch); the cost
    # model's per-token drafting time must not include it (it would price every later draft
    # as a prefill: Auto then never drafts with the model).
    prompt = PROMPT + list(range(12, 40))
    target = StandIn(reply_script(len(prompt), [4, 5, 6, 7, 8, 4, 5, 6]))
    draft = _SlowBatches(reply_script(len(prompt), [4, 5, 6, 7, 8, 4, 5, 6]))
    dec = decoder(target, Mode.DRAFT, draft=draft, prompt=prompt, max_tokens=6, k_max=4)
    run(dec)
    assert any(len(d) > 1 for d in draft.decoded)  # it did catch up in one batch
    (model,) = [d for d in dec.drafters if d.kind is DRAFT]
    assert model.catch_up_s >= 0.0
    assert dec.cost.steps.draft_trials[DRAFT] >= 1
    assert dec.cost.steps.draft_token[DRAFT] < 0.01


def test_auto_learns_from_the_proposals_it_does_not_send() -> None:
    """On a curve where verifying costs as much as decoding, Auto verifies nothing, yet it
    judges each lookup proposal by the token the target chose in its place: the reply copies
    the prompt's text, so every proposal is right and the estimates of the classes proposed
    rise above their priors without one verification paid for. Fails if unsent proposals are
    not judged (the estimates stay at the priors) or are judged against the wrong token (they
    fall), or if judging them made Auto verify."""
    from specchat.core.decoding.pricing.acceptance import prior
    from specchat.core.decoding.pricing.cost_curve import CostCurve

    curve = CostCurve(((1, 1.0), (2, 2.0), (5, 5.0), (17, 17.0)), t1_s=0.04)
    cm = CostModel().steady(t1=0.04, host=0.0).use_curve(curve)
    text = [int(x) for x in np.random.default_rng(8).permutation(np.arange(10, 200))[:60]]
    prompt = PROMPT + text + [5]
    target = StandIn(reply_script(len(prompt), text[:40]))
    target.n_vocab = 200
    dec = decoder(target, Mode.AUTO, prompt=prompt, cost=cm, max_tokens=40)
    assert [t for ev in dec.run() for t in ev.token_ids] == text[:40]
    assert all(len(call) == 1 for call in target.decoded[1:])  # plain steps only
    judged = {c: a for (who, c), a in cm.alpha.items() if who == LOOKUP and a.s + a.f > 4.0}
    learned = {cls: a.mean for cls, a in judged.items()}  # (4: the prior's own weight)
    assert learned and "long/c95" in learned and "o-one/c95" in learned, learned
    assert all(mean > prior(LOOKUP, cls) for cls, mean in learned.items()), learned


class _CountingLookup(NgramDrafter):
    """The real n-gram drafter, noting how long its text was at each request for a proposal
    (and, given the target, how long the decoder's was) and how often it was extended."""

    def __init__(self, target: StandIn | None = None, **kw) -> None:
        super().__init__(**kw)
        self.target = target
        self.asked_at: list[int] = []
        self.lagged = 0  # proposals asked of an index that lacked some of the text
        self.extends = 0

    def extend(self, tokens) -> None:
        self.extends += 1
        super().extend(tokens)

    def look(self, k=None, stop_below=0.02, more=None, ends=frozenset()):
        self.asked_at.append(len(self._tokens))
        if self.target is not None:  # the target's cache holds all the text but its last token
            self.lagged += len(self._tokens) != len(self.target.cache) + 1
        return super().look(k, stop_below, more, ends)


def teach_lookup(cm: CostModel, cls: str, alpha: float) -> None:
    """60 lookup verifications of 4 tokens of class `cls`: all kept (alpha 1), or one in ten
    kept and the rest refused at their first token."""
    for i in range(60):
        kept = 4 if alpha == 1.0 or i % 10 == 0 else 0
        cm.observe_accept(LOOKUP, [cls] * 4, 4, kept)


@pytest.mark.parametrize("with_model", [False, True])
def test_auto_rests_lookup_while_it_is_far_from_paying(monkeypatch, with_model: bool) -> None:
    """Auto on a CPU's curve, where guesses on one to three matched tokens were refused (10 %)
    and copies of four or more were kept: the reply first writes 48 tokens of the prompt's
    text shuffled (every proposal a guess, priced far below paying), then copies 30 tokens of
    it; with a draft model loaded too, one whose drafts were refused (also far from paying).
    With rests (cost_model.REST_STEPS = 3) the guesses past the reply's opening
    (OPENING_TOKENS) are looked for on at most a third of the steps they were without (0), and
    in the opening on every step; the text is the same, and the copy's first draft is verified
    at most REST_STEPS steps later; a rest's steps leave the index's upkeep to the next look
    (fewer extensions than steps), which still sees the whole text. Fails if a far plan does
    not rest the next steps (as many proposals), if a loaded draft model keeps Auto from
    resting, if the opening rests, if a rest outlasts REST_STEPS or blocks the copy, if resting
    steps extend the index, or if a look after a rest misses the tokens emitted during it."""
    from specchat.core.decoding.pricing import cost_model
    from specchat.core.decoding.pricing.cost_curve import CostCurve

    curve = CostCurve(((1, 1.0), (2, 1.73), (5, 3.99), (9, 7.47), (17, 11.5)), t1_s=0.04)
    rng = np.random.default_rng(11)
    text = [int(x) for x in rng.permutation(np.arange(10, 200))[:60]]
    prompt = PROMPT + text
    shuffled = [int(x) for x in rng.permutation(text)[:48]]
    target_ids = shuffled + text[24:54]
    opening = len(prompt) + cost_model.OPENING_TOKENS

    def reply(rest: int) -> tuple[list[int], tuple[int, int], int]:
        monkeypatch.setattr(cost_model, "REST_STEPS", rest)
        cm = CostModel().steady(t1=0.04, host=0.0).use_curve(curve)
        for length, alpha in (("one", 0.1), ("two", 0.1), ("short", 0.1), ("mid", 1.0)):
            for n in (length, "long", "span16", "span32") if alpha == 1.0 else (length,):
                for band in ("c95", "c75", "c50", "c00"):
                    for opening_guess in ("", OPENING):
                        teach_lookup(cm, f"{opening_guess}{n}/{band}", alpha)
        for _ in range(60):  # the draft model's drafts: refused at their first token
            cm.observe_accept(DRAFT, [""], 4, 0)
        target = StandIn(reply_script(len(prompt), target_ids))
        target.n_vocab = 200
        params = GenerationParams(p_min=0.0, k_init=4, max_tokens=len(target_ids))
        lookup = _CountingLookup(target, min_match=params.lookup_min_match, k_max=params.k_max)
        model = None
        if with_model:
            wrong = [(t + 1) % 200 for t in target_ids]
            model = ModelDrafter(StandIn(reply_script(len(prompt), wrong)), k_init=4, k_max=8)
        drafters = [lookup, model] if model is not None else [lookup]
        dec = Decoder(target, prompt, params, Mode.AUTO, drafters=drafters, cost=cm)
        ids = [t for ev in dec.run() for t in ev.token_ids]
        steps = [len(call) for call in target.decoded[1:]]
        first_draft = next(i for i, n in enumerate(steps) if n > 1)
        end = len(prompt) + len(shuffled)
        guesses = (
            sum(1 for n in lookup.asked_at if n < opening),
            sum(1 for n in lookup.asked_at if opening <= n < end),
        )
        assert lookup.lagged == 0
        upkeep.append((lookup.extends, len(steps)))
        return ids, guesses, first_draft

    upkeep: list[tuple[int, int]] = []  # (index extensions, steps) per reply
    ids0, (open0, asked0), first0 = reply(0)
    ids3, (open3, asked3), first3 = reply(3)
    assert upkeep[0][0] >= upkeep[0][1] and upkeep[1][0] < upkeep[1][1] - 10, upkeep
    assert ids0 == ids3 == target_ids
    assert first0 >= len(shuffled) - 1  # no guess was drafted: the copy's first draft follows
    assert first0 <= first3 <= first0 + 3, (first0, first3)
    assert open0 == open3 >= cost_model.OPENING_TOKENS - 1, (open0, open3)
    assert asked0 >= len(shuffled) - cost_model.OPENING_TOKENS - 1, asked0
    assert asked3 * 3 <= asked0 + 3, (asked0, asked3)


def test_auto_drafts_copies_where_only_long_drafts_can_pay() -> None:
    """Auto on an H100's curve for a 135M model (a one-token decode replays a CUDA graph, a
    batch cannot: 2 -> 4.64 and nearly flat to 65; 5 tokens the shortest draft that can pay),
    with estimates that trust every copy: a reply copying 40 tokens of the prompt drafts within
    its first steps, mostly in verifications, and loses at most the shortest paying draft's
    refusal (rel(6) - 1 = 4.31 decodes) + SHARE x its tokens. Fails if the budget starts at
    START (1.7) alone, or if proposals stop at their first 4 tokens when 4 cannot pay: then
    every one of the 40 tokens comes from a plain step (seen on the H100: quote-verbatim-300 at
    0.94x of off). On the CPUs' curves (2 -> 1.56-1.92) neither changes anything."""
    from specchat.core.decoding.pricing.cost_curve import CostCurve
    from specchat.core.decoding.pricing.risk import opening_risk
    from specchat.core.decoding.pricing.tuning import SHARE, START

    curve = CostCurve(((1, 1.0), (2, 4.64), (9, 5.81), (17, 5.95), (33, 6.5), (65, 7.95)))
    cm = CostModel().steady(t1=0.0012, host=0.0).use_curve(curve)
    for length in ("one", "two", "short", "mid", "long", "span16", "span32"):
        for band in ("c95", "c75", "c50", "c00"):
            for opening in ("", OPENING):
                teach_lookup(cm, f"{opening}{length}/{band}", 1.0)
    start = curve.rel(6) - 1.0
    assert opening_risk(cm.steps) == pytest.approx(start)
    cpu = CostModel().steady(t1=0.07, host=0.0)
    cpu.use_curve(CostCurve(((1, 1.0), (2, 1.56), (5, 2.25), (9, 3.32), (17, 4.47))))
    assert opening_risk(cpu.steps) == START
    text = [int(x) for x in np.random.default_rng(12).permutation(np.arange(10, 200))[:60]]
    prompt = PROMPT + text
    target = StandIn(reply_script(len(prompt), text[:40]))
    target.n_vocab = 200
    dec = decoder(target, Mode.AUTO, prompt=prompt, cost=cm, max_tokens=40)
    assert [t for ev in dec.run() for t in ev.token_ids] == text[:40]
    steps = [len(call) for call in target.decoded[1:]]
    assert any(n > 1 for n in steps[:4]), steps  # a draft in the reply's first steps
    assert len(steps) < 20, steps  # most of the copy came through verifications
    lost = sum(curve.rel(n) for n in steps) - (40 - 1)
    assert lost <= start + SHARE * 40 + 1e-6, (lost, steps)


@pytest.mark.parametrize("prior", [None, 0.05])
def test_an_off_reply_teaches_the_one_token_time_once_at_its_end(prior: float | None) -> None:
    """Off decodes one token a step and learns its time when the reply ends, not every step,
    as ten one-token observations would have: from the prior (if any) toward the steps' own
    time. The prompt's 3-token prefill (3x a step's time) counts in none of it. Fails if the
    reply learns nothing, if the prefill's time is taken for a step's, or if the end's single
    update weighs the reply's steps unlike the per-step updates do."""
    reply_ids = [1, 2, 3, 4, 5, 6, 7, 8, 4, 5]
    target = StandIn(reply_script(len(PROMPT), [*reply_ids, EOS]), token_s=0.02)
    cm = CostModel()
    ref = CostModel()
    if prior is not None:
        cm.steps.observe_target(1, prior)
        ref.steps.observe_target(1, prior)
    reply = run(decoder(target, Mode.OFF, prompt=PROMPT, cost=cm))
    steps = reply.final_stats.target_steps
    # nine passes gave a token each; the tenth read only the end token and is not a step
    assert reply.token_ids == reply_ids and steps == len(reply_ids) - 1
    for _ in range(steps):
        ref.steps.observe_target(1, 0.02)
    assert cm.steps.t1 == pytest.approx(ref.steps.t1)
    assert ref.steps.t1 != pytest.approx(prior or 0.0)


@pytest.mark.parametrize("mode", [Mode.OFF, Mode.LOOKUP])
def test_the_decode_phase_ends_at_the_last_token(mode: Mode) -> None:
    """The rate a user sees runs from the first token to the last: the pass that decoded only
    the end token adds its time to the request (llama_s, elapsed) but neither its time nor a
    step to the decode phase, whose figures stay those of the last token's event; the passes
    then add up to the tokens as for a reply cut at its limit. Fails if the end pass's decode
    (0.02 s on the stand-in's clock) is counted in decode_llama_s or as a step, or if the
    end's event stops updating the request's own clock."""
    reply_ids = [1, 2, 3, 4]
    target = StandIn(reply_script(len(PROMPT), [*reply_ids, EOS]), token_s=0.02)
    seen = []
    for ev in decoder(target, mode, prompt=PROMPT).run():
        st = ev.stats
        seen.append((list(ev.token_ids), st.decode_s, st.decode_llama_s, st.llama_s))
    (last_ids, decode_s, decode_llama, _), (end_ids, end_decode_s, end_llama, total) = seen[-2:]
    assert last_ids and not end_ids and sum(len(s[0]) for s in seen) == len(reply_ids)
    assert end_decode_s == decode_s and end_llama == decode_llama
    assert decode_llama == pytest.approx(0.02 * (len(reply_ids) - 1))
    assert total == pytest.approx(0.02 * (len(PROMPT) + len(reply_ids)))
    assert st.target_steps == len(reply_ids) - 1 == st.tokens - 1


CPU_CURVE = ((1, 1.0), (2, 1.73), (5, 3.99), (9, 7.47), (17, 11.5), (33, 19.0), (65, 33.0))


def cpu_cost_model() -> CostModel:
    """A fresh engine's cost model on a 2-core CPU's measured curve (steep: a refused draft of
    4 tokens costs 3 one-token decodes), its timing fixed."""
    from specchat.core.decoding.pricing.cost_curve import CostCurve

    return CostModel().steady(t1=0.04, host=0.0).use_curve(CostCurve(CPU_CURVE, t1_s=0.04))


def drafts_on_a_quote(mode: Mode) -> tuple[list[int], list[int], CostModel]:
    """A reply quoting 100 tokens of the prompt word for word, on a fresh engine: its draft
    lengths and, for each, the room the reply had left; with the cost model used."""
    text = [int(x) for x in np.random.default_rng(5).permutation(np.arange(10, 250))[:120]]
    prompt = PROMPT + text
    target = StandIn(reply_script(len(prompt), text[:100]))
    target.n_vocab = 250
    cm = cpu_cost_model()
    dec = decoder(target, mode, prompt=prompt, cost=cm, max_tokens=100, lookup_k_max=64)
    events = list(dec.run())
    assert [t for ev in events for t in ev.token_ids] == text[:100]  # the target's quote
    drafts, room, done = [], [], len(events[0].token_ids)
    for call, ev in zip(target.decoded[1:], events[1:], strict=False):
        if len(call) > 1:
            drafts.append(len(call) - 1)
            room.append(100 - done - 1)
        done += len(ev.token_ids)
    return drafts, room, cm


@pytest.mark.parametrize("mode", [Mode.LOOKUP, Mode.AUTO])
def test_a_copy_kept_whole_grows_its_next_draft_geometrically(mode: Mode) -> None:
    """A reply that quotes the prompt word for word, on a 2-core CPU's cost curve with the
    acceptance estimates at their priors: after each draft kept whole the next is at least
    GROWTH times as long (tuning.GROWTH: 4), up to twice the copy's match (risk.copy_cap) and
    what pays best on the curve with every token kept within the room the reply has left; in
    Auto too, whose risk budget bounds only the
    first, unproven draft. Fails if drafts grow only with the match (priced at the priors,
    this curve keeps a copy of 8-16 matched tokens at 2-5 tokens a draft), or if Auto's
    budget, which grows by only what each draft gains on a steep curve, cuts a copy kept
    whole (its drafts stayed at 3-4 tokens for 40 tokens of the quote)."""
    drafts, room, cm = drafts_on_a_quote(mode)
    best = cm.steps.best_chain(LOOKUP, [1.0] * 64)[0]
    assert len(drafts) >= 3 and max(drafts) >= min(best, 16), drafts
    # every draft after one kept whole (here: all of them) is at least GROWTH times as long,
    # unless twice the match (the quote so far: 100 - room - 1 tokens) or the best length
    # within the reply's end is shorter (on this curve 4 tokens beat 5 and 6)
    for j in range(1, len(drafts)):
        within = cm.steps.best_chain(LOOKUP, [1.0] * min(64, room[j]))[0]
        match = 100 - room[j] - 1
        assert drafts[j] >= min(GROWTH * drafts[j - 1], 2 * match, within), (drafts, room)


@pytest.mark.parametrize("mode", [Mode.LOOKUP, Mode.AUTO])
def test_a_reply_citing_short_lines_grows_no_draft_past_what_its_copies_have_shown(
    mode: Mode,
) -> None:
    """A reply that cites five 12-token lines of the prompt, each followed by 4 words of its
    own, on a 2-core CPU's curve with the estimates at their priors. The first line is drafted
    as a quote (1, 4, then 16 tokens: GROWTH times each draft kept whole), and the 16 are
    refused at the line's end; after that refusal a draft kept whole earns only what the
    estimates pay with the copy's run as evidence, and the reply costs at most 5 % more
    target time than plain decoding would (units: one-token decodes on the curve). Fails if
    growth ignores the estimates after a refusal: every line was then drafted 1, 4, 16 with
    the 16 refused, 1.31 decodes a token in Lookup's mode and 1.33 in Auto."""
    from specchat.core.decoding.pricing.cost_curve import CostCurve

    rng = np.random.default_rng(11)
    text = [int(x) for x in rng.permutation(np.arange(10, 250))[:200]]
    own = [int(x) for x in rng.permutation(np.arange(250, 400))[:20]]
    reply = [t for i in range(5) for t in text[i * 40 : i * 40 + 12] + own[i * 4 : i * 4 + 4]]
    prompt = PROMPT + text
    target = StandIn(reply_script(len(prompt), reply))
    target.n_vocab = 400
    dec = decoder(
        target, mode, prompt=prompt, cost=cpu_cost_model(), max_tokens=len(reply), lookup_k_max=64
    )
    assert [t for ev in dec.run() for t in ev.token_ids] == reply
    drafts = [len(call) - 1 for call in target.decoded[1:] if len(call) > 1]
    assert drafts[:3] == [1, GROWTH, GROWTH * GROWTH], drafts  # the first line: a quote
    curve = CostCurve(CPU_CURVE)
    units = sum(curve.rel(len(call)) for call in target.decoded[1:])
    assert units <= 1.05 * len(reply), (units, drafts)


Quoted = tuple[list[list[int]], list[int], list[int]]  # drafts, reply, text


def quote_of_paragraphs(mode: Mode, paragraphs: int) -> Quoted:
    """A reply quoting the first `paragraphs` 30-token paragraphs of a 150-token prompt text
    word for word, the last without the token that ends it, then ending (EOS), on a 2-core
    CPU's curve with the estimates at their priors; each paragraph's last token ends it
    (`ends_paragraph`). The verifications' drafts, the reply and the text."""
    rng = np.random.default_rng(5)
    text = [int(x) for x in rng.permutation(np.arange(10, 250))[:150]]
    reply = text[: 30 * paragraphs - 1] + [EOS]  # (the last paragraph without its end)
    prompt = PROMPT + text
    target = StandIn(reply_script(len(prompt), reply))
    target.n_vocab = 256
    target.paragraph_ends = {text[i] for i in range(29, 150, 30)}
    dec = decoder(
        target, mode, prompt=prompt, cost=cpu_cost_model(), max_tokens=200, lookup_k_max=64
    )
    out = [t for ev in dec.run() for t in ev.token_ids]
    return [call[1:] for call in target.decoded[1:] if len(call) > 1], out, text


@pytest.mark.parametrize("mode", [Mode.LOOKUP, Mode.AUTO])
def test_a_quotes_growth_stops_at_a_paragraphs_end_until_the_reply_copies_past_one(
    mode: Mode,
) -> None:
    """A quote of one paragraph grows its drafts, but the grown draft stops at the paragraph's
    end, where the reply ends: its drafts run at most 2 tokens past what the reply kept.
    Fails if a paragraph's end is priced as sure as the rest of a quote (the draft grown from
    the paragraph's middle runs on into the next one). A quote of three paragraphs is cut at
    the first paragraph's end only: once the reply has copied past one, a draft goes on
    through the second's. Fails if every paragraph's end stays priced at its estimate."""
    drafts, out, text = quote_of_paragraphs(mode, 1)
    assert out == text[:29]
    assert sum(map(len, drafts)) <= 29 + 2, drafts
    drafts, out, text = quote_of_paragraphs(mode, 3)
    assert out == text[:89]
    second_end = text[59]
    assert any(second_end in d[:-1] for d in drafts), drafts


def test_lookup_risks_on_fresh_guesses_only_what_the_reply_has_won() -> None:
    """A chat answer with nothing to copy, whose every word the prompt shows followed by
    others: each of Lookup's drafts is a fresh guess (a one-token match) that the target
    refuses, on a 2-core CPU's curve with estimates that call those guesses sure. Lookup's
    mode loses at most its risk budget: the opening risk and SHARE of the tokens produced, in
    one-token decodes (recomputed here from the decodes the stand-in saw). Fails if a guess
    is sized by its estimates alone (19 tokens guessed lost 13.9 decodes in 59 tokens)."""
    from specchat.core.decoding.pricing.risk import opening_risk
    from specchat.core.decoding.pricing.tuning import SHARE

    words = list(range(20, 50))
    prompt = PROMPT + [t for w in words for t in (w, w + 100, w + 130, w + 160)] * 2
    reply = [t for w in words for t in (w, w + 200)]  # each word followed by an unseen one
    target = StandIn(reply_script(len(prompt), reply))
    target.n_vocab = 256
    cm = cpu_cost_model()
    for cls in [f"{OPENING}one/{c}" for c in ("c95", "c75", "c50", "c00")] + ["one/c95"]:
        for _ in range(60):
            cm.observe_accept(LOOKUP, [cls] * 4, 4, 4)
    start = opening_risk(cm.steps)
    dec = decoder(target, Mode.LOOKUP, prompt=prompt, cost=cm, max_tokens=len(reply))
    events = list(dec.run())
    assert [t for ev in events for t in ev.token_ids] == reply
    produced = sum(len(ev.token_ids) for ev in events[1:])
    spent = sum(cm.steps.rel(len(call)) for call in target.decoded[1:])
    drafted = sum(len(call) - 1 for call in target.decoded[1:])
    assert drafted > 0  # it did guess
    assert spent - produced <= start + SHARE * produced + 1e-6, (spent, produced, drafted)


@pytest.mark.parametrize("mode", [Mode.LOOKUP, Mode.AUTO])
def test_lookup_drafts_nothing_past_the_end_of_the_reply(mode: Mode) -> None:
    """A reply that quotes a message of the prompt whole and then ends, where the prompt goes
    on after that message (its end token, then the template's next turn): no draft carries a
    token past the end token, though the copy goes on in the prompt. Fails if lookup is not
    told the target's end tokens, or drafts on past one (the last draft then verified up to
    40 tokens of the next turn)."""
    text = [int(x) for x in np.random.default_rng(7).permutation(np.arange(10, 250))[:100]]
    prompt = PROMPT + text[:60] + [EOS] + text[60:]
    target = StandIn(reply_script(len(prompt), text[:60]))
    target.n_vocab = 250
    dec = decoder(target, mode, prompt=prompt, cost=cpu_cost_model(), max_tokens=200)
    events = list(dec.run())
    assert [t for ev in events for t in ev.token_ids] == text[:60]
    verified = [call for call in target.decoded[1:] if len(call) > 1]
    assert verified and any(EOS in call for call in verified)  # the end was drafted
    assert all(EOS not in call or call[-1] == EOS for call in verified), verified


def test_auto_drafts_again_on_a_copy_it_has_followed_since_a_refusal() -> None:
    """A reply that opens with 8 words of an earlier answer in the prompt (the copy grows: 1
    then 3 tokens kept, and its grown draft is refused where the reply leaves it) and then
    quotes 40 tokens of another text in the prompt word for word, in Auto on the 2-core EPYC's
    measured curve with the estimates at their priors. The refusal spends the reply's risk
    budget, which refills by SHARE of a decode a token; the quote's first draft comes once the
    reply has followed it for FOLLOWED tokens: FOLLOWED_K token(s), kept, then grown as a copy
    kept whole. Fails if the budget alone decides (on this curve the first draft then waits
    three tokens longer; on conv-reference-quote's reply, to the reply's end)"""
    from specchat.core.decoding.pricing.cost_curve import CostCurve
    from specchat.core.decoding.pricing.tuning import FOLLOWED, FOLLOWED_K

    # the 2-core EPYC's measured curve (bench's default suite)
    epyc = ((1, 1.0), (2, 1.85), (5, 3.34), (9, 6.83), (17, 9.84), (33, 17.56), (65, 28.55))
    cm = CostModel().steady(t1=0.05, host=0.0).use_curve(CostCurve(epyc, t1_s=0.05))

    rng = np.random.default_rng(3)
    words = [int(x) for x in rng.permutation(np.arange(10, 250))[:100]]
    earlier, quoted = words[:30], words[30:90]
    prompt = PROMPT + earlier + [3] + quoted + [4]
    opening = 8
    reply = earlier[:opening] + [5] + quoted[:40]
    quote = opening + 1  # where the quote starts
    target = StandIn(reply_script(len(prompt), reply))
    target.n_vocab = 256
    dec = decoder(
        target, Mode.AUTO, prompt=prompt, cost=cm, max_tokens=len(reply),
        lookup_k_max=64,
    )  # fmt: skip
    events = list(dec.run())
    assert [t for ev in events for t in ev.token_ids] == reply
    done, calls = len(events[0].token_ids), []  # (position, tokens sent, tokens produced)
    for call, ev in zip(target.decoded[1:], events[1:], strict=False):
        calls.append((done, len(call), len(ev.token_ids)))
        done += len(ev.token_ids)
    refused = [c for c in calls if c[1] > 1 and c[2] < c[1]]
    assert refused and sum(refused[0][::2]) - 1 == opening, calls  # refused where it left
    in_quote = [c for c in calls if c[0] >= quote]
    # the first draft of the quote: FOLLOWED_K token(s) once the reply has followed it for
    # FOLLOWED tokens (the budget alone waits longer), kept, and grown from there
    first = next(i for i, (_, n, _) in enumerate(in_quote) if n > 1)
    assert in_quote[first] == (quote + FOLLOWED, 1 + FOLLOWED_K, 1 + FOLLOWED_K), calls
    assert max(n for _, n, got in in_quote[first + 1 :] if got == n) > 1 + FOLLOWED_K, calls
