"""How the target's tokens are chosen from a decode's output: by llama.cpp inside its graph
(backend sampling: the argmax, or a sample and its distribution), from a chain's candidates or
distribution corrected on the host at a few ids (a repeat penalty, top-2 diagnostics: see
`candidates`), or on the host from the raw logits rows (`sampling.Warp`), and how a drafted run
is judged against them (greedy match, or exact speculative acceptance with residual
resampling). Rows after the first rejected draft token are not read. At T > 0 over the whole
vocabulary a token llama.cpp drew in its graph is used where it is a draw from the wanted
distribution (`speculative.keep_graph_draw`); the host draws only where it is not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specchat.core.decoding.choosing.backend_sampler import (
    DIST,
    DRAFT_TOP_K,
    GREEDY,
    RANDOM_SEED,
    TOP_K,
    SamplerSpec,
)
from specchat.core.decoding.choosing.candidates import FULL, HOST, TOP, HostFix, plan
from specchat.core.decoding.choosing.dist import Dist, Uniform, sample
from specchat.core.decoding.choosing.sampling import Warp, backend_dist, top2
from specchat.core.decoding.choosing.speculative import (
    accept_bounded,
    accept_draft_token,
    accept_with,
    keep_graph_draw,
    patched_copy,
    residual_sample,
)
from specchat.core.decoding.drafters.base import Proposal
from specchat.core.decoding.runtime import Logits, ModelRuntime
from specchat.core.params import GenerationParams
from specchat.core.types import Top2

History = Callable[[Sequence[int]], list[int]]  # tokens after ctx -> the penalty's history

PLAIN = "plain"  # llama.cpp's chain gives the greedy token or the whole distribution


@dataclass(frozen=True)
class First:
    """What the first token is chosen from (kept for a regenerate of the same prompt): a token
    or a distribution (copied out of llama.cpp's buffer), or the raw row (host path)."""

    token: int | None = None
    dist: Dist | None = None
    row: Logits | None = None
    top2: Top2 | None = None


class Chooser:
    """The target's token choices for one generation."""

    def __init__(
        self,
        target: ModelRuntime,
        params: GenerationParams,
        warp: Warp,
        rng: Uniform,
        history: History,
    ) -> None:
        self.t, self.p, self.warp, self.rng = target, params, warp, rng
        self._hist = history
        self.backend = False  # llama.cpp's graph computes what the target's tokens need
        self.how = HOST
        self.graph_draws = False  # llama.cpp's own draw of a row may be used (see choose)
        self.graph_token: Callable[[int], int] | None = None  # see setup
        self.fix = HostFix(warp, target.sampler, target.n_vocab)

    def setup(self, drafting: Sequence[ModelRuntime], idle: Sequence[ModelRuntime] = ()) -> None:
        """Attach the chains: the plain ones, or (a repeat penalty, top-2 diagnostics) one whose
        output the host corrects at a few ids; raw logits only where neither can serve. The
        drafters' runtimes that may draft in this reply (`drafting`) get the draft's chain;
        those that will not (`idle`) none."""
        p = self.p
        if self.warp.greedy:
            spec: SamplerSpec | None = SamplerSpec(GREEDY)
            dspec = SamplerSpec(TOP_K, top_k=DRAFT_TOP_K)
        else:
            # The chains give the distributions and llama.cpp's draws from them; the chain is
            # reset for every request, so a seed gives the same draws again.
            spec = SamplerSpec(DIST, p.top_k, p.top_p, p.min_p, p.temperature)
            dk = min(DRAFT_TOP_K, p.top_k) if p.top_k > 0 else DRAFT_TOP_K
            dspec = SamplerSpec(DIST, dk, temperature=p.temperature)
        how = PLAIN
        if self.warp.penalises or p.record_top2:
            how, spec = plan(p, self.t.n_vocab)
            if self.warp.penalises:  # the draft's top-10 logits, penalised on the host
                dspec = SamplerSpec(TOP_K, top_k=DRAFT_TOP_K)
        if spec is not None and spec.kind == DIST:
            spec = replace(spec, seed=RANDOM_SEED if p.seed is None else p.seed % RANDOM_SEED)
        self.backend = self.t.use_sampler(spec)
        self.how = how if self.backend else HOST
        # llama.cpp's draw of a row is over the whole vocabulary (no truncation, so no
        # candidate ids to map), and a patch (a repeat penalty >= 1) only lowers weights.
        self.graph_draws = (
            self.how in (PLAIN, FULL)
            and spec is not None
            and spec.kind == DIST
            and spec.top_k == 0
            and spec.top_p >= 1.0
            and spec.min_p <= 0.0
        )
        for rt in drafting:
            rt.use_sampler(dspec)
        for rt in idle:
            rt.use_sampler(None)
        # greedy over llama.cpp's own chain: the token it chose, read at once (choose, judge,
        # and the decoder's plain step, the hot path)
        self.graph_token = self.t.sampler.token if self.how == PLAIN and self.warp.greedy else None

    def choose(self, rows: Logits, i: int, extra: Sequence[int] = ()) -> int:
        """The target's token for output row i (greedy choice or a sample)."""
        if self.graph_token is not None:
            return self.graph_token(i)
        how = self.how
        if self.warp.greedy:
            if how == TOP:
                return self.fix.greedy(i, self._hist(extra))
            return self.warp.argmax(rows[i], self._hist(extra))
        if self.graph_draws:
            y = self._graph_draw(i)
            # kept with the penalty's factor on y (1 without one): a draw from the penalised
            # distribution, the host drawing where it is not kept (`speculative.keep_graph_draw`)
            if 0 <= y < self.t.n_vocab - 1:
                if self.how != FULL:
                    return y
                hist = self._hist(extra)
                if y not in hist[-self.fix.last_n :]:
                    return y
                # the keep test reads y's weight alone; the row's patch only for a draw
                w, kept = self.fix.weighed(i, y, hist)
                if w > 0.0 and self.rng.random() * w < kept:
                    return y
                return sample(self.fix.full_dist(i, hist), self.rng)
        return sample(self.dist(rows, i, extra), self.rng)

    def _graph_draw(self, i: int) -> int:
        """llama.cpp's own draw for row i; the draws of rows 0..i are committed, so each of
        its uniform numbers is used once."""
        if i < 0:
            raise ValueError(f"llama.cpp's draws are read by output row, not {i}")
        s = self.t.sampler
        y = s.token(i)
        s.commit(i + 1)
        return y

    def _residual(self, i: int, p: Dist, q: Dist | None, drafted: int) -> int:
        """Row i's token after `drafted` was rejected: from max(0, p - q), llama.cpp's own draw
        where it is a draw from that residual, else on the host."""
        if self.graph_draws:
            y = self._graph_draw(i)
            if keep_graph_draw(p, y, self.rng, q, drafted):
                return y
        return residual_sample(p, q, drafted, self.rng)

    def dist(self, rows: Logits, i: int, extra: Sequence[int]) -> Dist:
        """The target's warped distribution for output row i (T > 0)."""
        how = self.how
        if how == PLAIN:
            ids, probs = self.t.sampler.probs(i)
            return backend_dist(ids, probs, self.t.n_vocab, copy=False)
        if how == TOP:
            return self.fix.top_dist(i, self._hist(extra))
        if how == FULL:
            return self.fix.full_dist(i, self._hist(extra))
        return self.warp.dist(rows[i], self._hist(extra))

    def top2(self, rows: Logits, i: int) -> Top2:
        """Row i's two best raw logits (diagnostics)."""
        return self.fix.top2(i) if self.how == TOP else top2(rows[i])

    def first_key(self) -> tuple[object, ...]:
        """What the first choice depends on (beyond the prompt): the key it is remembered by."""
        p, active = self.p, self.t.sampler.active
        return (
            self.backend,
            # (not the chain's seed: what the first token is drawn from does not depend on it)
            None if active is None else replace(active, seed=0),
            p.temperature,
            p.top_k,
            p.top_p,
            p.min_p,
            p.repeat_penalty,
            p.repeat_last_n,
        )

    def first_input(self, rows: Logits) -> First:
        """What the first token is chosen from, kept beyond the next decode."""
        t2 = self.top2(rows, -1) if self.p.record_top2 else None
        if self.how == HOST:
            return First(row=np.array(rows[-1], dtype=np.float32, copy=True), top2=t2)
        if self.warp.greedy:
            return First(token=self.choose(rows, -1), top2=t2)
        d = self.dist(rows, -1, ())
        if d.ids is None:
            d = Dist(w=patched_copy(d), total=d.total, n_vocab=d.n_vocab)
        return First(dist=d, top2=t2)

    def judge(self, rows: Logits, draft: Proposal) -> tuple[int, int]:
        """(accepted draft tokens m, the target's own token after them)."""
        warp, tokens = self.warp, draft.tokens
        k = len(tokens)
        token = self.graph_token
        if token is not None:
            for i, d in enumerate(tokens):  # stop reading at the first mismatch
                c = token(i)
                if c != d:
                    return i, c
            return k, token(k)
        if warp.greedy and self.how == HOST and not warp.penalises:
            best = rows[: k + 1].argmax(axis=1)  # every row at once
            miss = np.flatnonzero(best[:k] != np.asarray(tokens))
            m = int(miss[0]) if miss.size else k
            return m, int(best[m])
        for i, d in enumerate(tokens):
            if warp.greedy:
                choice_i = self.choose(rows, i, tokens[:i])
                if choice_i != d:
                    return i, choice_i
                continue
            q = draft.q[i] if draft.q is not None else None
            if self.graph_draws and self.how == PLAIN:  # p(d) read alone; p built if rejected
                if not accept_with(self.t.sampler.prob_at(i, d), q, d, self.rng):
                    return i, self._residual(i, self.dist(rows, i, tokens[:i]), q, d)
                continue
            if self.how == FULL:
                rejected = self._full_rejects(i, d, q, self._hist(tokens[:i]))
                if rejected is not None:
                    return i, self._residual(i, rejected, q, d)
                continue
            p = self.dist(rows, i, tokens[:i])
            if not accept_draft_token(p, q, d, self.rng):
                return i, self._residual(i, p, q, d)
        return k, self.choose(rows, k, tokens)

    def _full_rejects(self, i: int, d: int, q: Dist | None, hist: list[int]) -> Dist | None:
        """The acceptance test of draft token d at row i with a patched whole-vocabulary row:
        None when d is accepted, else the row's distribution (for the residual). Decided from
        d's patched weight alone where that bound settles it (most accepted tokens); the
        penalised ids of the whole row are read only where it does not."""
        made: list[Dist] = []

        def exact() -> float:
            made.append(self.fix.full_dist(i, hist))
            return made[0].prob(d)

        if accept_bounded(self.fix.floor(i, d, hist), exact, q, d, self.rng):
            return None
        return made[0] if made else self.fix.full_dist(i, hist)
