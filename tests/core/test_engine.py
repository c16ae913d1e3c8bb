"""The engine on the real default pair: greedy exactness, bookkeeping, cancel, errors."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from specchat.core.decoding.choosing.backend_sampler import ROWS_MAX
from specchat.core.engines.local import DraftUnavailableError, Engine, EngineBusyError
from specchat.core.gguf.header import GGUFError
from specchat.core.params import GenerationParams
from specchat.core.reply import Reply
from specchat.core.types import FinishReason, Mode, TokenEvent, Top2

CODE_PROMPT = [
    {"role": "user", "content": "Write a Python function that checks whether a number is prime."}
]
SNIPPET = """def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out
"""
EDIT_PROMPT = [
    {
        "role": "user",
        "content": "Rename the function to rolling_mean and keep everything else exactly the same. "
        "Reply with the full code only.\n\n```python\n" + SNIPPET + "```",
    }
]


NEAR_TIE = 1.0  # a top-2 logit gap below this is a near-tie
Tok = tuple[int, Top2 | None, bool]  # (token id, the target's top-2 there, drafted)


def run(engine: Engine, messages, mode: str, **kw) -> tuple[list[Tok], TokenEvent]:
    """Generate; returns the reply's tokens (id, top-2 when recorded, drafted) and the last
    event. Events come one per decoding step, so a step may carry several tokens."""
    params = GenerationParams(**({"record_top2": True} | kw))
    events = list(engine.generate(messages, params, mode))
    return tokens_of(events), events[-1]


def tokens_of(events: list[TokenEvent]) -> list[Tok]:
    assert events[-1].finish_reason is not None
    assert all(ev.finish_reason is None for ev in events[:-1])
    toks: list[Tok] = []
    for ev in events:
        assert len(ev.draft_flags) == len(ev.token_ids)
        assert not ev.top2 or len(ev.top2) == len(ev.token_ids)
        tops = ev.top2 or (None,) * len(ev.token_ids)
        toks.extend(zip(ev.token_ids, tops, ev.draft_flags, strict=True))
    return toks


def text_of(engine: Engine, messages, mode: str, **kw) -> tuple[str, TokenEvent]:
    reply = Reply.collect(engine.generate(messages, GenerationParams(**kw), mode))
    assert reply.stats is not None
    return reply.text, list_last(reply)


def list_last(reply: Reply) -> TokenEvent:
    assert reply.finish_reason is not None and reply.stats is not None
    return TokenEvent("", (), (), reply.stats, (), reply.finish_reason)


_REPLIES: dict[tuple[str, str], tuple[list[Tok], TokenEvent]] = {}


def greedy_reply(engine: Engine, messages, mode: str) -> tuple[list[Tok], TokenEvent]:
    """The greedy 48-token reply in `mode`, with top-2, generated once per module (the greedy
    and backend-sampling tests share them)."""
    key = (repr(messages), mode)
    if key not in _REPLIES:
        _REPLIES[key] = run(engine, messages, mode, max_tokens=48)
    return _REPLIES[key]


def ids(toks: list[Tok]) -> list[int]:
    return [t for t, _, _ in toks]


_TOP2: dict[tuple[int, tuple[int, ...], tuple[int, ...]], list[Top2]] = {}


def target_top2_over(engine: Engine, messages, reply: list[int]) -> list[Top2]:
    """The target's top two at every reply position, from a forward pass of its own over the
    prompt and the emitted reply (teacher forcing, in chunks of at most ROWS_MAX rows): a
    computation independent of the decoder that chose the tokens. The prompt's cached prefix
    is kept (its keys and values do not depend on what the decoder did after it); the same
    reply is scored once per module."""
    prompt = engine.prompt_tokens(messages)
    rt = engine.target
    key = (id(rt), tuple(prompt), tuple(reply))  # two engines share a vocabulary
    if key in _TOP2:
        return _TOP2[key]
    rt.use_sampler(None)  # raw logits rows
    if rt.common_prefix(prompt) >= len(prompt) - 1:
        rt.truncate(len(prompt) - 1)
    else:
        rt.reset()
        rt.decode(prompt[:-1], logits_for="none")
    inputs = [prompt[-1], *reply[:-1]]
    out: list[Top2] = []
    for start in range(0, len(inputs), ROWS_MAX):
        rows = np.asarray(rt.decode(inputs[start : start + ROWS_MAX], logits_for="all"))
        for row in rows:
            first, second = (int(i) for i in np.argsort(row)[::-1][:2])
            out.append(Top2(first, float(row[first]), second, float(row[second])))
    rt.truncate(len(prompt) - 1)
    _TOP2[key] = out
    return out


def assert_greedy_exact(engine: Engine, messages, toks: list[Tok]) -> None:
    """Every emitted token is the argmax of the target at its position, by a separate forward
    pass over the emitted text; where it is the runner-up instead, the two must be a near-tie
    (batched arithmetic may order a near-tie either way)."""
    reply = ids(toks)
    assert reply, "nothing was generated"
    for i, (t, top) in enumerate(
        zip(reply, target_top2_over(engine, messages, reply), strict=True)
    ):
        if t != top.first_id:
            assert t == top.second_id and top.gap < NEAR_TIE, (
                f"token {i} ({t}) is not the target's choice there: {top}"
            )


def divergence_report(off: list[Tok], spec: list[Tok]) -> tuple[int, float] | None:
    """None if identical; else (index, top-2 logit gap of the plain run there). Fails unless the
    divergence is a near-tie: both runs' top two tokens are the same pair, in swapped order."""
    for i, (a, b) in enumerate(zip(off, spec, strict=False)):
        if a[0] != b[0]:
            ta, tb = a[1], b[1]
            assert ta is not None and tb is not None
            pair_a = {ta.first_id, ta.second_id}
            pair_b = {tb.first_id, tb.second_id}
            assert pair_a == pair_b, f"divergence at {i} is not between the same two candidates"
            assert ta.gap < NEAR_TIE, f"divergence at {i} with a clear winner (gap {ta.gap:.3f})"
            print(f"first divergence at token {i}: plain gap {ta.gap:.4f}, spec gap {tb.gap:.4f}")
            return i, ta.gap
    return None


