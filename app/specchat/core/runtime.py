"""One loaded GGUF model with its own llama.cpp context and KV cache.

A thin layer over llama-cpp-python's low-level API. It keeps a record of which tokens sit in the
KV cache so callers can reuse a shared prefix and roll back rejected draft tokens, and it asks
llama.cpp for logits of chosen rows only: no n_ctx x n_vocab buffer is ever allocated.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .gguf import GGUFInfo, read_gguf_info

log = logging.getLogger(__name__)

_backend_lock = threading.Lock()
_backend_ready = False


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


def gpu_offload_supported() -> bool:
    _init_backend()
    return bool(_llama().llama_supports_gpu_offload())


class ModelLoadError(RuntimeError):
    """A model file passed validation but llama.cpp could not load it (or its context)."""


class ContextFullError(RuntimeError):
    pass


class PrefillCancelled(Exception):
    """A cancel request interrupted a long prompt prefill (the cache keeps what was decoded)."""


@dataclass(frozen=True)
class RuntimeConfig:
    n_ctx: int = 4096
    n_gpu_layers: int = 0  # -1 = all
    n_threads: int = 0  # 0 = number of physical cores
    n_batch: int = 512

    def validate(self) -> RuntimeConfig:
        if not 256 <= self.n_ctx <= 1_048_576:
            raise ValueError("context size must be between 256 and 1,048,576 tokens")
        if not -1 <= self.n_gpu_layers <= 10_000:
            raise ValueError("GPU layers must be -1 (all), 0 (CPU only) or a layer count")
        if not 0 <= self.n_threads <= 1024:
            raise ValueError("threads must be 0 (automatic) or a positive count")
        if not 8 <= self.n_batch <= 8192:
            raise ValueError("batch size must be between 8 and 8192")
        return self

    def threads(self) -> int:
        if self.n_threads > 0:
            return self.n_threads
        try:
            import psutil

            n = psutil.cpu_count(logical=False)
        except Exception:  # pragma: no cover - psutil is a dependency
            n = None
        return max(1, n or os.cpu_count() or 1)


class ModelRuntime:
    """A model, its context, and the list of tokens currently in its KV cache (sequence 0)."""

    def __init__(self, path: str | os.PathLike[str], config: RuntimeConfig | None = None) -> None:
        self.path = Path(path)
        self.config = (config or RuntimeConfig()).validate()
        self.info: GGUFInfo = read_gguf_info(self.path)  # raises GGUFError before llama.cpp runs
        _init_backend()
        from llama_cpp import _internals

        llama_cpp = _llama()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = (
            0x7FFFFFFF if self.config.n_gpu_layers < 0 else self.config.n_gpu_layers
        )
        try:
            self._model = _internals.LlamaModel(
                path_model=str(self.path), params=mparams, verbose=False
            )
        except ValueError as exc:
            raise ModelLoadError(f"llama.cpp could not load {self.path.name}: {exc}") from exc
        n_train = self.info.context_length or self.config.n_ctx
        self.n_ctx = min(self.config.n_ctx, n_train) if n_train else self.config.n_ctx
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = self.config.n_batch
        cparams.n_ubatch = self.config.n_batch
        cparams.n_seq_max = 1
        threads = self.config.threads()
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        try:
            self._ctx = _internals.LlamaContext(model=self._model, params=cparams, verbose=False)
        except ValueError as exc:
            self._model.close()
            raise ModelLoadError(
                f"llama.cpp could not create a {self.n_ctx}-token context for {self.path.name} "
                "(not enough memory?)"
            ) from exc
        self._batch = _internals.LlamaBatch(
            n_tokens=self.config.n_batch, embd=0, n_seq_max=1, verbose=False
        )
        self._vocab = self._model.vocab
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.cache: list[int] = []  # tokens whose K/V are in the cache, positions 0..len-1
        self._saved: tuple[int, npt.NDArray[np.float32]] | None = None
        self._piece_buf = ctypes.create_string_buffer(256)
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for t in range(self.n_vocab):
            if llama_cpp.llama_vocab_is_eog(self._vocab, t):
                self._eog[t] = True
        self.size_bytes = self.path.stat().st_size
        self.n_threads = threads

    # -- vocabulary -------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        llama_cpp = _llama()
        raw = text.encode("utf-8")
        cap = len(raw) + 16
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(
            self._vocab, raw, len(raw), buf, cap, add_special, parse_special
        )
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(
                self._vocab, raw, len(raw), buf, cap, add_special, parse_special
            )
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        llama_cpp = _llama()
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buf, 256, 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, big, -n, 0, False)
            return big.raw[:n]
        return self._piece_buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token])

    def token_text(self, token: int) -> str:
        out = _llama().llama_vocab_get_text(self._vocab, token)
        return out.decode("utf-8", "replace") if out else ""

    @property
    def add_bos(self) -> bool:
        return bool(_llama().llama_vocab_get_add_bos(self._vocab))

    def special_text(self, token: int) -> str:
        return self.token_text(token) if 0 <= token < self.n_vocab else ""

    @property
    def bos_id(self) -> int:
        return int(_llama().llama_vocab_bos(self._vocab))

    @property
    def eos_id(self) -> int:
        return int(_llama().llama_vocab_eos(self._vocab))

    # -- KV cache ---------------------------------------------------------------------------
    def save_row(self, n: int, row: npt.NDArray[np.float32]) -> None:
        """Remember the logits that follow the first n cached tokens (the end of a prompt), so a
        regenerate of the same prompt needs no decode at all."""
        self._saved = (n, row)

    def saved_row(self, n: int) -> npt.NDArray[np.float32] | None:
        if self._saved is not None and self._saved[0] == n and len(self.cache) >= n:
            return self._saved[1]
        return None

    def truncate(self, n_keep: int) -> None:
        """Drop cache entries at positions >= n_keep (rollback after a rejected draft)."""
        if self._saved is not None and n_keep < self._saved[0]:
            self._saved = None
        if n_keep >= len(self.cache):
            return
        mem = self._ctx.memory
        if not _llama().llama_memory_seq_rm(mem, 0, n_keep, -1):
            # Some memory types cannot remove a partial range: start over.
            _llama().llama_memory_clear(mem, True)
            self.cache = []
            self._saved = None
            return
        del self.cache[n_keep:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        n = min(len(self.cache), len(tokens))
        i = 0
        while i < n and self.cache[i] == tokens[i]:
            i += 1
        return i

    def reset(self) -> None:
        _llama().llama_memory_clear(self._ctx.memory, True)
        self.cache = []
        self._saved = None

    # -- decoding ---------------------------------------------------------------------------
    def decode(
        self,
        tokens: Sequence[int],
        *,
        logits_for: str = "last",
        cancel: Callable[[], bool] | None = None,
    ) -> npt.NDArray[np.float32]:
        """Append `tokens` to the cache and return logits rows: "last" -> shape (1, n_vocab) for
        the final token, "all" -> shape (len(tokens), n_vocab), "none" -> shape (0, n_vocab)."""
        if not tokens:
            raise ValueError("nothing to decode")
        if len(self.cache) + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"context full: {len(self.cache)} + {len(tokens)} tokens > {self.n_ctx}"
            )
        llama_cpp = _llama()
        nb = self.config.n_batch
        if logits_for == "all" and len(tokens) > nb:
            raise ValueError("cannot return logits for more rows than the batch size")
        out: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(tokens), nb):
            if cancel is not None and start and cancel():
                raise PrefillCancelled
            chunk = tokens[start : start + nb]
            last_chunk = start + nb >= len(tokens)
            b = self._batch.batch
            n0 = len(self.cache)
            for i, t in enumerate(chunk):
                b.token[i] = t
                b.pos[i] = n0 + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = logits_for == "all" or (
                    logits_for == "last" and last_chunk and i == len(chunk) - 1
                )
            b.n_tokens = len(chunk)
            rc = llama_cpp.llama_decode(self._ctx.ctx, b)
            if rc != 0:
                self._resync_after_failure()
                if rc == 1:
                    raise ContextFullError("no room left in the KV cache")
                raise RuntimeError(f"llama_decode failed with code {rc}")
            self.cache.extend(chunk)
            if logits_for == "all" or (logits_for == "last" and last_chunk):
                rows = range(len(chunk)) if logits_for == "all" else [len(chunk) - 1]
                for r in rows:
                    ptr = llama_cpp.llama_get_logits_ith(self._ctx.ctx, r)
                    out.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())
        if not out:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        return np.stack(out)

    def _resync_after_failure(self) -> None:
        mem = self._ctx.memory
        pmax = int(_llama().llama_memory_seq_pos_max(mem, 0))
        del self.cache[pmax + 1 :]
        self.truncate(len(self.cache))

    def close(self) -> None:
        for part in ("_batch", "_ctx", "_model"):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.close()
                setattr(self, part, None)


def model_description(rt: ModelRuntime) -> str:
    info = rt.info
    q = info.quantization or "?"
    return f"{info.model_name or rt.path.stem} ({q}, {rt.size_bytes / 1e9:.2f} GB)"
