"""Token choice from logits: the warp (llama.cpp's order: repeat penalty, top-k, top-p, min-p,
then temperature), greedy choice, and exact speculative acceptance (Leviathan et al. 2022;
Chen et al. 2023).

The same `Warp` turns both the target's and the draft's logits into distributions p and q, so the
speculative rule min(1, p/q) with residual sampling from normalise(max(0, p - q)) reproduces the
target's warped distribution exactly.

Everything here is on the per-token hot path, so it works on dense float32 rows in preallocated
buffers: a distribution over the whole vocabulary is an unnormalised weight vector plus its sum
(O(1) look-up of any token's probability), and only truncated distributions (top-k, top-p,
min-p) are kept as a short list of ids. Nothing is sorted or cumulated over the vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specchat.core.types import GenerationParams, Top2

Logits = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]

BLOCK = 1024  # dense sampling: block sums, then one block's cumulative sum
# The greedy draft's confidence is its top token's probability renormalised over the tokens
# within this many logits of the best (the tail beyond adds < e^-9 each); like llama.cpp's
# draft sampler, which renormalises over its top 10.
CONFIDENCE_WINDOW = 9.0


class Dist:
    """A warped next-token distribution.

    Dense (`ids is None`): `w` holds unnormalised weights for every token (possibly zero-padded
    past the vocabulary) and `total` their sum. Sparse: `ids` and normalised
    `probs` for the few tokens a truncation kept."""

    __slots__ = ("ids", "probs", "total", "w", "n_vocab")

    def __init__(
        self,
        *,
        w: npt.NDArray[np.float32] | None = None,
        total: float = 1.0,
        ids: Ids | None = None,
        probs: npt.NDArray[np.float64] | None = None,
        n_vocab: int = 0,
    ) -> None:
        self.w, self.total, self.ids, self.probs, self.n_vocab = w, total, ids, probs, n_vocab

    def prob(self, token: int) -> float:
        if self.ids is None:
            assert self.w is not None
            return float(self.w[token]) / self.total if 0 <= token < self.n_vocab else 0.0
        assert self.probs is not None
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def top_prob(self) -> float:
        if self.ids is None:
            return 1.0 / self.total  # the best token's weight is exp(0) = 1
        assert self.probs is not None
        return float(self.probs.max())


class Warp:
    """Turns a logits row (and the tokens before it) into the distribution a token is drawn
    from. Owns the float32 buffers its dense distributions live in: `slots` of them, so a
    draft's k distributions can be kept until verification."""

    def __init__(self, params: GenerationParams, n_vocab: int, slots: int = 1) -> None:
        self.temperature = params.temperature
        self.top_k = params.top_k
        self.top_p = params.top_p
        self.min_p = params.min_p
        self.penalty = params.repeat_penalty
        self.last_n = params.repeat_last_n
        self.n_vocab = n_vocab
        self._bufs: list[npt.NDArray[np.float32]] = []
        self._slots = slots if not self.greedy else 0
        self._scratch: npt.NDArray[np.float32] | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalises(self) -> bool:
        return self.penalty != 1.0 and self.last_n > 0

    def buffer(self, slot: int) -> npt.NDArray[np.float32]:
        """Dense weight buffer `slot` (allocated on first use)."""
        while len(self._bufs) <= slot:
            self._bufs.append(np.zeros(self.n_vocab, dtype=np.float32))
        return self._bufs[slot]

    # -- the repeat penalty -----------------------------------------------------------------
    def _penalty_ids(self, history: Sequence[int]) -> Ids | None:
        if not self.penalises or not history:
            return None
        ids = np.unique(np.asarray(history[-self.last_n :], dtype=np.int64))
        return ids[(ids >= 0) & (ids < self.n_vocab)]

    def _penalised(self, vals: Logits) -> Logits:
        """llama.cpp's repeat penalty: divide positive logits, multiply negative ones."""
        return np.where(vals > 0, vals / self.penalty, vals * self.penalty).astype(np.float32)

    def logits(self, row: Logits, history: Sequence[int]) -> Logits:
        """`row` with the repeat penalty applied (the row itself when there is none to apply;
        otherwise a scratch copy, valid until the next call)."""
        ids = self._penalty_ids(history)
        if ids is None or not ids.size:
            return row
        if self._scratch is None:
            self._scratch = np.empty(self.n_vocab, dtype=np.float32)
        np.copyto(self._scratch, row[: self.n_vocab])
        self._scratch[ids] = self._penalised(row[ids])
        return self._scratch

    # -- greedy -----------------------------------------------------------------------------
    def argmax(self, row: Logits, history: Sequence[int]) -> int:
        """The best token after the repeat penalty (one pass over the row when the best token
        is not a penalised one)."""
        ids = self._penalty_ids(history)
        best = int(row.argmax())
        if ids is None or not ids.size:
            return best
        if self.penalty > 1.0 and not np.any(ids == best):
            return best  # a penalty > 1 only lowers the penalised tokens
        return int(self.logits(row, history).argmax())

    # -- sampled ----------------------------------------------------------------------------
    def dist(self, row: Logits, history: Sequence[int], slot: int = 0) -> Dist:
        """The warped distribution (temperature > 0): penalties, top-k, top-p and min-p on the
        temperature-1 distribution, then the temperature, as llama.cpp's sampler chain does."""
        z = self.logits(row, history)[: self.n_vocab]
        ids: Ids | None = None
        zs: npt.NDArray[np.float64] | None = None
        if 0 < self.top_k < self.n_vocab:
            ids = _top_k_ids(z, self.top_k)
            zs = z[ids].astype(np.float64)
        if self.top_p < 1.0:
            if ids is None:
                ids = self._nucleus_dense(z, slot)
                zs = z[ids].astype(np.float64)
            else:
                assert zs is not None
                ids, zs = _nucleus_sparse(ids, zs, self.top_p)
        if self.min_p > 0.0:
            if ids is None:
                zmax = float(z.max())
                ids = np.flatnonzero(z >= zmax + math.log(self.min_p)).astype(np.int64)
                zs = z[ids].astype(np.float64)
            else:
                assert zs is not None
                keep = zs >= zs.max() + math.log(self.min_p)
                ids, zs = ids[keep], zs[keep]
        if ids is not None:
            assert zs is not None
            e = np.exp((zs - zs.max()) / self.temperature)
            return Dist(ids=ids, probs=e / e.sum(), n_vocab=self.n_vocab)
        w = self.buffer(slot)
        zmax = float(z.max())
        np.subtract(z, zmax, out=w)
        if self.temperature != 1.0:
            np.multiply(w, 1.0 / self.temperature, out=w)
        np.exp(w, out=w)
        return Dist(w=w, total=float(w.sum(dtype=np.float64)), n_vocab=self.n_vocab)

    def _nucleus_dense(self, z: Logits, slot: int) -> Ids:
        """Smallest set of most likely tokens (T = 1) whose mass reaches top_p. Candidates are
        the tokens above a probability threshold, lowered until they hold enough mass; only the
        candidates are sorted."""
        e = self.buffer(slot)
        np.subtract(z, float(z.max()), out=e)
        np.exp(e, out=e)
        total = float(e.sum(dtype=np.float64))
        for thr in (1e-3, 1e-6, 1e-9, 0.0):
            cand = np.flatnonzero(e >= thr) if thr > 0 else np.arange(self.n_vocab)
            mass = float(e[cand].sum(dtype=np.float64)) / total
            if mass >= self.top_p or thr == 0.0:
                break
        order = cand[np.argsort(-e[cand], kind="stable")]
        csum = np.cumsum(e[order], dtype=np.float64) / total
        cut = int(np.searchsorted(csum, self.top_p)) + 1
        return order[: min(cut, order.shape[0])].astype(np.int64)


