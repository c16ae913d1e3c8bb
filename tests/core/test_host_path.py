"""The sparse host path: a repeat penalty and top-2 diagnostics from what llama.cpp's graph
computed, corrected on the host at a few ids, on the real default pair (greedy penalties) and
on the 0.5B model drafting for itself (a third of the cost: top-2, the patched distribution
and long drafts, where the path, not the model, is what is tested).

Every greedy reply is checked token by token against the raw logits of the same text, decoded
again with no sampler attached and chosen by `Warp.argmax` (the penalty applied over the whole
row): the reference path shares no code with the candidates' correction. Long drafts (more than
the 17 rows one verification used to allow) go through verification, rollback and the chains.
"""

from __future__ import annotations

import numpy as np
import pytest

from specchat.core.decoding.choosing.backend_sampler import DIST, SamplerSpec
from specchat.core.decoding.choosing.candidates import FULL, HOST, TOP, HostFix, plan
from specchat.core.decoding.choosing.dist import Dist
from specchat.core.decoding.choosing.sampling import Warp, top2
from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams

# Code with many repeated tokens: a penalty of 1.3 changes the greedy reply within a few tokens.
SNIPPET = """def total_price(items, tax):
    subtotal = 0
    for item in items:
        subtotal += item.price * item.count
    return subtotal + subtotal * tax
"""
EDIT = [
    {
        "role": "user",
        "content": "Rename subtotal to net and keep everything else exactly the same. Reply "
        "with the full code only.\n\n```python\n" + SNIPPET + "```",
    }
]
LONG = "\n".join(f"    row_{i} = table.lookup('key_{i}', default=None)" for i in range(14))
COPY = [
    {
        "role": "user",
        "content": "Repeat this code exactly, nothing else:\n\n```python\ndef load(table):\n"
        + LONG
        + "\n```",
    }
]


def raw_rows(rt: ModelRuntime, prompt: list[int], reply: list[int], chunk: int = 16) -> np.ndarray:
    """The target's raw logits for the first reply token and every one after (teacher forced,
    `chunk` tokens a decode), with no sampler attached; leaves the runtime without a chain and
    its cache reset."""
    rt.use_sampler(None)
    rt.reset()
    out = [np.array(rt.decode(prompt, logits_for="last"))]  # as a prefill decodes it
    seq = reply[:-1]
    for start in range(0, len(seq), chunk):
        out.append(np.array(rt.decode(seq[start : start + chunk], logits_for="all")))
    rt.reset()
    return np.concatenate(out)[: len(reply)]


_REFERENCES: dict[tuple, list[int]] = {}


def greedy_reference(rt: ModelRuntime, prompt: list[int], reply: list[int], params) -> list[int]:
    """The penalised argmax at every position of `reply`, from its raw rows (computed once per
    module for the same text and settings)."""
    key = (tuple(prompt), tuple(reply), params)
    if key not in _REFERENCES:
        _REFERENCES[key] = _greedy_reference(rt, prompt, reply, params)
    return _REFERENCES[key]


def _greedy_reference(rt: ModelRuntime, prompt: list[int], reply: list[int], params) -> list[int]:
    warp = Warp(params, rt.n_vocab)
    rows = raw_rows(rt, prompt, reply)
    ctx = list(prompt)
    out = []
    for i, row in enumerate(rows):
        out.append(warp.argmax(row, ctx[-params.repeat_last_n :]))
        ctx.append(reply[i])
    return out


def generate(engine: Engine, messages, params: GenerationParams, mode: str):
    events = list(engine.generate(messages, params, mode))
    ids = [t for ev in events for t in ev.token_ids]
    tops = [t for ev in events for t in ev.top2]
    return ids, tops, events[-1]


