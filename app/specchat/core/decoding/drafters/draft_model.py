"""The draft-model drafter: a smaller GGUF model with its own KV cache."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from specchat.core.decoding.choosing.backend_sampler import TOP_K
from specchat.core.decoding.choosing.candidates import penalised as pen_value
from specchat.core.decoding.choosing.dist import Dist, ListedDist, Uniform, sample, sample_listed
from specchat.core.decoding.choosing.sampling import (
    Warp,
    backend_dist,
    confidence,
    sparse_warp_listed,
)
from specchat.core.decoding.drafters.base import DrafterKind, DraftSettings, Proposal
from specchat.core.decoding.runtime import ModelRuntime


class ModelDrafter:
    """Proposes k tokens by running the draft model k times.

    Its KV cache is kept a prefix of the conversation: `begin()` aligns it with a new prompt
    once per request (one comparison of the two token lists), and after each verification the
    decoder calls `rollback()` with the length it knows to agree, so a step never rescans the
    context. Only the tokens past the point of divergence are decoded again.
    """

    kind = DrafterKind.MODEL
    costly = True
    reads_target = False
    name = "draft model"
    DRAFT_EMA_KEEP = 0.7  # the running mean of accepted tokens: the old value's share

    def __init__(self, runtime: ModelRuntime, *, k_init: int = 4, k_max: int = 8) -> None:
        self.rt = runtime
        self.k_max = k_max
        self.k = k_init
        self._ema = float(k_init)  # running mean of accepted tokens per step
        self.catch_up_s = 0.0  # the last proposal's decoding of tokens it had not seen

    @property
    def runtime(self) -> ModelRuntime:
        return self.rt

    def lag(self, context_len: int) -> int:
        return context_len - len(self.rt.cache)

    def observe_target(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        """(It reads nothing of the target's.)"""

    def reset(self, k_init: int, k_max: int) -> None:
        self.k_max, self.k, self._ema = k_max, k_init, float(k_init)

    def begin(self, context: Sequence[int]) -> None:
        """A new request: keep the longest prefix the cache shares with `context`."""
        self.rt.truncate(min(self.rt.common_prefix(context), max(len(context) - 1, 0)))

    def rollback(self, n_agree: int) -> None:
        """The conversation now agrees with the cache for its first `n_agree` tokens only."""
        self.rt.truncate(n_agree)

    # llama-cpp-python's LlamaDraftModel contract (used by the benchmark's stock peer)
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        context = [int(t) for t in input_ids]
        self.rt.use_sampler(None)
        self.begin(context)
        k = int(kwargs.get("num_pred_tokens", self.k))
        return np.asarray(self.propose(context, k, DraftSettings()).tokens, dtype=np.intc)

    def propose(self, context: Sequence[int], k: int, settings: DraftSettings) -> Proposal:
        """Draft up to k tokens after `context`, whose prefix the cache already holds.

        Greedy: each token is the draft's (penalised) argmax, and drafting stops when its
        confidence falls below p_min. Sampled: each token is drawn from a draft distribution q,
        kept for the acceptance test (any q keeps the result exact; a better q is accepted more).
        With llama.cpp's backend sampler attached (the decoder decides), q is the draft's top
        candidates, as llama.cpp's own draft sampler has it: no logits row is read."""
        rt = self.rt
        warp, rng, p_min = settings.warp, settings.rng, settings.p_min
        k = min(k, rt.n_ctx - len(context))
        if k <= 0 or not context:
            return Proposal(source=self.name)
        keep = len(rt.cache)
        if keep >= len(context):  # nothing new to decode: step back one token for its logits
            keep = len(context) - 1
            rt.truncate(keep)
        start = time.perf_counter()
        row = rt.decode(context[keep:], logits_for="last")
        # tokens it had not seen (Auto drafted with lookup meanwhile): timed apart, so the
        # cost model's per-token drafting time is not a prefill's
        self.catch_up_s = time.perf_counter() - start if len(context) - keep > 1 else 0.0
        backend = rt.sampler.active
        draw: tuple[Warp, Uniform] | None = None  # sampled: the warp and the numbers drawn
        if warp is not None and not warp.greedy:
            if rng is None:
                raise ValueError("a sampled draft needs the reply's uniform numbers (rng)")
            draw = (warp, rng)
        sampled = draw is not None
        penalised = warp is not None and warp.penalises
        hist = list(context[-settings.history_tail :]) if penalised else []
        listed = backend is not None and backend.kind == TOP_K
        pen = _Window(hist, warp.last_n) if listed and penalised and warp is not None else None
        tokens: list[int] = []
        qs: list[Dist] = []
        for i in range(k):
            if listed:
                got = self._from_top(warp, pen, p_min, draw)
                if got is None:
                    break
                t, q = got
                if q is not None:
                    qs.append(q)
            elif backend is not None and draw is not None:
                got = self._from_chain(draw[1], p_min)
                if got is None:
                    break
                t, q = got
                qs.append(q)
            elif draw is not None:
                q = draw[0].dist(row[-1], hist, slot=i)
                if q.top_prob() < p_min:
                    break
                t = sample(q, draw[1])
                qs.append(q)
            else:
                z = row[-1] if warp is None else warp.logits(row[-1], hist)
                t = int(z.argmax())
                if p_min > 0.0 and confidence(z, t) < p_min:
                    break
            tokens.append(t)
            if pen is not None:
                pen.push(t)
            elif penalised:
                hist.append(t)
            if i + 1 < k and t not in rt.eog:
                row = rt.decode([t], logits_for="last")
            else:
                break
        return Proposal(tokens, qs if sampled else None, self.name)

    def _from_chain(self, rng: Uniform, p_min: float) -> tuple[int, Dist] | None:
        """The next draft token drawn on the host from the draft's distribution as its DIST
        chain computed it (its top-10: read and drawn as Python lists), with that distribution
        as q; None when the draft is not confident."""
        rt = self.rt
        few = rt.sampler.few(-1)
        if few is None:  # the whole vocabulary
            ids, probs = rt.sampler.probs(-1)
            q = backend_dist(ids, probs, rt.n_vocab, copy=True)
            return None if q.top_prob() < p_min else (sample(q, rng), q)
        cands, ps = few
        total = sum(ps)
        if total <= 0.0 or max(ps) < p_min * total:
            return None
        t = sample_listed(cands, ps, total, rng)
        return t, ListedDist(cands, ps, total, rt.n_vocab)

    def _from_top(
        self,
        warp: Warp | None,
        pen: _Window | None,
        p_min: float,
        draw: tuple[Warp, Uniform] | None,
    ) -> tuple[int, Dist | None] | None:
        """The next draft token from the draft's top candidates (llama.cpp's TOP_K chain), the
        repeat penalty (the ids in `pen`) applied to them on the host; None when the draft is
        not confident. `draw`: sampled (q is the warp over the candidates), else greedy."""
        cands, logits = self.rt.sampler.top(-1)  # fresh lists, changed in place below
        # Plain loops, not comprehensions: right after a decode every frame's code comes from
        # memory (measured: 365 -> 304 us a call at T = 1 with a penalty).
        if pen is not None and warp is not None:
            held, f = pen.ids, warp.penalty
            for j, c in enumerate(cands):
                if c in held:
                    logits[j] = pen_value(logits[j], f)
        top = max(logits)
        if draw is None:
            if p_min > 0.0:
                mass = 0.0
                for z in logits:
                    mass += math.exp(z - top)
                if mass * p_min > 1.0:  # the best candidate's probability is 1 / mass
                    return None
            return cands[logits.index(top)], None
        warp, rng = draw
        if warp.cuts(len(cands)):
            ids, ps = sparse_warp_listed(warp, cands, logits)
            if ps[0] < p_min:
                return None
            return sample_listed(ids, ps, 1.0, rng), ListedDist(ids, ps, 1.0, warp.n_vocab)
        # nothing truncated: the candidates' softmax at T (its weights replace the logits),
        # drawn in their own order
        inv, exp, total = 1.0 / warp.temperature, math.exp, 0.0
        for j, z in enumerate(logits):
            w = exp((z - top) * inv)
            logits[j] = w
            total += w
        if total * p_min > 1.0:  # the best candidate's weight is 1
            return None
        return sample_listed(cands, logits, total, rng), ListedDist(
            cands, logits, total, warp.n_vocab
        )

    def feedback(self, proposal: Proposal, drafted: int, accepted: int) -> None:
        """Adapt the draft length to the observed acceptance: aim one past the mean run."""
        if drafted == 0:
            return
        keep = self.DRAFT_EMA_KEEP
        self._ema = keep * self._ema + (1.0 - keep) * accepted
        self.k = max(1, min(self.k_max, math.ceil(self._ema) + 1))


class _Window:
    """The ids among the last `n` tokens of a growing history, kept up to date one token at a
    time (the draft's repeat penalty: built once per proposal, not once per drafted token)."""

    __slots__ = ("_hist", "_n", "_count", "ids")

    def __init__(self, history: list[int], n: int) -> None:
        self._hist, self._n = history, n
        self._count: dict[int, int] = {}
        for t in history[-n:]:
            self._count[t] = self._count.get(t, 0) + 1
        self.ids = self._count.keys()  # a live view: `in` is a dict look-up

    def push(self, token: int) -> None:
        hist, count = self._hist, self._count
        hist.append(token)
        count[token] = count.get(token, 0) + 1
        if len(hist) > self._n:
            old = hist[-self._n - 1]
            left = count[old] - 1
            if left:
                count[old] = left
            else:
                del count[old]
