"""Token choice from logits: the warp (penalty, temperature, top-k, top-p, min-p), greedy choice,
and exact speculative acceptance (Leviathan et al. 2022; Chen et al. 2023).

The same `Warp` turns both the target's and the draft's logits into distributions p and q, so the
speculative rule min(1, p/q) with residual sampling from normalise(max(0, p - q)) reproduces the
target's warped distribution exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .types import GenerationParams, Top2

Logits = npt.NDArray[np.float32]
Probs = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SparseDist:
    """A distribution over the few tokens that survive the warp: ids and their probabilities."""

    ids: npt.NDArray[np.int64]
    probs: Probs  # sums to 1

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def top_prob(self) -> float:
        return float(self.probs.max())


class Warp:
    """Turns a logits row (and the tokens before it) into the distribution a token is drawn from."""

    def __init__(self, params: GenerationParams) -> None:
        self.temperature = params.temperature
        self.top_k = params.top_k
        self.top_p = params.top_p
        self.min_p = params.min_p
        self.penalty = params.repeat_penalty
        self.last_n = params.repeat_last_n

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def penalised(self, logits: Logits, history: Sequence[int]) -> Logits:
        """llama.cpp's repeat penalty: divide positive logits, multiply negative ones."""
        if self.penalty == 1.0 or self.last_n == 0 or not history:
            return logits
        recent = np.unique(np.asarray(history[-self.last_n :], dtype=np.int64))
        out = logits.copy()
        vals = out[recent]
        out[recent] = np.where(vals > 0, vals / self.penalty, vals * self.penalty)
        return out

    def argmax(self, logits: Logits, history: Sequence[int]) -> int:
        return int(np.argmax(self.penalised(logits, history)))

    def dist(self, logits: Logits, history: Sequence[int]) -> SparseDist:
        """The warped distribution (temperature > 0)."""
        z = self.penalised(logits, history).astype(np.float64) / max(self.temperature, 1e-6)
        n = z.shape[0]
        if 0 < self.top_k < n:
            ids = np.argpartition(z, n - self.top_k)[n - self.top_k :]
        else:
            ids = np.arange(n)
        zs = z[ids]
        e = np.exp(zs - zs.max())
        p = e / e.sum()
        if self.top_p < 1.0:
            ids, p = _nucleus(ids, p, self.top_p)
        if self.min_p > 0.0:
            keep = p >= self.min_p * p.max()
            ids, p = ids[keep], p[keep]
        return SparseDist(ids.astype(np.int64), p / p.sum())

    def top_prob(self, logits: Logits, history: Sequence[int]) -> float:
        """Probability of the most likely token (used for the draft's p_min cut-off)."""
        if self.greedy:
            z = self.penalised(logits, history).astype(np.float64)
            return float(1.0 / np.exp(z - z.max()).sum())
        return self.dist(logits, history).top_prob()


def _nucleus(ids: npt.NDArray[np.int64], p: Probs, top_p: float) -> tuple[npt.NDArray, Probs]:
    """Smallest set of most likely tokens whose mass reaches top_p (grows the candidate set
    geometrically so a 150k vocabulary is not fully sorted on every token)."""
    n = p.shape[0]
    m = min(64, n)
    while True:
        cand = np.argpartition(p, n - m)[n - m :] if m < n else np.arange(n)
        order = cand[np.argsort(-p[cand], kind="stable")]
        csum = np.cumsum(p[order])
        if csum[-1] >= top_p or m == n:
            cut = int(np.searchsorted(csum, top_p)) + 1
            sel = order[: min(cut, order.shape[0])]
            return ids[sel], p[sel]
        m = min(n, m * 8)


def sample(dist: SparseDist, rng: np.random.Generator) -> int:
    c = np.cumsum(dist.probs)
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    return int(dist.ids[min(i, dist.ids.shape[0] - 1)])


def residual_sample(
    p: SparseDist, q: SparseDist | None, drafted: int, rng: np.random.Generator
) -> int:
    """Sample from normalise(max(0, p - q)); q=None: the draft was a point mass on `drafted`."""
    probs = p.probs.copy()
    if q is None:
        probs[p.ids == drafted] = 0.0
    else:
        qa = np.zeros_like(probs)
        common, pi, qi = np.intersect1d(p.ids, q.ids, return_indices=True)
        qa[pi] = q.probs[qi]
        probs = np.maximum(probs - qa, 0.0)
    total = probs.sum()
    if total <= 0.0:  # p == q exactly: any token from p is a valid draw
        return sample(p, rng)
    return sample(SparseDist(p.ids, probs / total), rng)


def accept_draft_token(
    p: SparseDist, q: SparseDist | None, drafted: int, rng: np.random.Generator
) -> bool:
    """Accept `drafted` with probability min(1, p(x) / q(x)) (q(x) = 1 for a point-mass draft)."""
    px = p.prob(drafted)
    qx = 1.0 if q is None else q.prob(drafted)
    if qx <= 0.0:
        return px > 0.0
    return bool(rng.random() < min(1.0, px / qx))


def top2(logits: Logits) -> Top2:
    i1, i2 = np.argpartition(logits, -2)[-2:][::-1]
    if logits[i2] > logits[i1]:
        i1, i2 = i2, i1
    return Top2(int(i1), float(logits[i1]), int(i2), float(logits[i2]))