@pytest.mark.parametrize("mode", ["draft", "lookup", "auto"])
def test_greedy_speculation_follows_the_target(engine: Engine, mode: str) -> None:
    prompt = CODE_PROMPT if mode == "draft" else EDIT_PROMPT
    off, off_end = greedy_reply(engine, prompt, "off")
    spec, spec_end = greedy_reply(engine, prompt, mode)
    assert_greedy_exact(engine, prompt, off)
    assert_greedy_exact(engine, prompt, spec)
    assert off_end.stats.drafted == 0 and off_end.stats.acceptance_rate is None
    st = spec_end.stats
    assert st.drafted > 0, "speculation never drafted"
    assert 0 < st.accepted <= st.drafted
    assert st.accepted == sum(d for _, _, d in spec)
    assert st.mean_accepted_length is not None and st.mean_accepted_length > 1.0
    # each verification gives its accepted drafts and one token of the target's own, except
    # a last one whose own token the reply's end (length or stop) cut off
    whole = st.accepted + st.verify_steps
    cut = spec_end.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert st.verify_tokens == whole or (cut and st.verify_tokens == whole - 1), st.to_dict()
    assert len(st.per_position_acceptance) >= 1
    assert spec_end.stats.tokens == len(spec)
    divergence_report(off, spec)
    if mode == "auto":
        assert st.note.startswith("auto:"), st.note
    if mode == "draft":  # what the draft model is worth here, from this reply's measurements
        assert st.note.startswith("draft model:") and "of a target token" in st.note, st.note


@pytest.mark.parametrize("mode", ["off", "draft", "lookup"])
def test_backend_sampling_chooses_what_the_host_would(engine: Engine, mode: str) -> None:
    """By default llama.cpp picks the tokens inside its graph (no logits row reaches Python);
    diagnostics (top-2) force the host path, which the test above checks against the logits.
    Both must give the same greedy reply (up to a near-tie of batched arithmetic)."""
    prompt = CODE_PROMPT if mode == "draft" else EDIT_PROMPT
    host, _ = greedy_reply(engine, prompt, mode)
    fast, end = run(engine, prompt, mode, max_tokens=48, record_top2=False)
    assert all(top is None for _, top, _ in fast)
    assert end.stats.host_rows == 0, "the backend path read a logits row"
    if ids(host) != ids(fast):
        n = next(i for i, (a, b) in enumerate(zip(ids(host), ids(fast), strict=False)) if a != b)
        top = host[n][1]
        assert top is not None and top.gap < 1.0, f"backend choice differs at {n}: not a near-tie"
        assert fast[n][0] == top.second_id, "the backend picked neither of the two best tokens"


