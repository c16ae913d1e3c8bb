"""The host's warp of raw logits: llama.cpp's order (repeat penalty, top-k, top-p, min-p, then
temperature) into a greedy choice or a distribution (`dist.Dist`), over a whole row or over a
chain's candidates; top-2 for the divergence view.

The same `Warp` turns both the target's and the draft's logits into distributions p and q, so
speculative acceptance (`speculative.py`: min(1, p/q), the residual max(0, p - q)) reproduces the
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

from specchat.core.decoding.choosing.dist import Dist, Ids
from specchat.core.params import GenerationParams
from specchat.core.types import Top2

Logits = npt.NDArray[np.float32]
# The greedy draft's confidence is its top token's probability renormalised over the tokens
# within this many logits of the best (the tail beyond adds < e^-9 each); like llama.cpp's
# draft sampler, which renormalises over its top 10.
CONFIDENCE_WINDOW = 9.0


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

    def cuts(self, n: int) -> bool:
        """Whether top-k, top-p or min-p may drop some of `n` candidates."""
        return 0 < self.top_k < n or self.top_p < 1.0 or self.min_p > 0.0

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
                if zs is None:
                    raise ValueError("zs is missing: a distribution of another kind")
                ids, zs = _nucleus_sparse(ids, zs, self.top_p)
        if self.min_p > 0.0:
            if ids is None:
                zmax = float(z.max())
                ids = np.flatnonzero(z >= zmax + math.log(self.min_p)).astype(np.int64)
                zs = z[ids].astype(np.float64)
            else:
                if zs is None:
                    raise ValueError("zs is missing: a distribution of another kind")
                keep = zs >= zs.max() + math.log(self.min_p)
                ids, zs = ids[keep], zs[keep]
        if ids is not None:
            if zs is None:
                raise ValueError("zs is missing: a distribution of another kind")
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


def sparse_warp(warp: Warp, ids: Ids, zs: npt.NDArray[np.float64]) -> Dist:
    """The warp over candidate tokens `ids` with (penalised) logits `zs`: top-k, top-p, min-p,
    then the temperature, as `Warp.dist` does for a whole row."""
    if 0 < warp.top_k < ids.shape[0]:
        part = np.argpartition(zs, ids.shape[0] - warp.top_k)[ids.shape[0] - warp.top_k :]
        ids, zs = ids[part], zs[part]
    if warp.top_p < 1.0:
        ids, zs = _nucleus_sparse(ids, zs, warp.top_p)
    if warp.min_p > 0.0:
        keep = zs >= zs.max() + math.log(warp.min_p)
        ids, zs = ids[keep], zs[keep]
    e = np.exp((zs - zs.max()) / warp.temperature)
    return Dist(ids=ids, probs=e / e.sum(), n_vocab=warp.n_vocab)


def sparse_warp_listed(
    warp: Warp, ids: list[int], zs: list[float]
) -> tuple[list[int], list[float]]:
    """`sparse_warp` over a few candidates as plain Python lists: (kept ids, their normalised
    probabilities), best first. For the draft model's ten candidates per drafted token, where
    numpy's per-call cost (caches cold after a decode) is most of the work."""
    order = sorted(range(len(zs)), key=zs.__getitem__, reverse=True)  # stable: ties keep order
    if 0 < warp.top_k < len(order):
        del order[warp.top_k :]
    top = zs[order[0]]
    if warp.top_p < 1.0:
        e = [math.exp(zs[j] - top) for j in order]
        bar, c = warp.top_p * sum(e), 0.0
        for cut, x in enumerate(e, start=1):
            c += x
            if c >= bar:
                del order[cut:]
                break
    if warp.min_p > 0.0:
        floor = top + math.log(warp.min_p)
        order = [j for j in order if zs[j] >= floor]
    w = [math.exp((zs[j] - top) / warp.temperature) for j in order]
    total = sum(w)
    return [ids[j] for j in order], [x / total for x in w]


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
