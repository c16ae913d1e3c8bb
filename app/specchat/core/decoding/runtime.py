"""One loaded GGUF model with its own llama.cpp context and KV cache.

A thin layer over llama-cpp-python's low-level API. It keeps a record of which tokens sit in the
KV cache so callers can reuse a shared prefix and roll back rejected draft tokens, and it asks
llama.cpp for logits of chosen rows only: no n_ctx x n_vocab buffer is ever allocated. Logits
come back as one read-only view of llama.cpp's own output buffer (no copies), valid until the
next `decode` on the same model.

Hybrid models (Qwen3.5's delta-net layers, LFM2's short convolutions) keep a recurrent state that
no position-wise erase can cut. Where llama.cpp can keep snapshots of it (`n_rs_seq`, for the
architectures of `core.gguf.recurrent.ROLLBACK_ARCHES`), the context is created with
`rollback_tokens` of them, and `truncate` cuts back up to that many tokens of the last decode:
llama.cpp restores the state as it was after the kept token. A deeper cut clears the cache (the
caller decodes again what it keeps), as for any model llama.cpp cannot cut.

It also keeps a clock, `llama_s`, the time spent inside `llama_decode` (including waiting for a
GPU to finish): everything else a caller does is host overhead; and a count, `host_rows`, of the
logits rows handed to the host (none when llama.cpp's own samplers choose the tokens).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from specchat.core.decoding.choosing.backend_sampler import (
    ROWS_MAX,
    BackendSampler,
    SamplerSpec,
    numpy_view,
)
from specchat.core.decoding.config import (
    ContextFullError,
    ModelLoadError,
    PrefillCancelled,
    RuntimeConfig,
)
from specchat.core.decoding.kv_cache import CacheBook
from specchat.core.decoding.vocab import Vocabulary
from specchat.core.gguf.drafters import special_drafter
from specchat.core.gguf.header import GGUFInfo, read_gguf_info
from specchat.core.gguf.recurrent import HYBRID_ROLLBACK_TOKENS, max_snapshots, state_bytes
from specchat.core.machine.amx import amx_in_build
from specchat.core.machine.llama_log import capture

__all__ = [
    "ContextFullError",
    "Logits",
    "ModelLoadError",
    "ModelRuntime",
    "PrefillCancelled",
    "RuntimeConfig",
]

log = logging.getLogger(__name__)

Logits = npt.NDArray[np.float32]


_backend_lock = threading.Lock()
_backend_ready = False


def model_params(llama_cpp: Any, n_gpu_layers: int, system_info: str) -> Any:
    """llama.cpp's model parameters for a load (-1 GPU layers: all). A build with Intel AMX
    compiled in loads without llama.cpp's extra weight layouts: AMX's crashes the pinned
    llama.cpp at the first decode (core/machine/amx.py); slower, but alive."""
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
    if amx_in_build(system_info):
        mparams.use_extra_bufts = False
        log.warning("this llama.cpp build has Intel AMX: models load without its kernels")
    return mparams


def _llama():  # imported lazily so that `specchat.core` imports without the native library
    import llama_cpp

    return llama_cpp


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if _backend_ready:
            return
        llama_cpp = _llama()
        from llama_cpp import _logger

        _logger.set_verbose(os.environ.get("SPECCHAT_LLAMA_VERBOSE") == "1")
        llama_cpp.llama_backend_init()
        _backend_ready = True


class ModelRuntime(Vocabulary):
    """A model (its vocabulary: vocab.py), its context, and the list of tokens currently in
    its KV cache (sequence 0).

    `rollback_tokens`: how many tokens a cut may take back from a recurrent or hybrid model's
    last decode (llama.cpp's `n_rs_seq`, one state snapshot each): a verification of a k-token
    draft cuts at most k. The default, HYBRID_ROLLBACK_TOKENS, is the longest draft SpecChat sends
    such a model (its snapshots cost memory); 0 for a model that never
    verifies (a draft model, whose cuts span many one-token decodes). Ignored for transformers.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        config: RuntimeConfig | None = None,
        *,
        rollback_tokens: int = HYBRID_ROLLBACK_TOKENS,
    ) -> None:
        if rollback_tokens < 0:
            raise ValueError("rollback_tokens must be 0 or more")
        self.path = Path(path)
        self.config = (config or RuntimeConfig()).validate()
        self.info: GGUFInfo = read_gguf_info(self.path)  # raises GGUFError before llama.cpp runs
        special = special_drafter(self.info)
        if special is not None:  # a drafter-only file: say what it is, not what llama.cpp says
            raise ModelLoadError(special.message)
        _init_backend()
        llama_cpp = _llama()
        with capture() as load_log:  # llama.cpp's own account of where the layers went
            self._model = self._load_model(llama_cpp)
        self.where = load_log.report().where()  # "CPU", "Vulkan0 (llvmpipe): 29/29 layers"
        n_train = self.info.context_length or self.config.n_ctx
        self.n_ctx = min(self.config.n_ctx, n_train) if n_train else self.config.n_ctx
        self.n_threads = self.config.threads()  # as loaded; `threads`: as decoding now
        self.threads = self.n_threads
        raw = self._model.model
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(raw)) or bool(
            llama_cpp.llama_model_is_hybrid(raw)
        )
        # more snapshots than max_snapshots abort the process inside llama.cpp
        want = min(rollback_tokens, max_snapshots(self.info, self.config.n_batch))
        want = want if self.recurrent else 0
        with capture() as ctx_log:  # llama.cpp's account of the recurrent buffers (RS)
            self._ctx = self._new_context(llama_cpp, want)
        self.context_report = ctx_log.report()
        self.sampler = BackendSampler(llama_cpp, self._ctx.ctx)
        self._ctx_ptr = self._ctx.ctx
        self._llama_decode = llama_cpp.llama_decode
        self._llama_sync = llama_cpp.llama_synchronize
        self._setup_batch()
        Vocabulary.__init__(self, llama_cpp, self._model.vocab)
        self.book = CacheBook()  # which tokens the KV cache holds; what it remembers of them
        # A recurrent state cannot be cut back to an earlier position unless llama.cpp keeps
        # snapshots of it (n_rs_seq, after the clamps: 0 for an architecture it cannot roll
        # back). Without them: no rollback, so no speculation (the decoder checks this).
        self.n_rs_seq = int(llama_cpp.llama_n_rs_seq(self._ctx.ctx)) if self.recurrent else 0
        self.can_rollback = not self.recurrent or self.n_rs_seq > 0
        self._rs_room = 0  # tokens the snapshots can take back now: the last decode's, less one
        one_state = state_bytes(self.info) if self.recurrent else 0
        rs_logged = sum(b for (_, kind), b in self.context_report.buffers.items() if kind == "RS")
        # what the rollback snapshots cost (on the device of each recurrent layer): the formula
        # of core.gguf.recurrent where it knows the architecture, else llama.cpp's logged RS
        # buffers (0.01 MiB steps) less the one live state
        self.snapshot_bytes = (
            self.n_rs_seq * one_state
            if one_state is not None
            else rs_logged * self.n_rs_seq // (1 + self.n_rs_seq)
        )
        self.size_bytes = self.path.stat().st_size
        # llama_get_logits returning a plain address, for a cache of numpy views of the buffer
        self._get_logits = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
            ("llama_get_logits", llama_cpp.llama_cpp._lib)
        )
        self._views: dict[tuple[int, int], Logits] = {}
        self._no_rows = np.zeros((0, self.n_vocab), dtype=np.float32)
        self.llama_s = 0.0  # time inside llama_decode (and waiting for it to finish)
        self.host_rows = 0  # logits rows handed to the host

    def _load_model(self, llama_cpp: Any) -> Any:
        from llama_cpp import _internals

        info = llama_cpp.llama_print_system_info().decode(errors="replace")
        mparams = model_params(llama_cpp, self.config.n_gpu_layers, info)
        try:
            return _internals.LlamaModel(path_model=str(self.path), params=mparams, verbose=False)
        except ValueError as exc:
            raise ModelLoadError(f"llama.cpp could not load {self.path.name}: {exc}") from exc

    def _new_context(self, llama_cpp: Any, n_rs_seq: int) -> Any:
        from llama_cpp import _internals

        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = self.config.n_batch
        cparams.n_ubatch = self.config.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        cparams.no_perf = True
        cparams.n_outputs_max_per_seq = ROWS_MAX
        cparams.n_rs_seq = n_rs_seq
        try:
            return _internals.LlamaContext(model=self._model, params=cparams, verbose=False)
        except ValueError as exc:
            self._model.close()
            raise ModelLoadError(
                f"llama.cpp could not create a {self.n_ctx}-token context for {self.path.name} "
                "(not enough memory?)"
            ) from exc

    def _setup_batch(self) -> None:
        from llama_cpp import _internals

        nb = self.config.n_batch
        self._batch = _internals.LlamaBatch(n_tokens=nb, embd=0, n_seq_max=1, verbose=False)
        b = self._batch_struct = self._batch.batch
        # The batch's arrays as ctypes arrays: a decode of n tokens fills them with one slice
        # assignment each (tokens, positions) and one memset (which rows give logits). Right
        # after a decode, when every path the interpreter takes is out of the CPU's caches,
        # that cost 39 us where numpy's slice stores cost 171 (5 tokens, 600 calls each).
        # Every slot belongs to sequence 0, set once here.
        self._b_token: Any = (ctypes.c_int32 * nb).from_address(ctypes.addressof(b.token.contents))
        self._b_pos: Any = (ctypes.c_int32 * nb).from_address(ctypes.addressof(b.pos.contents))
        self._b_logits = ctypes.addressof(b.logits.contents)
        np.ctypeslib.as_array(b.n_seq_id, shape=(nb,))[:] = 1
        for i in range(nb):
            b.seq_id[i][0] = 0
        # the first slot's fields as ctypes scalars: a one-token decode sets them through
        # `.value`, shorter still
        self._one_token = ctypes.c_int32.from_address(ctypes.addressof(b.token.contents))
        self._one_pos = ctypes.c_int32.from_address(ctypes.addressof(b.pos.contents))
        self._one_logits = ctypes.c_int8.from_address(self._b_logits)

    def _fill(self, tokens: Sequence[int], n0: int, rows: str) -> int:
        """Write `tokens` at positions n0.. into the batch, logits for `rows` ("all", "last" or
        "none"); returns the number of tokens."""
        n = len(tokens)
        self._b_token[:n] = tokens
        self._b_pos[:n] = range(n0, n0 + n)
        ctypes.memset(self._b_logits, rows == "all", n)
        if rows == "last":
            ctypes.memset(self._b_logits + n - 1, 1, 1)
        return n

    # -- KV cache (the record is a CacheBook: tests run the same code on a stand-in) --------
    @property
    def cache(self) -> list[int]:
        """The tokens whose K/V are in the cache, positions 0..len-1 (read it, never assign)."""
        return self.book.tokens

    def remember(self, n: int, key: object, value: object) -> None:
        """Keep what the decoder needs to answer the first n cached tokens again (the end of a
        prompt) without decoding: a regenerate of the same prompt then costs no decode at all.
        `key` says how it was computed (the sampler); it is forgotten once the cache is cut
        below n."""
        self.book.remember(n, key, value)

    def recall(self, n: int, key: object) -> object | None:
        return self.book.recall(n, key)

    @property
    def rollback_depth(self) -> int:
        """The most tokens one cut may take back: any for a transformer, `n_rs_seq` for a
        recurrent or hybrid model (0: none). A cut of a recurrent model must also stay inside
        its last decode (all of it but the first token) and follow a decode: a verification
        of a k-token draft (k + 1 tokens) can always be cut by up to k."""
        return self.n_ctx if not self.recurrent else self.n_rs_seq

    def truncate(self, n_keep: int) -> bool:
        """Drop cache entries at positions >= n_keep (rollback after a rejected draft).

        Returns False when llama.cpp could not erase part of the sequence (a recurrent or hybrid
        model cut deeper than its snapshots reach): the cache is then cleared and `cache` is
        empty, so the caller must decode what it wants to keep again."""
        return self.book.truncate(n_keep, self._erase_from, self._clear_memory)

    def _erase_from(self, n_keep: int) -> bool:
        mem = self._ctx.memory
        if self.recurrent:
            # llama.cpp's snapshots hold the states after each of the last decode's last
            # n_rs_seq tokens but its first: it accepts a cut of the whole decode (or of
            # snapshots an earlier decode left) and restores a stale state without a word,
            # so the runtime checks the reach itself. One cut per decode: a second is refused.
            cut = len(self.book.tokens) - n_keep
            if not 0 < cut <= min(self._rs_room, self.n_rs_seq):
                return False
            self._rs_room = 0
        return self.can_rollback and bool(_llama().llama_memory_seq_rm(mem, 0, n_keep, -1))

    def _clear_memory(self) -> None:
        self._rs_room = 0
        _llama().llama_memory_clear(self._ctx.memory, True)

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """Length of the prefix `tokens` shares with the cache (once per request, not per step)."""
        return self.book.common_prefix(tokens)

    def reset(self) -> None:
        self._clear_memory()
        self.book.clear()

    def use_threads(self, n: int) -> None:
        """Decode with `n` CPU threads from now on (the context's, loaded with `n_threads`)."""
        if n != self.threads:
            _llama().llama_set_n_threads(self._ctx_ptr, n, n)
            self.threads = n

    # -- decoding ---------------------------------------------------------------------------
    def decode(
        self,
        tokens: Sequence[int],
        *,
        logits_for: str = "last",
        cancel: Callable[[], bool] | None = None,
    ) -> Logits:
        """Append `tokens` to the cache and return logits rows: "last" -> shape (1, n_vocab) for
        the final token, "all" -> shape (len(tokens), n_vocab), "none" -> shape (0, n_vocab).
        The rows are a read-only view of llama.cpp's buffer: read them before the next decode."""
        n = len(tokens)
        if not n:
            raise ValueError("nothing to decode")
        cache = self.book.tokens
        n0 = len(cache)
        if n0 + n > self.n_ctx:
            raise ContextFullError(f"context full: {n0} + {n} tokens > {self.n_ctx}")
        nb = self.config.n_batch
        if n == 1:  # a plain step or one draft token: the hot path
            self._one_token.value = tokens[0]
            self._one_pos.value = n0
            self._one_logits.value = logits_for != "none"
            self._run_batch(1)
            cache.append(tokens[0])
            return self._logits(int(logits_for != "none"))
        if n <= nb:  # a verification step, and most prompts: one batch
            self._run_batch(self._fill(tokens, n0, logits_for))
            cache.extend(tokens)
            return self._logits(n if logits_for == "all" else int(logits_for == "last"))
        if logits_for == "all":
            raise ValueError("cannot return logits for more rows than the batch size")
        for start in range(0, n, nb):
            if cancel is not None and start and cancel():
                raise PrefillCancelled
            chunk = tokens[start : start + nb]
            last = logits_for == "last" and start + nb >= n
            self._run_batch(self._fill(chunk, len(self.cache), "last" if last else "none"))
            self.cache.extend(chunk)
        return self._logits(1 if logits_for == "last" else 0)

    def _run_batch(self, m: int) -> None:
        self._batch_struct.n_tokens = m
        ctx = self._ctx_ptr
        t0 = time.perf_counter()
        rc = self._llama_decode(ctx, self._batch_struct)
        if rc == 0:
            self._llama_sync(ctx)  # a GPU's work counts as decode time
        self.llama_s += time.perf_counter() - t0
        self._rs_room = m - 1  # the snapshots are this decode's (see _erase_from)
        if rc != 0:
            self._rs_room = 0
            self._resync_after_failure()
            if rc == 1:
                raise ContextFullError("no room left in the KV cache")
            raise RuntimeError(f"llama_decode failed with code {rc}")

    def use_sampler(self, spec: SamplerSpec | None) -> bool:
        """Let llama.cpp choose tokens in its graph (see backend_sampler); None: raw logits.
        Returns whether `spec` is in use (False: raw logits, the backend cannot run it)."""
        return self.sampler.use(spec) and spec is not None

    def _logits(self, rows: int) -> Logits:
        if rows == 0 or self.sampler.active is not None:
            return self._no_rows
        self.host_rows += rows
        addr = self._get_logits(self._ctx_ptr)
        view = self._views.get((addr, rows))
        if view is None:  # llama.cpp reallocates its output buffer rarely: views are reused
            view = numpy_view(addr, (rows, self.n_vocab), "<f4")
            self._views[(addr, rows)] = view
        return view

    def _resync_after_failure(self) -> None:
        mem = self._ctx.memory
        pmax = int(_llama().llama_memory_seq_pos_max(mem, 0))
        del self.cache[pmax + 1 :]
        self.truncate(len(self.cache))

    def close(self) -> None:
        sampler = getattr(self, "sampler", None)
        if sampler is not None and getattr(self, "_ctx", None) is not None:
            sampler.close()
        for part in ("_batch", "_ctx", "_model"):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.close()
                setattr(self, part, None)
