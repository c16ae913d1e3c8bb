"""Greedy speculation on hybrid targets and with MTP heads / Gemma 4 assistants, on real
llama.cpp and the generated models of tests/tinymodel.py and tests/tinymodel_gemma4.py: the
hybrid `qwen35` (gated delta-net layers, one attention layer, a built-in NextN head) and `lfm2`
(short convolutions and attention), each drafted for by lookup, by the tiny transformer `qwen2`
(same vocabulary) as a draft model, by the qwen35's own head, and by Auto; the tiny Gemma 4 pair
(the target drafted for by its assistant, which reads the target's KV cache).

Every speculative reply must be plain decoding's tokens (64 and more). The drafters run inside
`Spoiler`, a drafter that asks the real one for its proposal and then changes it on purpose: two
proposals in three, the token at a depth that moves from one to the next (0, 1, ... SPAN - 1) is
replaced by another id, so the target refuses drafts at their first token and part-way at every
one of those depths, and keeps them whole in between. Every rollback path runs: the target's cut
(a hybrid's from its recurrent state snapshots, `ModelRuntime.truncate`), the draft model's
cut, the MTP head's cache cut and the hand-off of the target's hidden state to the head.

The random-weight drafters (the qwen2 draft model, the qwen35's head, lookup on a random
reply) draft tokens the target never takes: refusals alone would never reach a depth past the
first. For them the spoiler proposes plain decoding's next tokens in place of the real
drafter's (as long a draft as the real one made), then spoils one. The real drafter still ran,
so its state must follow the rollback: the spoiler tells a draft model, whose cache holds its
own drafted tokens, how far those agree with the conversation; a head, whose cache the target's
pass rewrote, the decoder's length. The Gemma 4 assistant drafts the target's tokens by
construction: its own drafts are sent (spoiled), and kept.

The decoder prices drafts with a cost model of its own (steady timings, a flat cost curve: a
lookup draft as long as its copy is sent whole, so its refusals reach deep), not the engine's,
which the earlier cases would have taught. After the run stops right after a draft refused
part-way, the target's next logits are compared with those of a fresh context that decoded the
same tokens at once (no snapshots), and so are the draft model's; the head's distribution for
its next draft with a fresh head's after a fresh target.

TOL (tests/core/test_hybrid_rollback.py): the largest difference measured there between a
rolled-back state's logits and a fresh decode's was 2e-6 (7e-4 with other batch splits), a
wrong state's 2.4 to 4.0. Here: 1e-6 to 5e-4.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import tinymodel_gemma4
from tinymodel import write_lfm2, write_loadable_gguf, write_qwen35_mtp

from specchat.core.decoding.choosing.sampling import Warp
from specchat.core.decoding.decoder import Decoder
from specchat.core.decoding.drafters.base import Drafter, DrafterKind, DraftSettings, Proposal
from specchat.core.decoding.drafters.mtp import MTPDrafter
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.cost_model import CostModel
from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig
from specchat.core.engines.local import Engine
from specchat.core.params import GenerationParams
from specchat.core.types import GenerationStats, Mode, TokenEvent

TOL = 1e-2
N_NEW = 64  # tokens every reply reaches before the run may stop
CFG = RuntimeConfig(n_ctx=512, n_threads=1, n_batch=64)
PARAMS = GenerationParams(temperature=0.0, p_min=0.0, max_tokens=N_NEW + 48)
SPAN = 5  # the depths spoiled: 0..SPAN-1 (a priced draft is often no longer)
PROMPT = [260 + (7 * i) % 40 for i in range(12)]  # the tiny vocabulary's words


@dataclass
class Pair:
    """A loaded target (and draft model), its prompt and plain decoding's reply."""

    engine: Engine
    prompt: list[int]
    plain: list[int] = field(default_factory=list)


