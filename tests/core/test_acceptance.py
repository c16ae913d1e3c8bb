"""Speculative acceptance, exactly: `accept_draft_token` and `residual_sample` on hand-made
target (p) and draft (q) distributions, dense and sparse in all four combinations, a draft
token q gives no mass, and a point-mass draft (q = None, as n-gram lookup proposes).

No statistics: the uniform draw the functions take from their generator is fixed by the test.
A draft token is accepted exactly when u < min(1, p(x) / q(x)), so u just below and just above
that number, worked out here with fractions, pins the acceptance probability; the residual
max(0, p - q), normalised, is drawn by inverse CDF (a sparse p in its ids' order; a dense p in
token order, except that the ids whose weight the residual changed, q's ids in q's order, come
first), so u at the middle of each token's interval and either side of each boundary pins the
residual distribution. The
probabilities are dyadic, so the float arithmetic is exact and the fractions are the truth."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction as F

import numpy as np
import pytest

from specchat.core.decoding.choosing.dist import Dist
from specchat.core.decoding.choosing.speculative import (
    accept_bounded,
    accept_draft_token,
    residual_sample,
)

EPS = 1e-9

# p = (1/4, 1/8, 1/16, 1/16, 0, 1/2), q = (1/8, 1/8, 1/8, 1/8, 1/4, 1/4) over 6 tokens
P = [F(1, 4), F(1, 8), F(1, 16), F(1, 16), F(0), F(1, 2)]
Q = [F(1, 8), F(1, 8), F(1, 8), F(1, 8), F(1, 4), F(1, 4)]


class FixedDraws:
    """Stands in for numpy's Generator where only `random()` is used: hands out the given
    uniform numbers in order and fails if asked for more."""

    def __init__(self, us: Iterable[float]) -> None:
        self.us = list(us)

    def random(self) -> float:
        assert self.us, "drew more uniform numbers than the test planned"
        return self.us.pop(0)


def dense(probs: Sequence[F], scale: int = 16) -> Dist:
    """Unnormalised float32 weights (probs * scale) and their sum, as the host path has them."""
    w = np.array([float(p * scale) for p in probs], dtype=np.float32)
    return Dist(w=w, total=float(w.sum(dtype=np.float64)), n_vocab=len(probs))


def sparse(probs: Sequence[F]) -> Dist:
    """The tokens with mass, as a truncation (top-k, top-p) keeps them; ids out of order."""
    ids = [i for i, p in enumerate(probs) if p > 0][::-1]
    return Dist(
        ids=np.array(ids, dtype=np.int64),
        probs=np.array([float(probs[i]) for i in ids], dtype=np.float64),
    )


KINDS = {"dense": dense, "sparse": sparse}
PAIRS = [(a, b) for a in KINDS for b in KINDS]
SPARSE_P_ORDER = [5, 3, 2, 1, 0]  # `sparse(P)`'s ids


def draw_order(pk: str, q: Sequence[F] | str | None, x: int) -> list[int]:
    """The order the residual's CDF walks the tokens in: q a list of probabilities given as
    a sparse Dist (its ids, as `sparse` orders them, come first for a dense p), "dense" for a
    dense q (token order), None for a point mass on x (x first)."""
    if pk == "sparse":
        return SPARSE_P_ORDER
    if q == "dense":
        return list(range(6))
    first = [x] if q is None else [i for i, v in enumerate(q) if v > 0][::-1]
    return first + [t for t in range(6) if t not in first]


def accepts(p: Dist, q: Dist | None, x: int, u: float) -> bool:
    draws = FixedDraws([u])
    return accept_draft_token(p, q, x, draws)  # type: ignore[arg-type]


def acceptance_threshold(p: Sequence[F], q: Sequence[F] | None, x: int) -> F:
    qx = F(1) if q is None else q[x]
    return min(F(1), p[x] / qx)


def residual(p: Sequence[F], q: Sequence[F] | None, x: int) -> list[F]:
    """normalise(max(0, p - q)); q None: the point mass on x."""
    qq = [F(int(i == x)) for i in range(len(p))] if q is None else q
    r = [max(F(0), a - b) for a, b in zip(p, qq, strict=True)]
    total = sum(r, F(0))
    return [v / total for v in r]


def draw_residual(p: Dist, q: Dist | None, x: int, u: float) -> int:
    return residual_sample(p, q, x, FixedDraws([u]))  # type: ignore[arg-type]


def assert_residual(p: Dist, q: Dist | None, x: int, want: Sequence[F], order: Sequence[int]):
    """Inverse-CDF probes: the middle of each token's interval gives that token, a hair
    either side of each inner boundary gives the tokens on either side; a zero-mass token is
    never drawn."""
    edges = [F(0)]
    for t in order:
        edges.append(edges[-1] + want[t])
    assert edges[-1] == 1
    for t, lo, hi in zip(order, edges, edges[1:], strict=False):
        if want[t] == 0:
            continue
        assert draw_residual(p, q, x, float((lo + hi) / 2)) == t, (t, lo, hi)
        if lo > 0:
            assert draw_residual(p, q, x, float(lo) + EPS) == t
        if hi < 1:
            assert draw_residual(p, q, x, float(hi) - EPS) == t
    for u in (0.0, 0.3, 0.6, 1.0 - EPS):
        assert want[draw_residual(p, q, x, u)] > 0, u


@pytest.mark.parametrize(("pk", "qk"), PAIRS)
def test_acceptance_probability_is_min_1_p_over_q(pk: str, qk: str) -> None:
    p, q = KINDS[pk](P), KINDS[qk](Q)
    # x = 0: p/q = 2 (always accepted); 1: 1; 2 and 3: 1/2; 4: p = 0 (never); 5: 2
    for x in range(6):
        a = acceptance_threshold(P, Q, x)
        assert a == [1, 1, F(1, 2), F(1, 2), 0, 1][x]
        if a > 0:
            assert accepts(p, q, x, float(a) - EPS), (x, a)
        assert accepts(p, q, x, 0.0) == (a > 0)
        if a < 1:
            assert not accepts(p, q, x, float(a) + EPS), (x, a)
        assert accepts(p, q, x, 1.0 - EPS) == (a == 1)


@pytest.mark.parametrize("pk", list(KINDS))
def test_a_draft_token_q_gives_no_mass(pk: str) -> None:
    """q(x) = 0 (a drafter proposing what its own distribution excludes): p(x) > 0 accepts it
    outright, p(x) = 0 rejects it; no uniform number is drawn either way."""
    q = [F(1, 2), F(1, 2), F(0), F(0), F(0), F(0)]
    for qk in KINDS:
        p_dist, q_dist = KINDS[pk](P), KINDS[qk](q)
        assert accept_draft_token(p_dist, q_dist, 3, FixedDraws([]))  # type: ignore[arg-type]
        assert not accept_draft_token(p_dist, q_dist, 4, FixedDraws([]))  # type: ignore[arg-type]


@pytest.mark.parametrize("pk", list(KINDS))
def test_point_mass_draft_is_accepted_with_probability_p_of_x(pk: str) -> None:
    p = KINDS[pk](P)
    for x, px in ((0, F(1, 4)), (2, F(1, 16)), (5, F(1, 2))):
        assert accepts(p, None, x, float(px) - EPS)
        assert not accepts(p, None, x, float(px) + EPS)
    assert not accepts(p, None, 4, 0.0)  # p(x) = 0


@pytest.mark.parametrize("qk", [*KINDS, None])
def test_a_lower_bound_on_p_decides_as_p_itself(qk: str | None) -> None:
    """`accept_bounded` (the target's p(x) known to be at least `low`, worked out only on
    demand) accepts exactly when `accept_draft_token` does, from the same one uniform number,
    and asks for the exact p(x) only where u is at or above low / q(x): a bound that decided
    alone above that line would accept too often, one that asked always would save nothing."""
    q = None if qk is None else KINDS[qk](Q)
    p = dense(P)
    for x in (0, 1, 2, 5):
        px = p.prob(x)
        qx = 1.0 if q is None else q.prob(x)
        for low in (0.0, px / 4, px / 2, px):
            for u in (0.0, low / qx - EPS, low / qx, (low + px) / 2 / qx, px / qx - EPS, 0.99):
                if not 0.0 <= u < 1.0:
                    continue
                asked: list[int] = []

                def exact(x: int = x, px: float = px, asked: list[int] = asked) -> float:
                    asked.append(x)
                    return px

                draws = FixedDraws([u])
                got = accept_bounded(low, exact, q, x, draws)  # type: ignore[arg-type]
                assert got == accepts(p, q, x, u), (x, low, u)
                assert not draws.us  # one uniform number, as the exact test draws
                assert bool(asked) == (u >= min(1.0, low / qx)), (x, low, u)
    # q(x) = 0: p(x) > 0 accepts with no uniform number drawn, the bound deciding first
    q0 = sparse([F(1, 2), F(1, 2), F(0), F(0), F(0), F(0)])
    never = FixedDraws([])  # fails if a uniform number is drawn

    def unasked() -> float:
        raise AssertionError("a positive bound decides alone")

    assert accept_bounded(0.1, unasked, q0, 3, never)  # type: ignore[arg-type]
    assert accept_bounded(0.0, lambda: 0.2, q0, 3, never)  # type: ignore[arg-type]
    assert not accept_bounded(0.0, lambda: 0.0, q0, 4, never)  # type: ignore[arg-type]


@pytest.mark.parametrize(("pk", "qk"), PAIRS)
def test_residual_is_normalised_max_of_p_minus_q(pk: str, qk: str) -> None:
    want = residual(P, Q, 2)
    assert want == [F(1, 3), 0, 0, 0, 0, F(2, 3)]
    order = draw_order(pk, Q if qk == "sparse" else "dense", 2)
    assert_residual(KINDS[pk](P), KINDS[qk](Q), 2, want, order)


@pytest.mark.parametrize("pk", list(KINDS))
def test_residual_after_a_rejected_point_mass_draft(pk: str) -> None:
    want = residual(P, None, 5)  # p without token 5: (1/4, 1/8, 1/16, 1/16, 0) / (1/2)
    assert want == [F(1, 2), F(1, 4), F(1, 8), F(1, 8), 0, 0]
    assert_residual(KINDS[pk](P), None, 5, want, draw_order(pk, None, 5))


@pytest.mark.parametrize(("pk", "qk"), PAIRS)
def test_residual_when_q_misses_tokens_p_has(pk: str, qk: str) -> None:
    """q with no mass on tokens 1 and 5: the residual keeps all of p there."""
    q = [F(1, 2), F(0), F(1, 4), F(1, 4), F(0), F(0)]
    want = residual(P, q, 2)
    assert want == [0, F(1, 5), 0, 0, 0, F(4, 5)]
    order = draw_order(pk, q if qk == "sparse" else "dense", 2)
    assert_residual(KINDS[pk](P), KINDS[qk](q), 2, want, order)


def test_residual_of_equal_distributions_is_a_draw_from_either() -> None:
    """p == q leaves no residual mass (a rejection cannot happen then, but rounding may ask):
    the draw then follows p itself rather than failing."""
    for pk in KINDS:
        p = KINDS[pk](P)
        q = KINDS[pk](P)
        got = {draw_residual(p, q, 0, u) for u in (0.1, 0.3, 0.45, 0.9)}
        assert got <= {0, 1, 2, 3, 5} and 5 in got


def test_a_dense_draw_over_many_blocks_follows_the_patched_cdf() -> None:
    """A vocabulary of three blocks and a short last one, mass in every block and a patch (a
    repeat penalty's new weights) on ids in two of them: probing the middle of each token's
    interval of the patched distribution's CDF (the patch's ids first, in its order, then the
    others in token order) draws that token."""
    from specchat.core.decoding.choosing.dist import BLOCK, sample

    n = 3 * BLOCK + 37
    w = np.zeros(n, dtype=np.float32)
    mass = {5: 1.0, BLOCK + 7: 2.0, BLOCK + 900: 0.5, 2 * BLOCK + 1: 3.0, 3 * BLOCK + 30: 1.5}
    for t, x in mass.items():
        w[t] = x
    fix_ids = np.array([BLOCK + 7, 3 * BLOCK + 30], dtype=np.int64)
    fix_w = np.array([0.25, 4.0])
    patched = {**mass, **{int(t): float(x) for t, x in zip(fix_ids, fix_w, strict=True)}}
    total = sum(patched.values())
    d = Dist(w=w, total=total, n_vocab=n, fix_ids=fix_ids, fix_w=fix_w)
    lo = 0.0
    order = [int(t) for t in fix_ids] + sorted(set(patched) - {int(t) for t in fix_ids})
    for t in order:
        hi = lo + patched[t] / total
        assert sample(d, FixedDraws([(lo + hi) / 2])) == t  # type: ignore[arg-type]
        lo = hi


class Unreadable(np.ndarray):
    """A row that fails when any of its values is read."""

    def __getitem__(self, key: object) -> object:
        raise AssertionError("the row was read")

    def __array_ufunc__(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("the row was read")


def test_a_draw_that_lands_in_the_patch_never_reads_the_row() -> None:
    """A row penalised where most of its mass is (a repeat penalty on the likely tokens, a
    rejected draft's residual): a draw inside the patch's weights costs no pass over the
    vocabulary; one past them reads the row."""
    from specchat.core.decoding.choosing.dist import PatchedRow, sample

    n = 5000
    w = np.zeros(n, dtype=np.float32)
    w[[10, 20, 4000]] = [0.5, 0.3, 0.2]
    row = w.view(Unreadable)
    d = PatchedRow(row, 1.0 - 0.5 - 0.3 + 0.25 + 0.15, n, [10, 20], [0.25, 0.15])
    assert sample(d, FixedDraws([0.2 / 0.6])) == 10  # type: ignore[arg-type]
    assert sample(d, FixedDraws([0.3 / 0.6])) == 20  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="the row was read"):
        sample(d, FixedDraws([0.9]))  # type: ignore[arg-type]
    plain = PatchedRow(w, 0.6, n, [10, 20], [0.25, 0.15])
    assert sample(plain, FixedDraws([0.9])) == 4000  # type: ignore[arg-type]
