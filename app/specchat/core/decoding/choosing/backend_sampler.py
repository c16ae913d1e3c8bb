"""Choosing tokens inside llama.cpp's graph (its backend sampling API) instead of on the host.

Reading a whole logits row (152k floats for Qwen) into Python costs more than everything else the
engine does per token, and on a GPU the row must first cross to the host. With a sampler chain
attached to the context, llama.cpp computes what the decoder needs for every output row in the
same graph as the model (the argmax, or the warped probabilities, or the top candidates) and
skips copying the raw logits. The chains are llama.cpp's own samplers, applied in llama.cpp's
order (top-k, top-p, min-p, then temperature), so the distribution is exactly the one llama.cpp
samples from. At T > 0 llama.cpp also draws a token for every row in the graph. Its draws
replay: a chain's random state moves on only when a token is committed to it
(`llama_sampler_accept`), so every decode starts from the same uniform numbers until then. The
decoder uses a row's draw only where it commits it (`commit`), and draws on the host where the
distribution it needs is not the chain's (see `speculative.keep_graph_draw`).

A repeat penalty and top-2 diagnostics are corrected on the host at a few ids from what a chain
computed (`candidates`); the raw-logits host path (`sampling.Warp`) remains for the few settings
that cannot be done so (a penalty below 1; top-p or min-p with a penalty and no top-k) and any
build whose backend refuses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

ROWS_MAX = 65  # most output rows one decode may sample (a draft of up to 64 tokens + 1)
DRAFT_TOP_K = 10  # the draft model's candidates (as llama.cpp's own draft sampler)

GREEDY = "greedy"  # the argmax of every row
TOP_K = "top_k"  # the top-k candidates of every row and their logits
DIST = "dist"  # every row's warped distribution and llama.cpp's draw from it
RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed at every reset


@dataclass(frozen=True)
class SamplerSpec:
    kind: str
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    temperature: float = 1.0
    seed: int = RANDOM_SEED  # the DIST chain's draws (RANDOM_SEED: a new one at every reset)


class _Array:
    """Memory at an address, seen by numpy without a ctypes array type per call (read-only:
    the memory is llama.cpp's)."""

    def __init__(self, addr: int, shape: tuple[int, ...], typestr: str) -> None:
        self.__array_interface__ = {
            "data": (addr, True),
            "shape": shape,
            "typestr": typestr,
            "version": 3,
        }


class BackendSampler:
    """The sampler chain attached to one context (sequence 0), and reads of what it computed."""

    def __init__(self, llama_cpp: Any, ctx: Any) -> None:
        self._l = llama_cpp
        self._ctx = ctx
        lib = llama_cpp.llama_cpp._lib
        ptr = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
        cnt = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int32)
        tok = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
        self._token = tok(("llama_get_sampled_token_ith", lib))
        self._probs = ptr(("llama_get_sampled_probs_ith", lib))
        self._probs_n = cnt(("llama_get_sampled_probs_count_ith", lib))
        self._logits = ptr(("llama_get_sampled_logits_ith", lib))
        self._logits_n = cnt(("llama_get_sampled_logits_count_ith", lib))
        self._cands = ptr(("llama_get_sampled_candidates_ith", lib))
        self._cands_n = cnt(("llama_get_sampled_candidates_count_ith", lib))
        self._chain: Any = None
        self.active: SamplerSpec | None = None
        self._views: dict[tuple[int, int, str], Any] = {}  # see _memo
        self._top_n = 0  # a TOP_K chain's candidates per row (ggml_top_k keeps exactly k)

    def use(self, spec: SamplerSpec | None) -> bool:
        """Attach the chain for `spec` (None: detach). False when llama.cpp cannot run it in
        the graph on this backend; the context is then left without a backend sampler.

        A chain is attached once in its life (llama.cpp initialises its backend state on
        attach and refuses a second time), so a different spec frees the old chain and builds
        a new one; the same spec again just resets it (same seed, same draws)."""
        lib, ctx = self._l, self._ctx
        if spec == self.active and self._chain is not None:
            lib.llama_sampler_reset(self._chain)
            return True
        self._drop()
        if spec is None:
            return True
        chain = _build(lib, spec)
        if not lib.llama_set_sampler(ctx, 0, chain):
            lib.llama_set_sampler(ctx, 0, None)
            lib.llama_sampler_free(chain)
            return False
        self._chain, self.active = chain, spec
        self._top_n = spec.top_k if spec.kind == TOP_K else 0
        return True

    def _drop(self) -> None:
        if self._chain is not None:
            self._l.llama_set_sampler(self._ctx, 0, None)
            self._l.llama_sampler_free(self._chain)
        self._chain, self.active, self._top_n = None, None, 0

    def commit(self, rows: int) -> None:
        """Move the chain's random state past the draws of the first `rows` rows of the last
        decode, so that no later decode draws with the same uniform numbers again."""
        for _ in range(rows):
            self._l.llama_sampler_accept(self._chain, 0)

    # -- what the chain computed for output row i -------------------------------------------
    def token(self, i: int) -> int:
        return int(self._token(self._ctx, i))

    def probs(self, i: int) -> tuple[npt.NDArray[np.int32] | None, npt.NDArray[np.float32]]:
        """(candidate ids or None for the whole vocabulary, their probabilities)."""
        n = int(self._probs_n(self._ctx, i))
        addr = self._probs(self._ctx, i)
        if not n or not addr:  # the chain computed no distribution for this row
            raise RuntimeError(f"llama.cpp's sampler gave no probabilities for row {i}")
        return self._candidates(i), self._view(addr, n, "<f4")

    def logits(self, i: int) -> npt.NDArray[np.float32]:
        """Row i's logits as the chain left them (a DIST chain without truncation: every
        token's logit over the temperature), read-only."""
        n = int(self._logits_n(self._ctx, i))
        addr = self._logits(self._ctx, i)
        if not n or not addr:
            raise RuntimeError(f"llama.cpp's sampler gave no logits for row {i}")
        return self._view(addr, n, "<f4")

    def top(self, i: int) -> tuple[list[int], list[float]]:
        """Row i's candidates and their logits as Python lists (a TOP_K chain: a few values,
        cheaper as lists than as numpy arrays)."""
        n = self._top_n  # a TOP_K chain's rows hold exactly its k candidates
        addr = self._logits(self._ctx, i)
        if not n or not addr:
            raise RuntimeError(f"llama.cpp's sampler gave no candidates for row {i}")
        logits = _floats(n).from_address(addr)[:]
        ids = _ints(n).from_address(self._cands(self._ctx, i))[:]
        return ids, logits

    def at(
        self, i: int, ids: list[int]
    ) -> tuple[npt.NDArray[np.float32], list[float], list[float]]:
        """Row i's probabilities (a view of the whole vocabulary's, a DIST chain that kept
        it), and its z / T and probability at a few token ids as Python floats: read one by
        one, cheaper right after a decode than numpy's indexing and arithmetic on a few dozen
        values."""
        ctx = self._ctx
        n, addr = int(self._probs_n(ctx, i)), self._probs(ctx, i)
        ps = self._cfloats(addr, n, i)
        zs = self._cfloats(self._logits(ctx, i), int(self._logits_n(ctx, i)), i)
        return self._view(addr, n, "<f4"), [zs[t] for t in ids], [ps[t] for t in ids]

    def _cfloats(self, addr: int, n: int, i: int) -> Any:
        """n floats at `addr` as a ctypes array (read one by one as Python floats)."""
        if not n or not addr:
            raise RuntimeError(f"llama.cpp's sampler gave no distribution for row {i}")
        return self._memo((addr, n, "f"), _float_array, addr, n)

    def prob_at(self, i: int, token: int) -> float:
        """Row i's probability of one token (a DIST chain that kept the whole vocabulary)."""
        n = int(self._probs_n(self._ctx, i))
        addr = self._probs(self._ctx, i)
        if not addr or not 0 <= token < n:
            return 0.0
        return float(ctypes.c_float.from_address(addr + 4 * token).value)

    def logit_at(self, i: int, token: int) -> float:
        """Row i's logit of one token as the chain left it (a DIST chain without truncation:
        over the temperature)."""
        n = int(self._logits_n(self._ctx, i))
        addr = self._logits(self._ctx, i)
        if not addr or not 0 <= token < n:
            raise RuntimeError(f"llama.cpp's sampler gave no logit for token {token} of row {i}")
        return float(ctypes.c_float.from_address(addr + 4 * token).value)

    def few(self, i: int) -> tuple[list[int], list[float]] | None:
        """Row i's candidate ids and their probabilities as Python lists (a DIST chain with
        top-k: a few values, cheaper as lists than as numpy arrays right after a decode);
        None when the chain kept the whole vocabulary."""
        n = int(self._cands_n(self._ctx, i))
        cands = self._cands(self._ctx, i)
        addr = self._probs(self._ctx, i)
        if not n or not cands or not addr:
            return None
        return _ints(n).from_address(cands)[:], _floats(n).from_address(addr)[:]

    def _candidates(self, i: int) -> npt.NDArray[np.int32] | None:
        n = int(self._cands_n(self._ctx, i))
        addr = self._cands(self._ctx, i)
        if not n or not addr:
            return None
        return self._view(addr, n, "<i4")

    def _view(self, addr: int, n: int, typestr: str) -> npt.NDArray[Any]:
        """A read-only numpy view of n values at `addr`."""
        view: npt.NDArray[Any] = self._memo((addr, n, typestr), numpy_view, addr, (n,), typestr)
        return view

    def _memo(self, key: tuple[int, int, str], make: Callable[..., Any], *args: Any) -> Any:
        """What reads the memory at an address, made once per address, size and type:
        llama.cpp keeps its sampling buffers between decodes (reallocated rarely), and making
        a view costs more than reading a row's few values right after a decode."""
        got = self._views.get(key)
        if got is None:
            if len(self._views) >= 512:  # buffers moved many times: forget the old ones
                self._views.clear()
            got = self._views[key] = make(*args)
        return got

    def close(self) -> None:
        if self._ctx is not None:
            self._drop()