def _gemma4_prompt(target: Path) -> list[int]:
    """A prompt whose plain reply runs long before an end token: the tiny target's greedy
    walk through its cycle of the vocabulary, started just after an end-of-generation id."""
    rt = ModelRuntime(target, CFG)
    try:
        eog = sorted(rt.eog)
    finally:
        rt.close()
    start = eog[0]
    for _ in range(400):  # (the cycle runs through the whole vocabulary)
        t, ok = start, True
        for _ in range(PARAMS.max_tokens + 8):
            t = tinymodel_gemma4.tiny_next(t)
            if t in eog:
                ok = False
                break
        if ok:
            return [start]
        start = tinymodel_gemma4.tiny_next(start)
    raise AssertionError("the tiny Gemma 4 target's cycle has no long stretch without an end")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("speculation")
    for sub in ("qwen35", "lfm2", "gemma4"):  # (a head is looked for beside its target)
        (d / sub).mkdir()
    target, assistant = tinymodel_gemma4.write_gemma4_pair(d / "gemma4")
    return {
        "qwen35": write_qwen35_mtp(d / "qwen35" / "tiny-qwen35-mtp.gguf"),
        "lfm2": write_lfm2(d / "lfm2" / "tiny-lfm2.gguf"),
        "qwen2": write_loadable_gguf(d / "tiny-qwen2.gguf"),
        "gemma4": target,
        "assistant": assistant,
    }


@pytest.fixture(scope="module")
def pairs(files: dict[str, Path]) -> Iterator[dict[str, Pair]]:
    out: dict[str, Pair] = {}
    try:
        for arch, draft in (("qwen35", files["qwen2"]), ("lfm2", files["qwen2"]), ("gemma4", None)):
            prompt = _gemma4_prompt(files[arch]) if arch == "gemma4" else PROMPT
            out[arch] = pair = Pair(Engine(files[arch], draft, target_config=CFG), prompt)
            pair.engine.cost.steady()
            pair.plain = tokens_of(pair.engine.generate_tokens(pair.prompt, PARAMS, Mode.OFF))
            assert len(pair.plain) == PARAMS.max_tokens  # no end token stops it early
        yield out
    finally:
        for pair in out.values():
            pair.engine.close()


def tokens_of(events: Iterator) -> list[int]:
    out: list[int] = []
    for ev in events:
        out.extend(ev.token_ids)
    return out


# -- the spoiler --------------------------------------------------------------------------------