def test_lookup_copies_repeated_code(engine: Engine) -> None:
    text, end = text_of(engine, EDIT_PROMPT, "lookup", max_tokens=120)
    assert "rolling_mean" in text
    st = end.stats
    assert st.acceptance_rate is not None and st.acceptance_rate > 0.5, st.to_dict()
    assert st.mean_accepted_length is not None and st.mean_accepted_length > 2.0
    assert st.accepted > 40


def test_a_paragraphs_end_is_told_from_codes_blank_lines(engine: Engine) -> None:
    """`ends_paragraph` marks the token holding a blank line right after a sentence's end
    (where a quoted paragraph ends), a closing quote mark between them or not; not a blank
    line in code, nor one after a docstring's three quote marks, nor a single line break.
    Fails if every blank line counts (code copies would stop at each) or none does."""
    t = engine.target

    def marked(text: str) -> int:
        ids = t.tokenize(text, add_special=False, parse_special=False)
        return sum(t.ends_paragraph(a, b) for a, b in zip(ids, ids[1:], strict=False))

    assert marked("The shift ended in 2009.\n\nThe cafe closed in the spring.") == 1
    assert marked('She said "not tonight."\n\nThen she left. Was it late?\n\nNo.') == 2
    assert marked("    return x\n\n\ndef f():\n    pass\n\nx = f()\n") == 0
    assert marked('    """Return the total."""\n\n    total = 0\n') == 0
    assert marked("One line.\nAnother line.\n") == 0


def test_target_as_its_own_draft_accepts_almost_everything(small_engine: Engine) -> None:
    """A draft identical to the target (the 0.5B model) must be accepted except at near-ties
    of batched maths."""
    eng = small_engine
    spec, end = run(eng, CODE_PROMPT, "draft", max_tokens=48, p_min=0.0)
    assert_greedy_exact(eng, CODE_PROMPT, spec)
    st = end.stats
    assert st.drafted >= 20
    assert st.acceptance_rate is not None and st.acceptance_rate >= 0.9, st.to_dict()


def test_sampled_generation_is_seeded(engine: Engine) -> None:
    # (lookup and auto are left out: their draft lengths follow measured timings, so their
    # random path can differ; their distribution is exact, see test_distribution.py)
    for mode in ("off", "draft"):
        for host in (True, False):
            kw = dict(max_tokens=8, temperature=0.9, top_p=0.95, seed=7, record_top2=host)
            a, _ = run(engine, CODE_PROMPT, mode, **kw)
            b, _ = run(engine, CODE_PROMPT, mode, **kw)
            assert ids(a) == ids(b), (mode, host)


def test_graph_draws_are_seeded(engine: Engine) -> None:
    """T > 0 over the whole vocabulary (no top-k/top-p): the tokens after the first are
    llama.cpp's own draws in its graph. A seed gives the same reply again after a request
    with another seed (the chain is reseeded and reset for every request), with and
    without a repeat penalty (kept or drawn again on the host)."""
    poem = [{"role": "user", "content": "Write a short surreal poem."}]
    for pen in (1.0, 1.1):
        kw = dict(max_tokens=24, temperature=1.0, repeat_penalty=pen, record_top2=False)
        a, _ = run(engine, poem, "off", seed=7, **kw)
        b, _ = run(engine, poem, "off", seed=8, **kw)
        c, _ = run(engine, poem, "off", seed=7, **kw)
        assert ids(a) == ids(c), pen
        assert ids(a) != ids(b), "two seeds gave one reply: the test cannot tell draws apart"