def confidence(row: Logits, best: int) -> float:
    """The best token's probability (T = 1), renormalised over the tokens within
    CONFIDENCE_WINDOW logits of it: the greedy draft's p_min test, on the same (penalised)
    row the token was chosen from."""
    top = row[best]
    near = row[row >= top - CONFIDENCE_WINDOW]
    return float(1.0 / np.exp(near - top, dtype=np.float64).sum())


def _top_k_ids(z: Logits, k: int) -> Ids:
    """Ids of the k largest logits: candidates above a threshold (lowered until there are k),
    then a partition of the candidates only."""
    zmax = float(z.max())
    width = 8.0
    while True:
        cand = np.flatnonzero(z >= zmax - width)
        if cand.size >= k or width > 1e4:
            break
        width *= 2.0
    if cand.size < k:
        cand = np.arange(z.shape[0])
    if cand.size > k:
        part = np.argpartition(z[cand], cand.size - k)[cand.size - k :]
        cand = cand[part]
    return cand.astype(np.int64)


def _nucleus_sparse(
    ids: Ids, zs: npt.NDArray[np.float64], top_p: float
) -> tuple[Ids, npt.NDArray[np.float64]]:
    order = np.argsort(-zs, kind="stable")
    ids, zs = ids[order], zs[order]
    e = np.exp(zs - zs[0])
    csum = np.cumsum(e) / e.sum()
    cut = int(np.searchsorted(csum, top_p)) + 1
    return ids[:cut], zs[:cut]


def backend_dist(
    ids: npt.NDArray[np.int32] | None, probs: npt.NDArray[np.float32], n_vocab: int, *, copy: bool
) -> Dist:
    """A Dist over what llama.cpp's backend sampler reported: its probabilities over the whole
    vocabulary (used in place, normalised by llama.cpp's softmax), or over candidate ids.
    `copy`: keep it beyond the next decode (the draft's q)."""
    if ids is None and probs.shape[0] == n_vocab:
        return Dist(w=probs.copy() if copy else probs, total=1.0, n_vocab=n_vocab)
    if ids is None:
        ids = np.arange(probs.shape[0], dtype=np.int32)
    keep = probs > 0.0
    p = probs[keep].astype(np.float64)
    return Dist(ids=ids[keep].astype(np.int64), probs=p / p.sum(), n_vocab=n_vocab)