class Spoiler:
    """A `Drafter` that runs a real one and changes its proposals on purpose.

    `truth` (prompt + plain decoding's reply): the tokens proposed are the truth's next ones,
    as many as the real drafter proposed (for a random-weight drafter, whose own are never
    kept). Then, two proposals in three, the token at a moving depth (0, 1, 2, ... of the
    proposal, wrapping) is replaced by another id. `verdicts`: (sent, kept) for every draft
    the target judged."""

    def __init__(
        self,
        inner: Drafter,
        truth: Sequence[int] | None,
        n_vocab: int,
        log: list[tuple[int, int]],
    ) -> None:
        self.inner = inner
        self.kind: DrafterKind = inner.kind
        self.costly = inner.costly
        self.name = inner.name
        self.reads_target = inner.reads_target
        self.truth = list(truth) if truth is not None else None
        self.n_vocab = n_vocab
        self.catch_up_s = 0.0
        self.proposals = 0
        self.empty = 0  # proposals with no token
        self.depth = 0  # where the next spoiled token goes
        self.verdicts = log  # shared by a run's spoilers, in the order of the steps
        self.spoiled: list[int] = []  # the depth spoiled in each proposal (-1: none)
        self.own_kept: list[tuple[int, int]] = []  # unspoiled own tokens (sent, kept) per step
        self._agree: tuple[int, int] | None = None  # (base, how many of its own tokens sent)

    @property
    def k(self) -> int:
        return self.inner.k

    @property
    def runtime(self) -> ModelRuntime | None:
        return self.inner.runtime

    def lag(self, context_len: int) -> int:
        return self.inner.lag(context_len)

    def begin(self, prompt: Sequence[int]) -> None:
        self.inner.begin(prompt)

    def propose(self, context: Sequence[int], limit: int, settings: DraftSettings) -> Proposal:
        prop = self.inner.propose(context, limit, settings)
        self.catch_up_s = self.inner.catch_up_s
        own = list(prop.tokens)
        if not own:
            self.empty += 1
            self._agree = None
            return prop
        base = len(context)
        toks = list(own)
        if self.truth is not None and list(context) == self.truth[:base]:
            ahead = self.truth[base : base + len(own)]
            toks[: len(ahead)] = ahead
        spoil = -1
        if self.proposals % 3 != 2:
            spoil = self.depth % min(len(toks), SPAN)
            self.depth += 1
            toks[spoil] = (toks[spoil] + 1 + self.proposals) % self.n_vocab
            if toks[spoil] == (own[spoil] if self.truth is None else self.truth[base + spoil]):
                toks[spoil] = (toks[spoil] + 1) % self.n_vocab
        self.proposals += 1
        self.spoiled.append(spoil)
        same = next((i for i, (a, b) in enumerate(zip(own, toks, strict=True)) if a != b), len(own))
        self._agree = (base, same)
        prop.tokens[:] = toks  # (a lookup proposal keeps its other fields: same length)
        return prop

    def feedback(self, proposal: Proposal, sent: int, accepted: int) -> None:
        self.verdicts.append((sent, accepted))
        if self.truth is None and sent:
            spoil = self.spoiled[-1]
            honest = sent if spoil < 0 else min(sent, spoil)
            self.own_kept.append((honest, min(accepted, honest)))
        self.inner.feedback(proposal, sent, accepted)

    def rollback(self, kept: int) -> None:
        # A draft model's cache holds its own drafted tokens: it agrees with the conversation
        # only as far as those were sent. A head's state follows what the target decoded.
        if self._agree is not None and not self.reads_target:
            base, same = self._agree
            kept = min(kept, base + same)
        self._agree = None
        self.inner.rollback(kept)

    def observe_target(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        self.inner.observe_target(tokens, start, outputs)


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Run:
    tokens: list[int]
    ctx: list[int]
    stats: GenerationStats
    cuts: list[tuple[int, bool]]  # the target's rollbacks: (tokens taken back, done in place)
    spoilers: list[Spoiler]
    verdicts: list[tuple[int, int]]  # (sent, kept) of every draft judged, in order
    stopped: bool  # after N_NEW tokens, right after a draft refused part-way


def spy_truncate(rt: ModelRuntime, cuts: list[tuple[int, bool]]) -> Callable[[], None]:
    """Record every cut of rt's cache (the real `truncate` runs); returns the undo."""
    real = rt.truncate

    def truncate(n_keep: int) -> bool:
        depth = len(rt.cache) - n_keep
        done = real(n_keep)
        if depth > 0:
            cuts.append((depth, done))
        return done

    rt.truncate = truncate  # type: ignore[method-assign]
    return lambda: delattr(rt, "truncate")


def drafters_of(engine: Engine, mode: Mode) -> list[Drafter]:
    out: list[Drafter] = []
    if mode in (Mode.LOOKUP, Mode.AUTO):
        out.append(engine._lookup)
    if mode in (Mode.DRAFT, Mode.AUTO) and engine._model_drafter is not None:
        out.append(engine._model_drafter)
    if mode in (Mode.MTP, Mode.AUTO) and engine._head is not None:
        out.append(engine._head)
    return out


def spoiled_run(pair: Pair, mode: Mode, honest: bool) -> Run:
    """Greedy speculation through the decoder with every drafter spoiled, stopped after
    N_NEW tokens at the first step whose draft the target refused part-way."""
    eng = pair.engine
    truth = None if honest else [*pair.prompt, *pair.plain]
    eng._lookup.reset(
        min_match=PARAMS.lookup_min_match,
        max_ngram=PARAMS.lookup_max_ngram,
        k_max=PARAMS.lookup_k_max,
    )
    eng.forget_lookup()
    for costly in (eng._model_drafter, eng._head):
        if costly is not None:
            costly.reset(PARAMS.k_init, PARAMS.k_max)
    verdicts: list[tuple[int, int]] = []
    spoilers = [Spoiler(d, truth, eng.target.n_vocab, verdicts) for d in drafters_of(eng, mode)]
    cost = CostModel(draft_cost={DrafterKind.MODEL: 0.2}, curve=CostCurve.flat()).steady()
    dec = Decoder(eng.target, pair.prompt, PARAMS, mode, drafters=spoilers, cost=cost)
    cuts: list[tuple[int, bool]] = []
    eng.target.reset()  # (the cuts recorded are the rollbacks, not the prompt's alignment)
    undo = spy_truncate(eng.target, cuts)
    tokens: list[int] = []
    stopped = False
    run = cast(Generator[TokenEvent, None, None], dec.run())
    try:
        seen = 0
        for ev in run:
            tokens.extend(ev.token_ids)
            fresh, seen = verdicts[seen:], len(verdicts)
            if len(tokens) >= N_NEW and any(0 < m < k for k, m in fresh):
                stopped = True
                break
    finally:
        run.close()
        undo()
    return Run(tokens, list(dec.ctx), dec.stats, cuts, spoilers, verdicts, stopped)


def next_logits_after(rt: ModelRuntime, ctx: list[int]) -> np.ndarray:
    """rt's logits after ctx, decoding only what its cache (a prefix of ctx) lacks."""
    held = list(rt.cache)
    assert held == ctx[: len(held)], "the cache is not a prefix of the conversation"
    assert len(held) < len(ctx)
    rt.use_sampler(None)
    return rt.decode(ctx[len(held) :], logits_for="last")[-1].copy()


def fresh_logits(path: Path, ctx: list[int]) -> np.ndarray:
    rt = ModelRuntime(path, CFG, rollback_tokens=0)
    try:
        return rt.decode(ctx, logits_for="last")[-1].copy()
    finally:
        rt.close()


def head_logprobs(d: MTPDrafter, ctx: list[int]) -> np.ndarray:
    """The log-probabilities the head gives its first drafted token after ctx (T = 1, no
    truncation: its logits up to a constant)."""
    warp = Warp(GenerationParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), d.n_vocab)
    prop = d.propose(ctx, 1, DraftSettings(warp, random.Random(0), 0.0, 64))
    assert prop.q is not None and len(prop.q) == 1, "the head drafted nothing"
    q = prop.q[0]
    return np.log(np.maximum([q.prob(t) for t in range(d.n_vocab)], 1e-30))