def test_plan_routes_penalty_and_top2_to_the_graph() -> None:
    n = 151936
    p = GenerationParams(repeat_penalty=1.1)
    assert plan(p, n)[0] == TOP and plan(p, n)[1].top_k == 65  # type: ignore[union-attr]
    assert plan(p.with_(temperature=1.0), n)[0] == FULL
    assert plan(p.with_(temperature=1.0, top_k=40), n)[1].top_k == 104  # type: ignore[union-attr]
    assert plan(GenerationParams(record_top2=True), n)[0] == TOP
    assert plan(p.with_(repeat_penalty=0.9), n)[0] == HOST  # raises tokens: not from the top K
    assert plan(p.with_(temperature=1.0, top_p=0.9), n)[0] == HOST


_UNPENALISED: dict[GenerationParams, list[int]] = {}


def unpenalised_reply(engine: Engine, params: GenerationParams) -> list[int]:
    """The plain greedy reply to EDIT without a penalty (generated once per module)."""
    if params not in _UNPENALISED:
        _UNPENALISED[params] = generate(engine, EDIT, params, "off")[0]
    return _UNPENALISED[params]


@pytest.mark.parametrize("mode", ["off", "lookup", "draft"])
def test_greedy_repeat_penalty_matches_the_raw_logits(engine: Engine, mode: str) -> None:
    """T=0, repeat penalty 1.3: every token of the reply is the penalised argmax of the raw
    row, and no logits row reached the host."""
    params = GenerationParams(repeat_penalty=1.3, max_tokens=32)
    prompt = engine.prompt_tokens(EDIT)
    engine.reset_caches()
    ids, _, end = generate(engine, EDIT, params, mode)
    assert end.stats.host_rows == 0, "a raw logits row was read"
    plain = unpenalised_reply(engine, params.with_(repeat_penalty=1.0))
    assert ids != plain, "the penalty changed nothing: no test of it"
    ref = greedy_reference(engine.target, prompt, ids, params)
    engine.reset_caches()
    assert ids == ref


def test_top2_from_the_candidates(small_engine: Engine) -> None:
    """record_top2 at T=0: the top-2 come from llama.cpp's top-K, equal to the raw rows' (both
    decoded one token at a time, so the arithmetic is the same)."""
    engine = small_engine
    params = GenerationParams(record_top2=True, max_tokens=24)
    prompt = engine.prompt_tokens(EDIT)
    engine.reset_caches()
    ids, tops, end = generate(engine, EDIT, params, "off")
    assert end.stats.host_rows == 0 and len(tops) == len(ids)
    rows = raw_rows(engine.target, prompt, ids, chunk=1)
    engine.reset_caches()
    assert [(t.first_id, t.second_id) for t in tops] == [
        (t.first_id, t.second_id) for t in map(top2, rows)
    ]
    assert [t.gap for t in tops] == pytest.approx([t.gap for t in map(top2, rows)], abs=1e-4)


def test_rows_are_read_only_views_of_llama_cpps_memory(small_engine: Engine) -> None:
    """A raw logits row and a chain's distribution are llama.cpp's buffers seen through numpy,
    not copies: writing into either raises instead of changing what llama.cpp holds. Fails if
    either view is writable, or a copy (then the two reads of a row would not share memory)."""
    rt = small_engine.target
    prompt = small_engine.prompt_tokens(EDIT)
    rt.use_sampler(None)
    rt.reset()
    rows = rt.decode(prompt, logits_for="last")
    assert rows.shape == (1, rt.n_vocab) and np.shares_memory(rows, rt._logits(1))
    with pytest.raises(ValueError):
        rows[0, 0] = 0.0
    assert rt.use_sampler(SamplerSpec(DIST, seed=1))
    rt.reset()
    rt.decode(prompt, logits_for="last")
    ids, probs = rt.sampler.probs(-1)
    assert ids is None and probs.shape == (rt.n_vocab,)
    assert np.shares_memory(probs, rt.sampler.probs(-1)[1])
    with pytest.raises(ValueError):
        probs[0] = 0.0
    rt.use_sampler(None)
    rt.reset()