def test_max_tokens_and_stop_strings(engine: Engine) -> None:
    toks, end = run(engine, CODE_PROMPT, "draft", max_tokens=5)
    assert len(toks) == 5 and end.finish_reason is FinishReason.LENGTH
    text, _ = text_of(engine, CODE_PROMPT, "off", max_tokens=40)
    stop = "def "
    assert stop in text
    got, end = text_of(engine, CODE_PROMPT, "lookup", max_tokens=40, stop=(stop,))
    assert end.finish_reason is FinishReason.STOP
    assert got == text[: text.index(stop)]


def test_reply_ends_at_end_of_generation(engine: Engine) -> None:
    msgs = [{"role": "user", "content": "Reply with just the word: yes"}]
    text, end = text_of(engine, msgs, "draft", max_tokens=40)
    assert end.finish_reason is FinishReason.STOP
    assert "yes" in text.lower()


def test_full_context_ends_with_a_reason(smol_path) -> None:
    from specchat.core.decoding.runtime import RuntimeConfig

    cfg = RuntimeConfig(n_ctx=256)
    # SmolLM2-135M as target and draft: the context's end, not the model, is what this tests
    with Engine(smol_path, smol_path, target_config=cfg, draft_config=cfg) as eng:
        # ~200 prompt tokens, so the reply meets the end of the context after ~50 tokens
        filler = "Ignore this filler: " + "word " * 180 + "\n"
        msgs = [{"role": "user", "content": filler + "Count from 1 to 500, one number per line."}]
        toks, end = run(eng, msgs, "draft", max_tokens=1000)
        assert end.finish_reason is FinishReason.CONTEXT
        assert 0 < len(toks) < 80 and len(eng.target.cache) <= 256
        # A prompt longer than the context is refused with a reason, not a crash.
        long = [{"role": "user", "content": "word " * 400}]
        _, end = run(eng, long, "off", max_tokens=10)
        assert end.finish_reason is FinishReason.CONTEXT and "context" in end.stats.note


def test_cancel_stops_within_one_step_and_next_generation_is_correct(engine: Engine) -> None:
    reference, _ = run(engine, CODE_PROMPT, "off", max_tokens=16)
    for mode in ("draft", "lookup", "off"):
        cancel = threading.Event()
        seen = 0
        events = []
        for ev in engine.generate(CODE_PROMPT, GenerationParams(max_tokens=200), mode, cancel):
            events.append(ev)
            seen += len(ev.token_ids)
            if seen >= 10 and not cancel.is_set():
                cancel.set()
                at_cancel = ev.stats.tokens
        end = events[-1]
        assert end.finish_reason is FinishReason.CANCELLED
        # one step may still deliver its accepted run (at most k_max + 1 tokens)
        assert end.stats.tokens - at_cancel <= GenerationParams().k_max + 1
        again, _ = run(engine, CODE_PROMPT, "off", max_tokens=16)
        # The same plain reply, up to a near-tie (token 6 here has a top-2 gap of 0.04 logits:
        # a KV cache filled by other batches may order it either way); a cache left holding
        # the cancelled run's tokens would change clear winners.
        divergence_report(reference, again)


def test_abandoned_iterator_leaves_caches_consistent(engine: Engine) -> None:
    reference, _ = run(engine, CODE_PROMPT, "off", max_tokens=20)
    it = engine.generate(CODE_PROMPT, GenerationParams(max_tokens=200), "draft")
    for _ in range(7):
        next(it)
    it.close()  # the consumer walks away mid-reply
    again, _ = run(engine, CODE_PROMPT, "off", max_tokens=20)
    divergence_report(reference, again)  # the same reply, up to a near-tie


def test_mode_switches_between_messages_without_reload(engine: Engine) -> None:
    target, draft = engine.target, engine.draft
    for mode in ("off", "draft", "lookup", "auto", "off"):
        _, end = run(engine, CODE_PROMPT, mode, max_tokens=6)
        assert end.stats.mode == mode
    assert engine.target is target and engine.draft is draft


def test_draft_mode_without_a_draft_is_refused(model_paths) -> None:
    from specchat.core.decoding.runtime import RuntimeConfig

    with Engine(model_paths[0], target_config=RuntimeConfig(n_ctx=512)) as eng:
        with pytest.raises(DraftUnavailableError):
            list(eng.generate(CODE_PROMPT, GenerationParams(max_tokens=4), Mode.DRAFT))
        _, end = run(eng, CODE_PROMPT, "lookup", max_tokens=4)
        assert end.stats.tokens == 4