def check_head(head: MTPDrafter, path: Path, ctx: list[int]) -> None:
    """The head drafts from the rolled-back conversation what a new head drafts after a new
    target that decoded the conversation in one pass."""
    got = head_logprobs(head, ctx)
    rt = ModelRuntime(path, CFG)
    try:
        fresh = MTPDrafter(rt, head.head)
        try:
            fresh.begin(ctx[:-1])
            nb = CFG.n_batch  # one batch at a time: the head sees every row (mtp.py)
            for start in range(0, len(ctx) - 1, nb):
                chunk = ctx[start : min(start + nb, len(ctx) - 1)]
                rt.decode(chunk, logits_for="last")
                fresh.observe_target(chunk, start, "last")
            want = head_logprobs(fresh, ctx)
        finally:
            fresh.close()
    finally:
        rt.close()
    worst = float(np.abs(got - want).max())
    print(f"the head's next draft against a fresh head's (log-probabilities): {worst:.2g}")
    assert worst <= 2 * TOL, f"the head's draft after the rollbacks differs by {worst:.3g}"


CASES = [
    ("qwen35", Mode.LOOKUP),
    ("qwen35", Mode.DRAFT),
    ("qwen35", Mode.MTP),
    ("qwen35", Mode.AUTO),
    ("lfm2", Mode.LOOKUP),
    ("lfm2", Mode.DRAFT),
    ("lfm2", Mode.AUTO),
    ("gemma4", Mode.MTP),
    ("gemma4", Mode.AUTO),
]
IDS = [f"{a}-{m.value}" for a, m in CASES]


