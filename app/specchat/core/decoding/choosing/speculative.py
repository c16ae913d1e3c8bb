"""Exact speculative sampling over `dist`'s distributions: accepting a drafted token with
probability min(1, p/q), drawing from the residual max(0, p - q) after a rejection, and when a
token llama.cpp drew in its graph may be kept as a draw from the distribution wanted here."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from specchat.core.decoding.choosing.dist import (
    Dist,
    Ids,
    PatchedRow,
    Uniform,
    sample,
    sample_small,
)


def keep_graph_draw(
    p: Dist, y: int, rng: Uniform, q: Dist | None = None, drafted: int = -1
) -> bool:
    """Whether to keep `y`, a token llama.cpp drew in its graph from the weights `p.w` (its
    softmax, summing to 1), as a draw from the distribution wanted here: p with its patch
    (`drafted` < 0), or the residual max(0, p - q) after `drafted` was rejected (q None: a
    point mass on it). Kept with probability rho(y) / w(y), rho the wanted weight in w's units
    (a patch only ever lowers a weight, so rho <= w). Otherwise the caller draws on the host
    from the wanted distribution itself. Together exact: y is output with probability
    w(y) * rho(y) / w(y) + (1 - sum(rho)) * rho(y) / sum(rho) = rho(y) / sum(rho). The
    vocabulary's last id is never kept: llama.cpp's draw lands there when its float32
    cumulative sum falls short of its uniform number (by ~1e-5 at most), so that id is drawn
    on the host (a reserved, never-likely token in the models SpecChat ships). A draw whose
    weight is not patched, with no draft rejected, costs no random number."""
    if p.w is None or p.ids is not None:
        raise ValueError("graph draws are kept only from a dense distribution")
    if not 0 <= y < p.n_vocab - 1:
        return False
    w = float(p.w[y])
    if w <= 0.0:
        return False
    rho = p.weight(y)
    if drafted >= 0:
        if q is None:
            if y == drafted:
                return False
        else:
            rho = max(0.0, rho - q.prob(y) * p.total)
    if rho >= w:
        return True
    return bool(rng.random() * w < rho)


def accept_draft_token(p: Dist, q: Dist | None, drafted: int, rng: Uniform) -> bool:
    """Accept `drafted` with probability min(1, p(x) / q(x)) (q(x) = 1 for a point-mass draft)."""
    return accept_with(p.prob(drafted), q, drafted, rng)


def accept_with(px: float, q: Dist | None, drafted: int, rng: Uniform) -> bool:
    """`accept_draft_token` given the target's probability px of `drafted`."""
    qx = 1.0 if q is None else q.prob(drafted)
    if qx <= 0.0:
        return px > 0.0
    return bool(rng.random() < min(1.0, px / qx))


def accept_bounded(
    low: float, exact: Callable[[], float], q: Dist | None, drafted: int, rng: Uniform
) -> bool:
    """`accept_with` where the target's probability of `drafted` is known to be at least `low`
    and `exact()` works it out: the same decision from the same uniform number, with `exact`
    called only where `low` cannot decide (u at or above low / q(x), or q(x) = 0 and low 0)."""
    qx = 1.0 if q is None else q.prob(drafted)
    if qx <= 0.0:
        return low > 0.0 or exact() > 0.0
    u = rng.random()
    return bool(u < min(1.0, low / qx) or u < min(1.0, exact() / qx))


