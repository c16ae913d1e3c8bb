"""The MTP / Gemma 4 assistant drafter on real llama.cpp, with generated models.

The Gemma 4 pair (tests/tinymodel_gemma4.py) is built so that its assistant predicts the
target's next tokens from the target's hidden state: drafts are accepted when the drafter hands
the right state on, and rejected when it hands on a wrong one. The speculation loop below is
the decoder's step in miniature (decode the prompt, draft, verify k + 1 rows, keep the matching
prefix, cut the target and the head back), with drafts spoiled on purpose so that every
rollback (none kept, some kept, all kept) runs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.core.decoding.config import RuntimeConfig
from specchat.core.decoding.drafters.base import DraftSettings, Proposal
from specchat.core.decoding.drafters.heads import ASSISTANT, BUILTIN, HeadInfo, find_head
from specchat.core.decoding.drafters.mtp import MTPDrafter
from specchat.core.decoding.runtime import ModelRuntime

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tinymodel_gemma4  # noqa: E402

PROMPT = [300, 5, 77, 12, 301, 40]
N_NEW = 72


@pytest.fixture(scope="module")
def gemma4_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tinymodel_gemma4.write_gemma4_pair(tmp_path_factory.mktemp("gemma4"))


@pytest.fixture()
def target(gemma4_pair: tuple[Path, Path]) -> Iterator[ModelRuntime]:
    rt = ModelRuntime(gemma4_pair[0], RuntimeConfig(n_ctx=512, n_threads=1, n_batch=64))
    yield rt
    rt.close()


def plain_greedy(rt: ModelRuntime, prompt: list[int], n: int) -> list[int]:
    rt.reset()
    t = int(rt.decode(prompt, logits_for="last")[-1].argmax())
    out = [t]
    while len(out) < n:
        t = int(rt.decode([t], logits_for="last")[-1].argmax())
        out.append(t)
    rt.reset()
    return out


def test_find_head_names_the_sibling_assistant_and_refuses_a_wrong_one(
    gemma4_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    target_path, assistant_path = gemma4_pair
    head = find_head(target_path)
    assert head == HeadInfo(ASSISTANT, assistant_path, "Tiny Gemma4 assistant", 2)
    assert find_head(target_path, assistant=assistant_path) == head
    # the target passed as its own assistant: a sentence, not a traceback
    with pytest.raises(ValueError, match="not a Gemma 4 assistant"):
        find_head(target_path, assistant=target_path)
    # an assistant alone in its directory: nothing to draft for a target elsewhere
    lonely = tmp_path / "t.gguf"
    lonely.write_bytes(target_path.read_bytes())
    assert find_head(lonely) is None


def test_assistant_drafts_the_next_tokens_of_plain_decoding(
    gemma4_pair: tuple[Path, Path], target: ModelRuntime
) -> None:
    want = plain_greedy(target, PROMPT, 6)
    d = MTPDrafter(target, HeadInfo(ASSISTANT, gemma4_pair[1], "assistant", 2), k_max=5)
    try:
        d.begin(PROMPT)
        first = int(target.decode(PROMPT, logits_for="last")[-1].argmax())
        d.observe_target(PROMPT, 0, "last")
        assert first == want[0]
        prop = d.propose([*PROMPT, first], 5, DraftSettings())
        assert prop.tokens == want[1:6]
        assert prop.q is None and prop.source == "assistant"
        # the assistant reads the target's cache: it wrote no cell of its own
        assert len(target.cache) == len(PROMPT)
    finally:
        d.close()


def speculate(
    rt: ModelRuntime, d: MTPDrafter, prompt: list[int], n: int, oracle: list[int] | None = None
) -> tuple[list[int], dict[str, int]]:
    """Greedy speculative decoding of n tokens, spoiling a draft token on purpose at two steps
    of every three. `oracle` (plain decoding's tokens): the head's draft is replaced by them,
    for a head with random weights whose own drafts are never kept, so that its cache is cut
    back after kept tokens too. Returns the tokens and what happened."""
    seen = {"none kept": 0, "some kept": 0, "all kept": 0, "empty": 0, "sent": 0, "kept": 0}
    rt.reset()
    d.begin(prompt)
    row = rt.decode(prompt, logits_for="last")
    d.observe_target(prompt, 0, "last")
    ctx = [*prompt, int(row[-1].argmax())]
    step = 0
    while len(ctx) - len(prompt) < n:
        prop = d.propose(ctx, 4, DraftSettings())
        draft = list(prop.tokens)
        if oracle is not None and draft:
            done = len(ctx) - len(prompt)
            draft = oracle[done : done + len(draft)]
        if not draft:
            seen["empty"] += 1
        spoiled = None
        if draft and step % 3 == 1:
            spoiled = 0
        elif len(draft) > 1 and step % 3 == 2:
            spoiled = len(draft) // 2
        honest = draft if spoiled is None else draft[:spoiled]
        if spoiled is not None:
            draft[spoiled] = (draft[spoiled] + 1) % d.n_vocab
        start = len(rt.cache)
        assert start == len(ctx) - 1
        batch = [ctx[-1], *draft]
        best = [int(r.argmax()) for r in rt.decode(batch, logits_for="all")]
        d.observe_target(batch, start, "all")
        m = 0
        while m < len(draft) and best[m] == draft[m]:
            m += 1
        rt.truncate(start + 1 + m)
        d.rollback(start + 1 + m)
        d.feedback(prop, len(draft), m)
        ctx += [*draft[:m], best[m]]
        if draft:
            seen["none kept" if m == 0 else "all kept" if m == len(draft) else "some kept"] += 1
        seen["sent"] += len(honest)
        seen["kept"] += min(m, len(honest))
        step += 1
    return ctx[len(prompt) : len(prompt) + n], seen


def test_assistant_speculation_gives_plain_greedy_tokens_through_every_rollback(
    gemma4_pair: tuple[Path, Path], target: ModelRuntime
) -> None:
    want = plain_greedy(target, PROMPT, N_NEW)
    d = MTPDrafter(target, HeadInfo(ASSISTANT, gemma4_pair[1], "assistant", 2), k_max=4)
    try:
        got, seen = speculate(target, d, PROMPT, N_NEW)
    finally:
        d.close()
    assert got == want
    assert seen["none kept"] and seen["some kept"] and seen["all kept"], seen
    # every step had a state to draft from, and the drafts not spoiled were the target's
    # tokens: a wrong hidden state handed on after a rollback drafts other tokens
    assert seen["empty"] == 0, seen
    assert seen["kept"] >= 0.9 * seen["sent"], seen


def test_no_draft_without_the_row_before_the_last_token(
    gemma4_pair: tuple[Path, Path], target: ModelRuntime
) -> None:
    d = MTPDrafter(target, HeadInfo(ASSISTANT, gemma4_pair[1], "assistant", 2), k_max=3)
    try:
        d.begin(PROMPT)
        first = int(target.decode(PROMPT, logits_for="last")[-1].argmax())
        d.observe_target(PROMPT, 0, "last")
        # cut back past the only row the drafter saw: it has no state for position 3
        target.truncate(4)
        d.rollback(4)
        ctx = [*PROMPT[:4], PROMPT[4]]
        assert d.propose(ctx, 3, DraftSettings()).tokens == []
        # one plain target step gives it the row again
        row = target.decode([PROMPT[4]], logits_for="last")
        d.observe_target([PROMPT[4]], 4, "last")
        nxt = int(row[-1].argmax())
        assert len(d.propose([*PROMPT[:5], nxt], 3, DraftSettings()).tokens) == 3
        assert first == plain_greedy(target, PROMPT, 1)[0]
    finally:
        d.close()


def test_a_builtin_head_on_a_model_without_one_is_refused(
    gemma4_pair: tuple[Path, Path], target: ModelRuntime
) -> None:
    from specchat.core.decoding.config import ModelLoadError

    with pytest.raises(ModelLoadError):
        MTPDrafter(target, HeadInfo(BUILTIN, gemma4_pair[0], "Built-in MTP", 1))


def test_the_head_feeds_back_acceptance_into_its_draft_length(
    gemma4_pair: tuple[Path, Path], target: ModelRuntime
) -> None:
    d = MTPDrafter(target, HeadInfo(ASSISTANT, gemma4_pair[1], "a", 2), k_init=2, k_max=6)
    try:
        for _ in range(8):
            d.feedback(Proposal([1, 2, 3, 4, 5]), 5, 5)
        assert d.k == 6
        for _ in range(12):
            d.feedback(Proposal([1]), 1, 0)
        assert d.k <= 2  # one past a mean run of nearly nothing
    finally:
        d.close()


def test_builtin_mtp_speculation_on_a_hybrid_qwen35_gives_plain_greedy_tokens(
    tmp_path: Path,
) -> None:
    import tinymodel

    write = getattr(tinymodel, "write_qwen35_mtp", None)
    if write is None:
        pytest.skip("tests/tinymodel.py has no qwen35 generator in this checkout")
    path = write(tmp_path / "tiny-qwen35-mtp.gguf")
    head = find_head(path)
    assert head is not None and head.kind == BUILTIN and head.name == "Built-in MTP"
    rt = ModelRuntime(path, RuntimeConfig(n_ctx=512, n_threads=1, n_batch=64))
    try:
        prompt = [5, 7, 9, 11]
        want = plain_greedy(rt, prompt, 48)
        d = MTPDrafter(rt, head, k_max=3)
        try:
            got, seen = speculate(rt, d, prompt, 48, oracle=want)
            assert d.steps > 48  # the head ran: its catch-ups and its drafts
        finally:
            d.close()
    finally:
        rt.close()
    # the head's cache was cut back after none, some and all of a draft kept: a cut that left
    # a pair behind (or took one too many) fails the next catch-up's positions in llama.cpp
    assert got == want
    assert seen["none kept"] and seen["some kept"] and seen["all kept"], seen


def test_a_regenerate_drafts_with_the_head_from_its_first_step(
    gemma4_pair: tuple[Path, Path],
) -> None:
    """The same prompt sent twice through the engine in MTP mode: the second reply's first
    step drafts too (its first token is not taken from the target's cache without a decode,
    which would leave the assistant without the prompt's last hidden state). Fails if a
    regenerate answers its first token from the cache while a head drafts."""
    from specchat.core.engines.local import Engine
    from specchat.core.params import GenerationParams
    from specchat.core.types import Mode

    target_path, _ = gemma4_pair
    eng = Engine(target_path, target_config=RuntimeConfig(n_ctx=256, n_threads=1, n_batch=64))
    try:
        assert eng.head_name is not None  # the sibling assistant, found with the target
        eng.cost.steady()
        p = GenerationParams(temperature=0.0, p_min=0.0, max_tokens=6, k_init=4, k_max=4)
        first = [len(e.token_ids) for e in eng.generate_tokens([321], p, Mode.MTP)]
        again = [len(e.token_ids) for e in eng.generate_tokens([321], p, Mode.MTP)]
        assert first[1] > 1 and again == first, (first, again)
    finally:
        eng.close()


def test_only_files_named_as_heads_are_looked_at_beside_a_target(
    gemma4_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """Beside a target, only `mtp*.gguf` files and (for a Gemma 4 target) files with
    "assistant" in their name are read as heads: the same assistant under another name is not
    found, so a store full of models costs no header reads at every load. Fails if every
    sibling is read."""
    target_path, assistant_path = gemma4_pair
    target = tmp_path / "gemma.gguf"
    target.write_bytes(target_path.read_bytes())
    (tmp_path / "other-model.gguf").write_bytes(assistant_path.read_bytes())
    assert find_head(target) is None
    named = tmp_path / "mtp-gemma.gguf"
    named.write_bytes(assistant_path.read_bytes())
    head = find_head(target)
    assert head is not None and head.kind == ASSISTANT and head.path == named