def test_full_distribution_patch_matches_the_warp(small_engine: Engine) -> None:
    """T=0.8, penalty 1.3, no truncation: llama.cpp's softmax patched at the penalised ids is
    the host warp's distribution over the whole raw row."""
    engine = small_engine
    params = GenerationParams(temperature=0.8, repeat_penalty=1.3)
    rt = engine.target
    prompt = engine.prompt_tokens(EDIT)
    hist = prompt[-params.repeat_last_n :]
    rt.use_sampler(None)
    rt.reset()
    row = np.array(rt.decode(prompt, logits_for="last")[0])
    want = Warp(params, rt.n_vocab).dist(row, hist)
    kind, spec = plan(params, rt.n_vocab)
    assert kind == FULL and rt.use_sampler(spec)
    rt.reset()
    rt.decode(prompt, logits_for="last")
    fix = HostFix(Warp(params, rt.n_vocab), rt.sampler, rt.n_vocab)
    got = fix.full_dist(-1, hist)
    assert got.fix_ids is not None and got.fix_ids.size > 10
    ids = np.arange(rt.n_vocab)
    assert want.w is not None
    p_want = want.w[ids] / want.total
    p_got = got.weights_at(ids) / got.total
    # one token's probability, as an acceptance test reads it (the patch's own lists)
    probe = [*hist[-8:], int(p_want.argmax()), int(np.argsort(p_want)[-2]), 0]
    one = [got.prob(t) for t in probe]
    # one token's weight read alone (an acceptance test's bound, a graph draw's keep test) is
    # the patch's: a penalised token's lowered, an untouched one's as llama.cpp computed it
    alone = [fix.weighed(-1, t, hist) for t in probe]
    bounds = [fix.floor(-1, t, hist) for t in probe]
    # a history of the row's best token alone: the patch takes mass from it only, so the bound
    # is the probability itself (to its hair)
    best = int(np.argmax(got.w))
    lone = fix.floor(-1, best, [best]), fix.full_dist(-1, [best]).prob(best)
    rt.use_sampler(None)
    engine.reset_caches()
    assert np.abs(p_want - p_got).sum() < 2e-3
    assert one == pytest.approx([float(p_want[t]) for t in probe], abs=1e-4)
    assert [patched for _, patched in alone] == [got.weight(t) for t in probe]
    assert [w for w, _ in alone] == [float(got.w[t]) for t in probe]
    assert sum(patched < w for w, patched in alone) >= 8  # the history's tokens: lowered
    # the bound never exceeds the probability, is at least the patched weight, and is tighter
    # than it where the patch took mass from the token itself (the normaliser is at most 1
    # less that mass)
    assert all(b <= x for b, x in zip(bounds, one, strict=True))
    assert all(b >= pw * (1 - 1e-6) for b, (_, pw) in zip(bounds, alone, strict=True))
    heavy = max(range(len(probe)), key=lambda j: alone[j][0] - alone[j][1])
    assert bounds[heavy] > alone[heavy][1] * 1.01
    assert lone[0] <= lone[1] <= lone[0] * (1 + 1e-6)
    assert isinstance(got, Dist)


def test_long_lookup_draft_gives_the_plain_text(small_engine: Engine) -> None:
    """A verbatim copy: lookup drafts of up to 48 tokens (more than 17 rows a verification),
    verified, rolled back and emitted, give the plain greedy reply, on the chains and with a
    penalty (the 0.5B target: the rows' count, not the model, is what this tests)."""
    engine = small_engine
    for params in (
        GenerationParams(k_max=48, k_init=48, max_tokens=56),
        GenerationParams(k_max=48, k_init=48, max_tokens=56, repeat_penalty=1.05),
    ):
        engine.reset_caches()
        plain, _, _ = generate(engine, COPY, params, "off")
        fast, _, end = generate(engine, COPY, params, "lookup")
        assert fast == plain
        assert len(end.stats.draft_pos_proposed) > 17, "no draft longer than 17 tokens"
        assert end.stats.draft_pos_accepted[20] > 0, "no long draft accepted"


