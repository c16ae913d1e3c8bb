"""Next-token distributions and drawing from them, exactly (speculative acceptance included).

A dense distribution is a weight vector over the vocabulary (possibly llama.cpp's own buffer,
only ever read) plus its sum and an optional sparse patch; a truncated one is a short list of
ids and probabilities. Drawing from a dense one with a patch takes the patch's ids first (their
weights are known: no pass over the row when the draw lands there, as it mostly does where a
repeat penalty or a rejected draft made the patch); otherwise, or for the rest, it sums blocks of
the weights, then cumulates inside one block: nothing is sorted over the vocabulary, nothing is
written into the weights.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Ids = npt.NDArray[np.int64]


class Uniform(Protocol):
    """Where a draw's uniform numbers in [0, 1) come from: the decoder's `random.Random`
    (a C method call, where numpy's Generator.random costs ~10 µs more right after a decode)."""

    def random(self) -> float: ...


BLOCK = 1024  # dense sampling: block sums, then one block's cumulative sum


class Dist:
    """A warped next-token distribution.

    Dense (`ids is None`): `w` holds unnormalised weights for every token (possibly zero-padded
    past the vocabulary; possibly llama.cpp's own buffer, so never written to) and `total` their
    sum. A sparse patch, `fix_ids` -> `fix_w`, replaces the weights of a few tokens (a repeat
    penalty, a residual's removed mass) without touching `w`; `total` includes it. Sparse: `ids`
    and normalised `probs` for the few tokens a truncation kept."""

    __slots__ = ("ids", "probs", "total", "w", "n_vocab", "fix_ids", "fix_w")

    def __init__(
        self,
        *,
        w: npt.NDArray[np.float32] | None = None,
        total: float = 1.0,
        ids: Ids | None = None,
        probs: npt.NDArray[np.float64] | None = None,
        n_vocab: int = 0,
        fix_ids: Ids | None = None,
        fix_w: npt.NDArray[np.float64] | None = None,
    ) -> None:
        self.w, self.total, self.ids, self.probs, self.n_vocab = w, total, ids, probs, n_vocab
        self.fix_ids, self.fix_w = fix_ids, fix_w

    def weight(self, token: int) -> float:
        """A dense distribution's unnormalised weight of `token` (its patch applied)."""
        if self.w is None:
            raise ValueError("self.w is missing: a distribution of another kind")
        if self.fix_ids is not None:
            if self.fix_w is None:
                raise ValueError("self.fix_w is missing: a distribution of another kind")
            hit = np.flatnonzero(self.fix_ids == token)
            if hit.size:
                return float(self.fix_w[hit[0]])
        return float(self.w[token]) if 0 <= token < self.n_vocab else 0.0

    def weights_at(self, ids: Ids) -> npt.NDArray[np.float64]:
        """Unnormalised weights of `ids` (in the vocabulary), the patch applied."""
        if self.w is None:
            raise ValueError("self.w is missing: a distribution of another kind")
        out = self.w[ids].astype(np.float64)
        if self.fix_ids is not None:
            if self.fix_w is None:
                raise ValueError("self.fix_w is missing: a distribution of another kind")
            pos = np.searchsorted(self.fix_ids, ids)
            pos = np.minimum(pos, self.fix_ids.shape[0] - 1)
            hit = self.fix_ids[pos] == ids
            out[hit] = self.fix_w[pos[hit]]
        return out

    def patch_lists(self) -> tuple[list[int], list[float]]:
        """A dense distribution's patch as Python lists (ids, their weights); empty: none."""
        if self.fix_ids is None:
            return [], []
        if self.fix_w is None:
            raise ValueError("self.fix_w is missing: a distribution of another kind")
        return self.fix_ids.tolist(), self.fix_w.tolist()

    def prob(self, token: int) -> float:
        if self.ids is None:
            return self.weight(token) / self.total
        if self.probs is None:
            raise ValueError("self.probs is missing: a distribution of another kind")
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def listed(self) -> tuple[list[int], list[float]]:
        """A sparse distribution's ids and probabilities as Python lists."""
        if self.ids is None or self.probs is None:
            raise ValueError("a dense distribution has no ids to list")
        return self.ids.tolist(), self.probs.tolist()

    def top_prob(self) -> float:
        if self.ids is None:
            return 1.0 / self.total  # the best token's weight is exp(0) = 1
        if self.probs is None:
            raise ValueError("self.probs is missing: a distribution of another kind")
        return float(self.probs.max())


class ListedDist(Dist):
    """A few ids and their weights (summing to `total`) kept as Python lists: the draft
    model's q over its ten candidates, made once per drafted token right after a decode, when
    each numpy call costs ~10 us. `prob` and `top_prob` read the lists; the numpy `ids` and
    normalised `probs` of a sparse Dist are made only when first asked for (a residual after a
    rejection)."""

    __slots__ = ("_lids", "_lw", "_lt")

    def __init__(self, ids: list[int], weights: list[float], total: float, n_vocab: int) -> None:
        self._lids, self._lw, self._lt = ids, weights, total
        self.w, self.total, self.n_vocab, self.fix_ids, self.fix_w = None, 1.0, n_vocab, None, None

    def __getattr__(self, name: str) -> Any:
        # only for the two slots left unset until they are asked for
        if name == "ids" or name == "probs":
            self.ids = np.array(self._lids, dtype=np.int64)
            self.probs = np.array(self._lw, dtype=np.float64) / self._lt
            return getattr(self, name)
        raise AttributeError(name)

    def prob(self, token: int) -> float:
        try:
            return self._lw[self._lids.index(token)] / self._lt
        except ValueError:
            return 0.0

    def top_prob(self) -> float:
        return max(self._lw) / self._lt

    def listed(self) -> tuple[list[int], list[float]]:
        t = self._lt
        return self._lids, [x / t for x in self._lw]


class PatchedRow(Dist):
    """A dense distribution over weights that are llama.cpp's (only read), with the patch at
    a few ids kept as Python lists (a row's penalised ids, worked out right after a decode):
    `weight` reads the lists (an acceptance test needs one token's), and the sorted numpy
    `fix_ids` and `fix_w` of a patched Dist are made only when first asked for (a draw over
    the whole row, a residual)."""

    __slots__ = ("_pids", "_pw")

    def __init__(
        self,
        w: npt.NDArray[np.float32],
        total: float,
        n_vocab: int,
        ids: list[int],
        new: list[float],
    ) -> None:
        self.w, self.total, self.n_vocab, self.ids, self.probs = w, total, n_vocab, None, None
        self._pids, self._pw = ids, new

    def __getattr__(self, name: str) -> Any:
        # only for the two slots left unset until they are asked for
        if name == "fix_ids" or name == "fix_w":
            ids = np.array(self._pids, dtype=np.int64)
            order = np.argsort(ids)
            self.fix_ids = ids[order]
            self.fix_w = np.array(self._pw, dtype=np.float64)[order]
            return getattr(self, name)
        raise AttributeError(name)

    def patch_lists(self) -> tuple[list[int], list[float]]:
        return self._pids, self._pw

    def weight(self, token: int) -> float:
        try:
            return self._pw[self._pids.index(token)]
        except ValueError:
            w = self.w
            if w is None:
                raise ValueError("w is missing: a distribution of another kind") from None
            return float(w[token]) if 0 <= token < self.n_vocab else 0.0


# -- drawing tokens ---------------------------------------------------------------------------
def sample(dist: Dist, rng: Uniform) -> int:
    if dist.ids is None:
        if dist.w is None:
            raise ValueError("dist.w is missing: a distribution of another kind")
        return _sample_weights(dist, rng)
    if dist.probs is None:
        raise ValueError("dist.probs is missing: a distribution of another kind")
    return int(dist.ids[sample_small(dist.probs, rng)])


def sample_small(p: npt.NDArray[np.float64], rng: Uniform) -> int:
    c = np.cumsum(p)
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    i = min(i, p.shape[0] - 1)
    while i > 0 and p[i] <= 0.0:  # rounding at the very end: never return a zero-mass token
        i -= 1
    return i


def _sample_weights(d: Dist, rng: Uniform) -> int:
    """Draw a token of a dense distribution by inverse CDF over one uniform number, the
    patch's ids first (in the patch's order), then the other ids in token order. Only a draw
    past the patch reads the row. Exact as long as `d.total` is the weights' sum (for
    llama.cpp's softmax: 1, to its float32 rounding)."""
    ids, ws = d.patch_lists()
    if not ids:
        return _draw_row(d, None, rng.random())
    u = rng.random() * d.total
    tok, c = _walk(ids, ws, u)
    if tok is not None:
        return tok
    rest = d.total - c
    if rest > 0.0:  # the rest of the vocabulary: the row without the patch's ids
        tok = _draw_row(d, np.array(ids, dtype=np.int64), min((u - c) / rest, 1.0))
        if tok >= 0:
            return tok
    return _last_with_mass(ids, ws)


def _draw_row(d: Dist, off: Ids | None, frac: float) -> int:
    """The token at `frac` (in [0, 1)) of the way along the row's CDF, with the ids `off` at
    weight 0: sum the blocks of its weights, pick a block, then cumulate inside that block
    only. Reads `d.w`, never writes it; -1 when no weight is left."""
    w = d.w
    if w is None:
        raise ValueError("w is missing: a distribution of another kind")
    # float32 block sums, the last block short (~1e-7 relative error, as llama.cpp's own
    # float32 softmax), in one call: each numpy call costs ~10 us right after a decode, as
    # much as reading the row; the cumulative sum over blocks in float64
    sums = np.add.reduceat(w, _block_starts(w.shape[0])).astype(np.float64)
    if off is not None:
        np.subtract.at(sums, off // BLOCK, w[off])
        np.maximum(sums, 0.0, out=sums)
    c = np.cumsum(sums)
    if c[-1] <= 0.0:
        return -1
    u = frac * c[-1]
    j = min(int(np.searchsorted(c, u, side="right")), sums.shape[0] - 1)
    while j > 0 and sums[j] <= 0.0:
        j -= 1
    blk = w[j * BLOCK : (j + 1) * BLOCK].astype(np.float64)
    if off is not None:
        inside = (off >= j * BLOCK) & (off < (j + 1) * BLOCK)
        blk[off[inside] - j * BLOCK] = 0.0
    i = _sample_small_at(blk, u - (c[j - 1] if j else 0.0))
    return j * BLOCK + i


_STARTS: dict[int, npt.NDArray[np.intp]] = {}


def _block_starts(n: int) -> npt.NDArray[np.intp]:
    starts = _STARTS.get(n)
    if starts is None:
        starts = _STARTS[n] = np.arange(0, n, BLOCK, dtype=np.intp)
    return starts


def sample_listed(ids: list[int], w: list[float], total: float, rng: Uniform) -> int:
    """Draw one of a few `ids` by their weights `w` (summing to `total` > 0) as plain Python:
    cheaper than numpy for ten values right after a decode has left the caches cold."""
    tok, _ = _walk(ids, w, rng.random() * total)
    return tok if tok is not None else _last_with_mass(ids, w)


def _walk(ids: list[int], w: list[float], u: float) -> tuple[int | None, float]:
    """The id whose interval of the weights' running sum holds u (None past their sum), and
    that sum."""
    c = 0.0
    for tok, x in zip(ids, w, strict=True):
        c += x
        if u < c:
            return tok, c
    return None, c


def _last_with_mass(ids: list[int], w: list[float]) -> int:
    """Rounding at the very end of a walk: the last id with any weight."""
    return next(tok for tok, x in zip(reversed(ids), reversed(w), strict=True) if x > 0)


def _sample_small_at(p: npt.NDArray[np.float64], u: float) -> int:
    c = np.cumsum(p)
    i = min(int(np.searchsorted(c, u, side="right")), p.shape[0] - 1)
    while i > 0 and p[i] <= 0.0:
        i -= 1
    return i