_FLOATS: dict[int, Any] = {}
_INTS: dict[int, Any] = {}


def _floats(n: int) -> Any:
    t = _FLOATS.get(n)
    if t is None:
        t = _FLOATS[n] = ctypes.c_float * n
    return t


def _ints(n: int) -> Any:
    t = _INTS.get(n)
    if t is None:
        t = _INTS[n] = ctypes.c_int32 * n
    return t


def _float_array(addr: int, n: int) -> Any:
    return _floats(n).from_address(addr)


def numpy_view(addr: int, shape: tuple[int, ...], typestr: str) -> npt.NDArray[Any]:
    """A read-only numpy array over llama.cpp's memory at `addr` (a view: no copy)."""
    return np.asarray(_Array(addr, shape, typestr))


def _build(lib: Any, spec: SamplerSpec) -> Any:
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())

    def add(smpl: Any) -> None:
        lib.llama_sampler_chain_add(chain, smpl)

    if spec.kind == GREEDY:
        add(lib.llama_sampler_init_greedy())
    elif spec.kind == TOP_K:
        add(lib.llama_sampler_init_top_k(spec.top_k))
    else:
        if spec.top_k > 0:
            add(lib.llama_sampler_init_top_k(spec.top_k))
        if spec.top_p < 1.0:
            add(lib.llama_sampler_init_top_p(spec.top_p, 1))
        if spec.min_p > 0.0:
            add(lib.llama_sampler_init_min_p(spec.min_p, 1))
        if spec.temperature != 1.0:
            add(lib.llama_sampler_init_temp(spec.temperature))
        add(lib.llama_sampler_init_dist(spec.seed))
    return chain