@pytest.mark.parametrize(
    "settings",
    [
        dict(temperature=1.0),
        dict(temperature=0.7, top_k=4),
        dict(temperature=1.3, top_p=0.8),
        dict(temperature=0.9, top_k=6, top_p=0.9, min_p=0.05),
        dict(temperature=1.0, min_p=0.2),
    ],
)
def test_the_draft_candidates_warp_as_lists_is_the_arrays_warp(settings: dict) -> None:
    """The draft model's ten candidates are warped as Python lists; what it keeps and the
    probabilities must be the numpy warp's (any q keeps speculation exact, but q must be what
    the warp says: top-k, top-p, min-p, temperature)."""
    from specchat.core.decoding.choosing.sampling import sparse_warp, sparse_warp_listed

    warp = Warp(GenerationParams(**settings), 1000)
    rng = np.random.default_rng(7)
    for _ in range(50):
        ids = [int(x) for x in rng.choice(1000, size=10, replace=False)]
        zs = [float(x) for x in rng.normal(0.0, 2.0, size=10)]
        want = sparse_warp(warp, np.asarray(ids, np.int64), np.asarray(zs, np.float64))
        got_ids, got_ps = sparse_warp_listed(warp, ids, zs)
        assert want.ids is not None and want.probs is not None
        expected = dict(zip(want.ids.tolist(), want.probs.tolist(), strict=True))
        assert dict(zip(got_ids, got_ps, strict=True)) == pytest.approx(expected, rel=1e-9)
        assert got_ps == sorted(got_ps, reverse=True)


def test_the_drafts_penalty_window_is_the_last_n_tokens() -> None:
    """The draft's penalised ids are kept up to date one drafted token at a time (built once
    per proposal): after every push they must be exactly the ids among the last n tokens, for
    windows shorter and longer than the history, tokens leaving it that occur again inside it
    included."""
    from specchat.core.decoding.drafters.draft_model import _Window

    rng = np.random.default_rng(3)
    for n in (1, 3, 8, 64):
        for start in (0, 2, 10, 80):
            hist = [int(x) for x in rng.integers(0, 6, size=start)]
            ref = list(hist)
            win = _Window(hist, n)
            for _ in range(30):
                assert set(win.ids) == set(ref[-n:])
                t = int(rng.integers(0, 6))
                win.push(t)
                ref.append(t)
            assert set(win.ids) == set(ref[-n:])


def test_a_listed_q_is_the_arrays_q() -> None:
    """The draft's q kept as Python lists (weights and their sum) answers as a sparse Dist of
    the same ids and normalised probabilities: `prob` (an id it lacks: 0), `top_prob`, and the
    numpy ids and probs a residual reads, made when first asked for."""
    from specchat.core.decoding.choosing.dist import ListedDist
    from specchat.core.decoding.choosing.speculative import residual_sample

    ids, w = [7, 3, 11, 5], [1.0, 0.25, 0.5, 0.125]
    q = ListedDist(ids, w, sum(w), 20)
    ref = Dist(ids=np.array(ids, np.int64), probs=np.array(w) / sum(w), n_vocab=20)
    for t in (*ids, 4):
        assert q.prob(t) == pytest.approx(ref.prob(t), rel=1e-12)
    assert q.top_prob() == pytest.approx(ref.top_prob(), rel=1e-12)
    assert q.ids is not None and q.probs is not None
    assert q.ids.tolist() == ids and q.probs.tolist() == pytest.approx(ref.probs.tolist())
    # a residual against a target that puts all its mass on id 3: only 3 can come out
    p = Dist(ids=np.array([3], np.int64), probs=np.array([1.0]), n_vocab=20)
    rng = np.random.default_rng(1)
    assert {residual_sample(p, q, 7, rng) for _ in range(20)} == {3}