@pytest.mark.parametrize(("arch", "mode"), CASES, ids=IDS)
def test_spoiled_speculation_gives_plain_tokens_and_rolls_back_every_state(
    pairs: dict[str, Pair], files: dict[str, Path], arch: str, mode: Mode
) -> None:
    pair = pairs[arch]
    honest = arch == "gemma4"  # its assistant drafts the target's tokens by itself
    run = spoiled_run(pair, mode, honest)
    st, verdicts = run.stats, run.verdicts
    depths = sorted({m for k, m in verdicts if m < k})
    print(
        f"\n[{arch} {mode.value}] tokens={len(run.tokens)} drafted={st.drafted} "
        f"accepted={st.accepted} per position {st.draft_pos_proposed}/{st.draft_pos_accepted} "
        f"refused at depths {depths}; the target cut back by {sorted({c for c, _ in run.cuts})}"
    )
    assert run.tokens == pair.plain[: len(run.tokens)]
    assert run.stopped, f"no draft refused part-way after {N_NEW} tokens: {verdicts}"
    # the spoilers' doing: drafts refused at their first token and part-way at several
    # depths, and drafts kept whole (Auto prices its drafts shorter: fewer depths)
    assert 0 in depths and len(depths) >= (2 if mode is Mode.AUTO else 3), verdicts
    assert any(m == k for k, m in verdicts), verdicts
    assert 0 < st.accepted < st.drafted
    pos = list(zip(st.draft_pos_proposed, st.draft_pos_accepted, strict=True))
    assert sum(1 for p, a in pos if 0 < a < p) >= 2, pos  # positions both kept and refused
    # a costly drafter had a state to draft from after every rollback
    assert all(s.empty == 0 for s in run.spoilers if s.costly), [s.empty for s in run.spoilers]
    # the target took refused tokens back in place (a hybrid: from its snapshots) at several
    # depths, never by clearing its cache and decoding the conversation again
    assert run.cuts and all(done for _, done in run.cuts), run.cuts
    assert len({c for c, _ in run.cuts}) >= 2, run.cuts
    # each drafter's state after the last rollback (a head first: an assistant reads the
    # target's cache, which the target's check below extends)
    for s in run.spoilers:
        if isinstance(s.inner, MTPDrafter):
            check_head(s.inner, files[arch], run.ctx)
        if s.kind is DrafterKind.MODEL:
            rt = s.inner.runtime
            assert rt is not None
            got = next_logits_after(rt, run.ctx)
            worst = float(np.abs(got - fresh_logits(files["qwen2"], run.ctx)).max())
            assert worst <= TOL, f"the draft model's logits differ by {worst:.3g}"
    # the target's state after the last rollback is a fresh decode's
    after = next_logits_after(pair.engine.target, run.ctx)
    worst = float(np.abs(after - fresh_logits(files[arch], run.ctx)).max())
    print(f"the target's next logits against a fresh context's: {worst:.2g}")
    assert worst <= TOL, f"{arch}: logits after the rollbacks differ by {worst:.3g}"
    if honest:  # the assistant's own (unspoiled) drafts are the target's tokens
        own = [v for s in run.spoilers if s.kind is DrafterKind.MTP for v in s.own_kept]
        sent = sum(k for k, _ in own)
        assert sent and sum(m for _, m in own) >= 0.9 * sent, own


@pytest.mark.parametrize(("arch", "mode"), CASES, ids=IDS)
def test_the_engines_own_drafters_give_plain_tokens(
    pairs: dict[str, Pair], arch: str, mode: Mode
) -> None:
    """`Engine.generate_tokens` as the window calls it, the drafters unspoiled: the same
    tokens as plain decoding (a random-weight drafter's drafts are refused at once)."""
    pair = pairs[arch]
    pair.engine.forget_lookup()
    last = None
    tokens: list[int] = []
    for ev in pair.engine.generate_tokens(pair.prompt, PARAMS, mode):
        tokens.extend(ev.token_ids)
        last = ev
    assert tokens == pair.plain
    assert last is not None and last.stats.mode == mode.value
    if mode is not Mode.AUTO:  # (Auto may find no drafter worth its time)
        assert last.stats.drafted > 0
