"""The sparse host path: what llama.cpp's graph computes, corrected on the host at a few ids.

A repeat penalty (llama.cpp's penalties sampler cannot run in the graph for more than one output
row per sequence, and every verification row has its own history; it refuses the graph in any
context that allows more (`n_outputs_max_per_seq` > 1), so off's one-row decodes cannot use it
either: tried, its chain then chose no token) and the divergence view's
top-2 used to need the raw logits row of every position on the host. Here llama.cpp's graph does
the full-vocabulary work and the host touches only the penalised ids and a few winners:

- T = 0, or any top_k > 0: a TOP_K chain gives the K best raw logits. A penalty >= 1 only
  lowers the penalised tokens (at most P = min(repeat_last_n, n_vocab) distinct ids), so with
  K >= top_k + P (greedy: top_k = 1) every token of the penalised top-k is a candidate: a token
  outside the K best is beaten by at least top_k unpenalised candidates whose logits the penalty
  leaves as they are. Top-k, top-p, min-p and the temperature then run on the K candidates.
- T > 0 without truncation: a DIST chain with the temperature only gives every token's
  probability softmax(z / T) and scaled logit z / T. The penalised distribution differs only at
  the penalised ids: their weight becomes p(x) * exp((pen(z) - z) / T), a sparse patch of a
  distribution whose weights stay in llama.cpp's buffer (read, never written). Exact: the whole
  vocabulary's normaliser is llama.cpp's own softmax sum, corrected by the patch.

A penalty below 1 raises penalised tokens (the K best need not hold the winners), and top-p or
min-p with a penalty and no top_k need the penalised order of the whole vocabulary: those keep
the raw-logits host path (`sampling.Warp`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specchat.core.decoding.choosing.backend_sampler import DIST, TOP_K, BackendSampler, SamplerSpec
from specchat.core.decoding.choosing.dist import Dist, PatchedRow
from specchat.core.decoding.choosing.sampling import Warp, sparse_warp
from specchat.core.params import GenerationParams
from specchat.core.types import Top2

TOP = "top"  # a TOP_K chain, corrected on the host
FULL = "full"  # a DIST chain (temperature only), patched at the penalised ids
HOST = "host"  # raw logits rows


def plan(params: GenerationParams, n_vocab: int) -> tuple[str, SamplerSpec | None]:
    """How a request that needs a repeat penalty or top-2 gets its target rows."""
    penalises = params.repeat_penalty != 1.0 and params.repeat_last_n > 0
    if penalises and params.repeat_penalty < 1.0:
        return HOST, None
    p = min(params.repeat_last_n, n_vocab) if penalises else 0
    greedy = params.temperature <= 0.0
    if greedy or params.top_k > 0:
        k = (1 if greedy else params.top_k) + p
        if k < n_vocab:
            return TOP, SamplerSpec(TOP_K, top_k=max(k, 2))
    if 0 < params.top_k < n_vocab or params.record_top2:
        return HOST, None
    if penalises and (params.top_p < 1.0 or params.min_p > 0.0):
        return HOST, None
    return FULL, SamplerSpec(DIST, temperature=params.temperature)


def penalised(v: float, penalty: float) -> float:
    """llama.cpp's repeat penalty of one logit."""
    return v / penalty if v > 0 else v * penalty


class HostFix:
    """The target's choices from the candidates or distributions of a context's chain."""

    def __init__(self, warp: Warp, sampler: BackendSampler, n_vocab: int) -> None:
        self.warp, self.sampler, self.n_vocab = warp, sampler, n_vocab
        self.penalty = warp.penalty if warp.penalises else 1.0
        self.last_n = warp.last_n

    def _pen(self, hist: Sequence[int]) -> set[int]:
        return set(hist[-self.last_n :]) if self.penalty != 1.0 else set()

    def greedy(self, i: int, hist: Sequence[int]) -> int:
        """The argmax of row i's penalised logits."""
        ids, vals = self.sampler.top(i)
        best = max(vals)
        tok = ids[vals.index(best)]
        pen = self._pen(hist)
        if tok not in pen:
            return tok  # the penalty only lowers the others
        f = self.penalty
        fixed = [penalised(v, f) if t in pen else v for t, v in zip(ids, vals, strict=True)]
        return ids[fixed.index(max(fixed))]

    def top2(self, i: int) -> Top2:
        """Row i's two best raw logits (from the candidates)."""
        ids, vals = self.sampler.top(i)
        order = sorted(range(len(vals)), key=vals.__getitem__, reverse=True)
        a, b = order[0], order[1] if len(order) > 1 else order[0]
        return Top2(ids[a], vals[a], ids[b], vals[b])

    def top_dist(self, i: int, hist: Sequence[int]) -> Dist:
        """T > 0 with top_k: the warp over row i's candidates, penalised ones corrected."""
        ids_l, vals = self.sampler.top(i)
        ids = np.asarray(ids_l, dtype=np.int64)
        z = np.asarray(vals, dtype=np.float64)
        pen = self._pen(hist)
        if pen:
            f = self.penalty
            for j, t in enumerate(ids_l):
                if t in pen:
                    z[j] = penalised(vals[j], f)
        return sparse_warp(self.warp, ids, z)

    def weighed(self, i: int, token: int, hist: Sequence[int]) -> tuple[float, float]:
        """Row i's weight of `token` in llama.cpp's softmax (T > 0, no truncation) and the same
        weight patched by the penalty, as `full_dist` works it out, read at that one id."""
        w = self.sampler.prob_at(i, token)
        if w <= 0.0 or self.penalty == 1.0 or token not in hist[-self.last_n :]:
            return w, w
        temp = self.warp.temperature
        zt = self.sampler.logit_at(i, token)
        return w, w * math.exp(penalised(zt * temp, self.penalty) / temp - zt)

    def floor(self, i: int, token: int, hist: Sequence[int]) -> float:
        """A lower bound on row i's penalised probability of `token`, read at that one id: its
        patched weight over the most the normaliser can be. The patch only lowers weights, so
        the normaliser `full_dist` works out is at most 1 less what the patch took from `token`
        itself; the bound is a hair under (for that sum's rounding). An acceptance test decides
        from it alone most of the time."""
        w, patched = self.weighed(i, token, hist)
        most = 1.0 - (w - patched)
        return (patched / most if most > patched else patched) * (1.0 - 1e-9)

    def full_dist(self, i: int, hist: Sequence[int]) -> Dist:
        """T > 0 without truncation: llama.cpp's softmax over the whole vocabulary, with the
        penalised ids' weights patched (p(x) * exp((pen(z) - z) / T)). The patch is worked
        out on Python floats: a few dozen ids, where numpy's calls cost most right after a
        decode."""
        n = self.n_vocab
        ids = list({t for t in hist[-self.last_n :] if 0 <= t < n}) if self.penalty != 1.0 else []
        if not ids:
            return Dist(w=self.sampler.probs(i)[1], total=1.0, n_vocab=n)
        temp, f = self.warp.temperature, self.penalty
        probs, zts, olds = self.sampler.at(i, ids)  # and z / T and p at the penalised ids
        new: list[float] = []
        gained = 0.0
        for zt, old in zip(zts, olds, strict=True):
            w = old * math.exp(penalised(zt * temp, f) / temp - zt)
            new.append(w)
            gained += w - old
        return PatchedRow(probs, 1.0 + gained, n, ids, new)