# -- drawing tokens ---------------------------------------------------------------------------
def sample(dist: Dist, rng: np.random.Generator) -> int:
    if dist.ids is None:
        assert dist.w is not None
        return _sample_weights(dist.w, rng)
    assert dist.probs is not None
    return int(dist.ids[_sample_small(dist.probs, rng)])


def _sample_small(p: npt.NDArray[np.float64], rng: np.random.Generator) -> int:
    c = np.cumsum(p)
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    i = min(i, p.shape[0] - 1)
    while i > 0 and p[i] <= 0.0:  # rounding at the very end: never return a zero-mass token
        i -= 1
    return i


def _sample_weights(w: npt.NDArray[np.float32], rng: np.random.Generator) -> int:
    """Draw an index with probability proportional to w: sum the blocks, pick a block, then
    cumulate inside that block only."""
    n = w.shape[0]
    main = n - n % BLOCK
    sums = w[:main].reshape(-1, BLOCK).sum(axis=1, dtype=np.float64)
    if main < n:
        sums = np.append(sums, w[main:].sum(dtype=np.float64))
    c = np.cumsum(sums)
    u = rng.random() * c[-1]
    j = min(int(np.searchsorted(c, u, side="right")), sums.shape[0] - 1)
    while j > 0 and sums[j] <= 0.0:
        j -= 1
    blk = w[j * BLOCK : (j + 1) * BLOCK]
    i = _sample_small_at(blk.astype(np.float64), u - (c[j - 1] if j else 0.0))
    return j * BLOCK + i


def _sample_small_at(p: npt.NDArray[np.float64], u: float) -> int:
    c = np.cumsum(p)
    i = min(int(np.searchsorted(c, u, side="right")), p.shape[0] - 1)
    while i > 0 and p[i] <= 0.0:
        i -= 1
    return i


def accept_draft_token(p: Dist, q: Dist | None, drafted: int, rng: np.random.Generator) -> bool:
    """Accept `drafted` with probability min(1, p(x) / q(x)) (q(x) = 1 for a point-mass draft)."""
    px = p.prob(drafted)
    qx = 1.0 if q is None else q.prob(drafted)
    if qx <= 0.0:
        return px > 0.0
    return bool(rng.random() < min(1.0, px / qx))


def residual_sample(p: Dist, q: Dist | None, drafted: int, rng: np.random.Generator) -> int:
    """Sample from normalise(max(0, p - q)); q=None: the draft was a point mass on `drafted`.
    Works in p's buffer (p is not used again after a rejection)."""
    if p.ids is None:
        assert p.w is not None
        w = p.w
        if q is None:
            w[drafted] = 0.0
        elif q.ids is None:
            assert q.w is not None
            m = min(p.n_vocab, q.n_vocab)
            np.multiply(w, q.total / p.total, out=w)  # w is now p * q.total
            np.subtract(w[:m], q.w[:m], out=w[:m])
            np.maximum(w, 0.0, out=w)
        else:
            assert q.probs is not None
            scale = 1.0 / p.total
            keep = q.ids[q.ids < p.n_vocab]
            w[keep] = np.maximum(w[keep] * scale - q.probs[q.ids < p.n_vocab], 0.0) / scale
        if float(w.sum(dtype=np.float64)) <= 0.0:
            # p <= q everywhere, so p == q (a point-mass q cannot get here: it would have been
            # accepted): any draw from q is a draw from p. p's buffer is spent, q's is intact.
            assert q is not None
            return sample(q, rng)
        return _sample_weights(w, rng)
    assert p.probs is not None
    probs = p.probs.copy()
    if q is None:
        probs[p.ids == drafted] = 0.0
    else:
        probs = np.maximum(probs - _probs_at(q, p.ids), 0.0)
    total = float(probs.sum())
    if total <= 0.0:
        return sample(p, rng)
    return int(p.ids[_sample_small(probs / total, rng)])


def _probs_at(q: Dist, ids: Ids) -> npt.NDArray[np.float64]:
    """q's probability of each of `ids` (q dense: direct look-ups; sparse: a small join)."""
    if q.ids is None:
        assert q.w is not None
        inside = ids < q.n_vocab
        out = np.zeros(ids.shape[0], dtype=np.float64)
        out[inside] = q.w[ids[inside]] / q.total
        return out
    assert q.probs is not None
    order = np.argsort(q.ids)
    sorted_ids = q.ids[order]
    pos = np.searchsorted(sorted_ids, ids)
    pos = np.minimum(pos, sorted_ids.shape[0] - 1)
    hit = sorted_ids[pos] == ids
    return np.where(hit, q.probs[order][pos], 0.0)


def top2(row: Logits) -> Top2:
    """The two best tokens of a row, from two argmaxes (no sort, no copy)."""
    i1 = int(row.argmax())
    left = int(row[:i1].argmax()) if i1 > 0 else -1
    right = i1 + 1 + int(row[i1 + 1 :].argmax()) if i1 + 1 < row.shape[0] else -1
    if left < 0:
        i2 = right
    elif right < 0:
        i2 = left
    else:
        i2 = left if row[left] >= row[right] else right
    return Top2(i1, float(row[i1]), i2, float(row[i2]))