def test_bad_files_give_clear_errors_and_the_process_lives(tmp_path, model_paths) -> None:
    with pytest.raises(GGUFError, match="does not exist"):
        Engine(tmp_path / "missing.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("hello, I am not a model\n")
    with pytest.raises(GGUFError, match="not a GGUF"):
        Engine(text)
    truncated = tmp_path / "truncated.gguf"
    with open(model_paths[1], "rb") as src, open(truncated, "wb") as dst:
        shutil.copyfileobj(src, dst)
        dst.truncate(300_000_000)
    with pytest.raises(GGUFError, match="truncated"):
        Engine(truncated)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tokens": 0},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"temperature": float("nan")},
        {"k_max": 1000},
        {"k_init": 9, "k_max": 8},
    ],
)
def test_absurd_settings_are_refused(engine: Engine, bad) -> None:
    with pytest.raises(ValueError, match="invalid generation settings"):
        engine.generate(CODE_PROMPT, GenerationParams(**bad), "off")


def test_a_second_generate_while_busy_leaves_the_first_alone(engine: Engine) -> None:
    """The second call must find the engine busy before it touches the shared drafters."""
    p = GenerationParams(max_tokens=24, k_init=2)
    ref = Reply.collect(engine.generate(CODE_PROMPT, p, "draft"))
    first = engine.generate(CODE_PROMPT, p, "draft")
    got = Reply()
    got.add(next(first))
    got.add(next(first))
    second = engine.generate(CODE_PROMPT, p.with_(k_init=7, lookup_min_match=5), "lookup")
    with pytest.raises(EngineBusyError):
        next(second)
    for ev in first:
        got.add(ev)
    assert got.token_ids == ref.token_ids
    a, b = got.final_stats, ref.final_stats
    assert (a.drafted, a.accepted, a.verify_steps) == (b.drafted, b.accepted, b.verify_steps)


def test_a_cache_that_cannot_be_cut_back_is_decoded_again(engine: Engine, monkeypatch) -> None:
    """Force llama.cpp's answer for recurrent/hybrid memory ("cannot erase part of the
    sequence"): a rejected draft must not leave the decoder at position 0 with no context."""
    import llama_cpp

    poem = [{"role": "user", "content": "Write a short surreal poem about a lighthouse."}]
    ref, _ = run(engine, poem, "off", max_tokens=6)
    monkeypatch.setattr(llama_cpp, "llama_memory_seq_rm", lambda *a: False)
    spec, end = run(engine, poem, "draft", max_tokens=6, p_min=0.0, k_init=6)
    monkeypatch.undo()
    assert end.stats.drafted > end.stats.accepted, "no draft was rejected: nothing tested"
    divergence_report(ref, spec)
    engine.reset_caches()


def test_an_answer_from_an_earlier_conversation_drafts_the_new_one(small_engine: Engine) -> None:
    """The same question in a new conversation: the earlier answer is only in the history
    index (the conversation's own index is empty), lookup drafts it from there, says so in the
    stats, and the reply is the plain one (up to a near-tie). On the 0.5B pair."""
    engine = small_engine
    from specchat.core.decoding.drafters.history_index import HistoryIndex

    question = "Write a Python function `is_leap(year: int) -> bool` with a one-line docstring."
    messages = [{"role": "user", "content": question}]
    engine.reset_caches()
    events = list(
        engine.generate(messages, GenerationParams(max_tokens=80, record_top2=True), "off")
    )
    plain, earlier = tokens_of(events), Reply.collect(iter(events)).text

    def tokens(text: str) -> list[int]:
        return engine.target.tokenize(text, add_special=False, parse_special=False)

    index = HistoryIndex()
    index.add([tokens(question), tokens(earlier)])
    index.finish()
    engine.use_history(index)
    try:
        engine.reset_caches()
        fast, end = run(engine, messages, "lookup", max_tokens=80)
    finally:
        engine.use_history(HistoryIndex())
    st = end.stats
    assert st.history_drafted >= 30, f"only {st.history_drafted} tokens drafted from the history"
    assert st.history_accepted >= 0.8 * st.history_drafted
    assert st.accepted >= st.history_accepted
    divergence_report(plain, fast)
