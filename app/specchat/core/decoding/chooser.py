"""How the target's tokens are chosen from a decode's output: by llama.cpp inside its graph
(backend sampling: the argmax, or a sample and its distribution) or on the host from the raw
logits rows (`sampling.Warp`), and how a drafted run is judged against them (greedy match, or
exact speculative acceptance with residual resampling)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specchat.core.decoding.backend_sampler import DIST, DRAFT_TOP_K, GREEDY, TOP_K, SamplerSpec
from specchat.core.decoding.draft_model import ModelDrafter
from specchat.core.decoding.drafting import Draft
from specchat.core.decoding.runtime import Logits, ModelRuntime
from specchat.core.decoding.sampling import (
    Dist,
    Warp,
    accept_draft_token,
    backend_dist,
    residual_sample,
    sample,
)
from specchat.core.types import GenerationParams, Mode

History = Callable[[Sequence[int]], list[int]]  # tokens after ctx -> the penalty's history


class Chooser:
    """The target's token choices for one generation."""

    def __init__(
        self,
        target: ModelRuntime,
        params: GenerationParams,
        warp: Warp,
        rng: np.random.Generator,
        history: History,
    ) -> None:
        self.t, self.p, self.warp, self.rng = target, params, warp, rng
        self._hist = history
        self.backend = False  # llama.cpp's graph chooses the target's tokens

    def setup(self, mode: Mode, model: ModelDrafter | None) -> None:
        """Choose tokens in llama.cpp's graph (backend sampling) unless this request needs the
        raw logits: a repeat penalty over verification rows, or top-2 diagnostics."""
        p = self.p
        ok = not self.warp.penalises and not p.record_top2
        if self.warp.greedy:
            spec = SamplerSpec(GREEDY)
            dspec = SamplerSpec(TOP_K, top_k=DRAFT_TOP_K)
        else:
            # The chains give the distributions; every draw is made on the host from self.rng
            # (the seed), so the chains need no seed of their own and are reused across requests.
            spec = SamplerSpec(DIST, p.top_k, p.top_p, p.min_p, p.temperature)
            dk = min(DRAFT_TOP_K, p.top_k) if p.top_k > 0 else DRAFT_TOP_K
            dspec = SamplerSpec(DIST, dk, temperature=p.temperature)
        self.backend = self.t.use_sampler(spec if ok else None)
        if model is not None:
            drafting = ok and mode in (Mode.DRAFT, Mode.AUTO)
            model.rt.use_sampler(dspec if drafting else None)

    def choose(self, rows: Logits, i: int, extra: Sequence[int] = ()) -> int:
        """The target's token for output row i (greedy choice or a sample)."""
        if self.backend:
            if self.warp.greedy:
                return self.t.sampler.token(i)
            # Not llama.cpp's own draw: its in-graph sampler reuses one uniform number for
            # every decode of a generation, so its tokens all sit at the same quantile.
            return sample(self.dist(rows, i, extra), self.rng)
        if self.warp.greedy:
            return self.warp.argmax(rows[i], self._hist(extra))
        return sample(self.warp.dist(rows[i], self._hist(extra)), self.rng)

    def dist(self, rows: Logits, i: int, extra: Sequence[int]) -> Dist:
        """The target's warped distribution for output row i (T > 0)."""
        if self.backend:
            ids, probs = self.t.sampler.probs(i)
            return backend_dist(ids, probs, self.t.n_vocab, copy=False)
        return self.warp.dist(rows[i], self._hist(extra))

    def first_input(self, rows: Logits) -> object:
        """What the first token is chosen from: the greedy token, the distribution (copied out
        of llama.cpp's buffer), or the raw logits row (host path)."""
        if not self.backend:
            return np.array(rows[-1], dtype=np.float32, copy=True)
        if self.warp.greedy:
            return self.t.sampler.token(-1)
        ids, probs = self.t.sampler.probs(-1)
        return backend_dist(ids, probs, self.t.n_vocab, copy=True)

    def judge(self, rows: Logits, draft: Draft) -> tuple[int, int]:
        """(accepted draft tokens m, the target's own token after them)."""
        warp, tokens = self.warp, draft.tokens
        k = len(tokens)
        if warp.greedy and (self.backend or not warp.penalises):
            if self.backend:
                choice = [self.t.sampler.token(i) for i in range(k + 1)]
                m = next((i for i in range(k) if choice[i] != tokens[i]), k)
                return m, choice[m]
            best = rows.argmax(axis=1)  # every row at once
            miss = np.flatnonzero(best[:k] != np.asarray(tokens))
            m = int(miss[0]) if miss.size else k
            return m, int(best[m])
        for i, d in enumerate(tokens):
            if warp.greedy:
                choice_i = warp.argmax(rows[i], self._hist(tokens[:i]))
                if choice_i != d:
                    return i, choice_i
                continue
            p = self.dist(rows, i, tokens[:i])
            q = draft.q[i] if draft.q is not None else None
            if not accept_draft_token(p, q, d, self.rng):
                return i, residual_sample(p, q, d, self.rng)
        return k, self.choose(rows, k, tokens)