def residual_sample(p: Dist, q: Dist | None, drafted: int, rng: Uniform) -> int:
    """Sample from normalise(max(0, p - q)); q=None: the draft was a point mass on `drafted`.
    A dense p is patched where q has mass (its weights, which may be llama.cpp's, are only
    read); a dense q over the whole vocabulary (host path) costs a copy."""
    if p.ids is None:
        if p.w is None:
            raise ValueError("p.w is missing: a distribution of another kind")
        if q is None:
            if not 0 <= drafted < p.n_vocab:
                return sample(p, rng)
            r = _minus(p, [drafted], [p.weight(drafted) / p.total])
        elif q.ids is None:
            r = _dense_residual(p, q)
        else:
            r = _minus(p, *q.listed())
        if r.total <= p.total * 1e-9:
            # p <= q everywhere, so p == q (a point-mass q cannot get here: it would have been
            # accepted): any draw from q is a draw from p.
            if q is None:
                raise ValueError("q is missing: a distribution of another kind")
            return sample(q, rng)
        return sample(r, rng)
    if p.probs is None:
        raise ValueError("p.probs is missing: a distribution of another kind")
    probs = p.probs.copy()
    if q is None:
        probs[p.ids == drafted] = 0.0
    else:
        probs = np.maximum(probs - _probs_at(q, p.ids), 0.0)
    total = float(probs.sum())
    if total <= 0.0:
        return sample(p, rng)
    return int(p.ids[sample_small(probs / total, rng)])


def _minus(p: Dist, ids: list[int], probs: list[float]) -> Dist:
    """Dense p less the probabilities `probs` of `ids` (floored at 0), as p's own weights with
    a patch kept as Python lists: a few dozen ids, where numpy calls cost most."""
    pids, pws = p.patch_lists()
    new_ids, new_w = list(pids), list(pws)
    at = {t: i for i, t in enumerate(pids)}
    total, scale, w, n = p.total, p.total, p.w, p.n_vocab
    if w is None:
        raise ValueError("w is missing: a distribution of another kind")
    for t, qp in zip(ids, probs, strict=True):
        if not 0 <= t < n:
            continue
        i = at.get(t)
        old = new_w[i] if i is not None else float(w[t])
        x = max(old - qp * scale, 0.0)
        total += x - old
        if i is None:
            at[t] = len(new_ids)
            new_ids.append(t)
            new_w.append(x)
        else:
            new_w[i] = x
    return PatchedRow(w, total, n, new_ids, new_w)


def _dense_residual(p: Dist, q: Dist) -> Dist:
    if q.w is None:
        raise ValueError("q.w is missing: a distribution of another kind")
    w = patched_copy(p)
    m = min(p.n_vocab, q.n_vocab)
    np.multiply(w, q.total / p.total, out=w)  # w is now p * q.total
    qw = q.w[:m] if q.fix_ids is None else patched_copy(q)[:m]
    np.subtract(w[:m], qw, out=w[:m])
    np.maximum(w, 0.0, out=w)
    return Dist(w=w, total=float(w.sum(dtype=np.float64)), n_vocab=p.n_vocab)


def patched_copy(d: Dist) -> npt.NDArray[np.float32]:
    """A dense distribution's weights with its patch applied, as a new float32 array."""
    if d.w is None:
        raise ValueError("d.w is missing: a distribution of another kind")
    w = d.w.astype(np.float32, copy=True)
    if d.fix_ids is not None:
        if d.fix_w is None:
            raise ValueError("d.fix_w is missing: a distribution of another kind")
        w[d.fix_ids] = d.fix_w
    return w


def _probs_at(q: Dist, ids: Ids) -> npt.NDArray[np.float64]:
    """q's probability of each of `ids` (q dense: direct look-ups; sparse: a small join)."""
    if q.ids is None:
        if q.w is None:
            raise ValueError("q.w is missing: a distribution of another kind")
        inside = ids < q.n_vocab
        out = np.zeros(ids.shape[0], dtype=np.float64)
        out[inside] = q.weights_at(ids[inside]) / q.total
        return out
    if q.probs is None:
        raise ValueError("q.probs is missing: a distribution of another kind")
    order = np.argsort(q.ids)
    sorted_ids = q.ids[order]
    pos = np.searchsorted(sorted_ids, ids)
    pos = np.minimum(pos, sorted_ids.shape[0] - 1)
    hit = sorted_ids[pos] == ids
    return np.where(hit, q.probs[order][pos], 0.0)
