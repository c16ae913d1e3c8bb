"""Drafting with a head that reads the target's hidden state: MTP (NextN) layers and Gemma 4
assistants (which file is a target's head: `heads.py`).

Two kinds of head, one drafter (`MTPDrafter`):

- **MTP / NextN** (Qwen3.5/3.6 `qwen35`, GLM, DeepSeek, ...): extra decoder layers after the
  target's own, shipped inside the target GGUF (`<arch>.nextn_predict_layers` > 0; the target
  must be loaded with `llama_model_params.load_mtp`) or as a separate `mtp-*.gguf`. The head
  runs in its own llama.cpp context (`LLAMA_CONTEXT_TYPE_MTP`) with its own KV cache, one entry
  per position p holding the pair (token at p, target's hidden state at p - 1). Its cache must
  follow the conversation: `observe_target` adds the pairs of each target batch, `rollback`
  cuts them back with the target.
- **Gemma 4 assistant** (`gemma4-assistant`, for a `gemma4` target): a small separate model
  that has no KV of its own: its attention reads the target's last sliding and last full
  layer's cache (`llama_context_params.ctx_other` = the target's context). All its draft
  tokens sit at the same position (the one after the target's cache), so it never writes a
  cell; its only state is the hidden state it drafts from.

Both take, for the draft after a target pass, the target's hidden state of the row that
produced the last accepted token: the post-norm state llama.cpp calls "nextn embeddings"
(`llama_set_embeddings_nextn(ctx, true, masked)` on the target's context, read with
`llama_get_embeddings_nextn_ith`). Those two calls live in llama.cpp's staging header
(`src/llama-ext.h`): they are C++ symbols, resolved by their mangled names (`nextn_ext.py`).

A head step decodes one token with a hidden state attached: a `llama_batch` carrying both
`token` and `embd` (llama.cpp reads such a batch as token + state; the `llama_batch_ext` route
needs 4 calls a token, and `llama_batch_ext_set_embd_state` is a stub returning false in this
llama.cpp). Each drafted token is one head step: the head's own output state feeds the next.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from specchat.core.decoding.choosing.dist import Dist, sample
from specchat.core.decoding.choosing.sampling import confidence
from specchat.core.decoding.config import ModelLoadError
from specchat.core.decoding.drafters.base import DrafterKind, DraftSettings, Proposal
from specchat.core.decoding.drafters.heads import ASSISTANT, BUILTIN, HeadInfo
from specchat.core.decoding.drafters.nextn_ext import NextnCalls, target_handles
from specchat.core.decoding.runtime import ModelRuntime, model_params

__all__ = ["MTPDrafter"]

Rows = npt.NDArray[np.float32]


class MTPDrafter:
    """Drafts with an MTP head or a Gemma 4 assistant attached to a loaded target.

    The decoder's part, besides the usual begin / propose / feedback / rollback:
    `observe_target(tokens, start, outputs)` right after every target decode (prompt chunks
    and verifications), before the target decodes again. It reads the hidden state rows of
    that batch (and, for an MTP head, decodes the batch's pairs into the head's cache)."""

    kind = DrafterKind.MTP
    costly = True
    reads_target = True
    runtime = None  # (its llama context is its own, not a ModelRuntime)
    catch_up_s = 0.0  # (its catch-up runs in observe_target, as part of the target's step)
    DRAFT_EMA_KEEP = 0.7

    def __init__(
        self, target: ModelRuntime, head: HeadInfo, *, k_init: int = 3, k_max: int = 8
    ) -> None:
        import llama_cpp

        self._ll = llama_cpp
        self.head = head
        self.name = head.name
        self.target = target
        self.k_max, self.k, self._ema = k_max, k_init, float(k_init)
        self.shared_kv = head.kind == ASSISTANT
        self._ext = NextnCalls(llama_cpp.llama_cpp._lib)
        t_ctx, t_model = target_handles(target)
        self._t_ctx = t_ctx
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(t_model))
        self._model: Any = None  # the head's own llama_model (a separate file, or a copy)
        if head.kind == BUILTIN and getattr(target, "load_mtp", False):
            model = t_model  # the target was loaded with its MTP layers: one model for both
        else:
            # a separate file, or a target loaded without its MTP layers (ModelRuntime skips
            # them): the head loads its own copy with them (mmap: on a CPU the file's pages
            # are shared; on a GPU the copy's trunk takes memory again)
            mparams = model_params(
                llama_cpp,
                target.config.n_gpu_layers,
                llama_cpp.llama_print_system_info().decode(errors="replace"),
            )
            mparams.load_mtp = True
            model = llama_cpp.llama_model_load_from_file(str(head.path).encode(), mparams)
            if not model:
                raise ModelLoadError(f"llama.cpp could not load {head.path.name}")
            self._model = model
        width = int(llama_cpp.llama_model_n_embd_inp(model))
        if width != self.n_embd:
            self.close()
            raise ModelLoadError(
                f"{head.path.name} takes hidden states {width} wide; "
                f"{target.path.name} gives {self.n_embd}"
            )
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)))
        self.n_ctx = target.n_ctx
        self.n_batch = target.config.n_batch
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = self.n_ctx
        cp.n_batch = cp.n_ubatch = self.n_batch
        cp.n_seq_max = 1
        cp.n_rs_seq = 0
        cp.n_threads = cp.n_threads_batch = target.threads
        cp.no_perf = True
        cp.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        cp.ctx_other = t_ctx
        self._threads = target.threads
        ctx = llama_cpp.llama_init_from_model(model, cp)
        if not ctx:
            self.close()
            raise ModelLoadError(
                f"llama.cpp could not create a drafting context for {head.path.name}"
            )
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        # the target: the hidden state of every row (an MTP head pairs each token with the
        # state before it) or of the rows that give logits (an assistant needs those only)
        self._ext.set_nextn(t_ctx, True, self.shared_kv)
        self._ext.set_nextn(ctx, True, True)
        self._setup_batch()
        self.eog = target.eog
        # what the drafter knows of the conversation
        self._book: list[int] = []  # tokens the target's cache held when last observed
        self._head_end = 0  # MTP: the head's cache holds pairs for positions < _head_end
        self._head_start = 0  # ... and >= _head_start (> 0 after a gap)
        self._rows: Rows = np.zeros((0, self.n_embd), np.float32)  # last observed batch
        self._rows_pos = 0  # position of _rows[0]
        self._h: Rows | None = None  # the state to draft from: the target's row at _h_pos
        self._h_pos = -1
        self.llama_s = 0.0  # time inside the head's llama_decode
        self.observe_s = 0.0  # the last observe_target's time (an MTP head's catch-up)
        self.steps = 0  # head decodes so far

    # -- llama.cpp ----------------------------------------------------------------------------
    def _setup_batch(self) -> None:
        ll, nb, ne = self._ll, self.n_batch, self.n_embd
        self._batch = ll.llama_batch_init(nb, ne, 1)
        b = self._batch
        self._tok_buf = (ll.llama_token * nb)()
        b.token = self._tok_buf  # the batch carries tokens and states both
        self._b_tok: Any = self._tok_buf
        self._b_pos: Any = (ctypes.c_int32 * nb).from_address(ctypes.addressof(b.pos.contents))
        self._b_out = ctypes.addressof(b.logits.contents)
        self._b_embd = np.ctypeslib.as_array(b.embd, shape=(nb, ne))
        np.ctypeslib.as_array(b.n_seq_id, shape=(nb,))[:] = 1
        for i in range(nb):
            b.seq_id[i][0] = 0

    def _run(self, tokens: Sequence[int], positions: Sequence[int], h: Rows, out: bool) -> None:
        """One head decode: tokens at positions with states h (n x n_embd); the last row gives
        logits and a state when `out`."""
        n = len(tokens)
        self._b_tok[:n] = tokens
        self._b_pos[:n] = positions
        self._b_embd[:n] = h
        ctypes.memset(self._b_out, 0, n)
        if out:
            ctypes.memset(self._b_out + n - 1, 1, 1)
        self._batch.n_tokens = n
        if self.target.threads != self._threads:
            self._threads = self.target.threads
            self._ll.llama_set_n_threads(self._ctx, self._threads, self._threads)
        t0 = time.perf_counter()
        rc = self._ll.llama_decode(self._ctx, self._batch)
        if rc == 0:
            self._ll.llama_synchronize(self._ctx)
        self.llama_s += time.perf_counter() - t0
        self.steps += 1
        if rc != 0:
            raise RuntimeError(f"the {self.name} head's llama_decode failed with code {rc}")

    def _head_out(self) -> tuple[Rows, Rows]:
        """The last head decode's logits row and output state (views, valid until the next)."""
        ll = self._ll
        z_addr = ctypes.cast(ll.llama_get_logits_ith(self._ctx, -1), ctypes.c_void_p).value
        h_addr = self._ext.nextn_ith(self._ctx, -1)
        if not z_addr or not h_addr:
            raise RuntimeError(f"the {self.name} head gave no output")
        z = np.ctypeslib.as_array((ctypes.c_float * self.n_vocab).from_address(z_addr))
        h = np.ctypeslib.as_array((ctypes.c_float * self.n_embd).from_address(h_addr))
        return z, h

    def _target_rows(self, rows: Sequence[int]) -> Rows:
        """Copies of the target's hidden state rows for these batch indices."""
        out = np.empty((len(rows), self.n_embd), np.float32)
        ne = self.n_embd
        for j, i in enumerate(rows):
            addr = self._ext.nextn_ith(self._t_ctx, i)
            if not addr:
                raise RuntimeError(f"the target gave no hidden state for row {i}")
            out[j] = np.ctypeslib.as_array((ctypes.c_float * ne).from_address(addr))
        return out

    def _cut_head(self, n: int) -> None:
        """MTP: drop the head's pairs at positions >= n."""
        if self.shared_kv or self._head_end <= n:
            return
        if n <= self._head_start:
            self._ll.llama_memory_clear(self._mem, True)
            self._head_start = self._head_end = 0
            return
        if not self._ll.llama_memory_seq_rm(self._mem, 0, n, -1):
            self._ll.llama_memory_clear(self._mem, True)
            self._head_start = self._head_end = 0
            return
        self._head_end = n

    # -- the decoder's calls ------------------------------------------------------------------
    def reset(self, k_init: int, k_max: int) -> None:
        self.k_max, self.k, self._ema = k_max, k_init, float(k_init)

    def lag(self, context_len: int) -> int:
        return 0

    def begin(self, prompt: Sequence[int]) -> None:
        """A new reply after `prompt`: keep what the head's state shares with it."""
        n = 0
        book = self._book
        for a, b in zip(book, prompt, strict=False):
            if a != b:
                break
            n += 1
        self.rollback(n)

    def observe_target(self, tokens: Sequence[int], start: int, outputs: str = "all") -> None:
        """The target just decoded `tokens` at positions start.. in one llama_decode call,
        `outputs` giving logits ("all", "last" or "none": as ModelRuntime.decode's
        logits_for). Call it before anything else decodes on the target.

        An assistant copies the hidden state of the rows that gave logits. An MTP head copies
        every row's and decodes the batch's pairs (token at p, state at p - 1) into its own
        cache: that is its catch-up, one head pass over the batch's tokens."""
        n = len(tokens)
        if n == 0:
            return
        t0 = time.perf_counter()
        nb = self.target.config.n_batch
        if n > nb:  # ModelRuntime.decode ran it in chunks: only the last one's rows are left
            last = n % nb or nb
            self._book_extend(tokens[: n - last], start)
            tokens, start, n = tokens[n - last :], start + n - last, last
            self._h, self._h_pos = None, -1  # (an MTP head restarts at the last chunk)
        self._book_extend(tokens, start)
        if self.shared_kv:
            if outputs == "none":
                self._h, self._h_pos = None, -1
            else:
                idx = list(range(n)) if outputs == "all" else [n - 1]
                self._rows = self._target_rows(idx)
                self._rows_pos = start + idx[0]
                self._h, self._h_pos = self._rows[-1], start + n - 1
        else:
            self._observe_mtp(tokens, start)
        self.observe_s = time.perf_counter() - t0

    def _book_extend(self, tokens: Sequence[int], start: int) -> None:
        del self._book[start:]
        if len(self._book) < start:  # positions the drafter never saw: its state has a gap
            self._book.extend([-1] * (start - len(self._book)))
        self._book.extend(tokens)

    def _observe_mtp(self, tokens: Sequence[int], start: int) -> None:
        n = len(tokens)
        rows = self._target_rows(range(n))
        self._cut_head(start)
        first = 0
        if self._head_end < start or self._h_pos != start - 1 or self._h is None:
            # no state for the pair at `start` (or a gap before it): the head starts over here
            self._ll.llama_memory_clear(self._mem, True)
            first, self._head_start = 1, start + 1
            self._head_end = start + 1
        h_in = np.empty((n, self.n_embd), np.float32)
        if first == 0:
            h_in[0] = self._h
        h_in[1:] = rows[:-1]
        for c0 in range(first, n, self.n_batch):
            c1 = min(n, c0 + self.n_batch)
            self._run(tokens[c0:c1], range(start + c0, start + c1), h_in[c0:c1], out=False)
            self._head_end = start + c1
        self._rows, self._rows_pos = rows, start
        self._h, self._h_pos = rows[-1], start + n - 1

    def rollback(self, kept: int) -> None:
        """The conversation now agrees with the target's cache for its first `kept` tokens:
        the state to draft from becomes the target's row at kept - 1, and an MTP head's
        pairs past it go."""
        del self._book[kept:]
        self._cut_head(kept)
        pos = kept - 1
        if self._h_pos == pos and self._h is not None:
            return
        j = pos - self._rows_pos
        if 0 <= j < len(self._rows):
            self._h, self._h_pos = self._rows[j], pos
        else:  # that row was never observed: no draft until the target's next pass
            self._h, self._h_pos = None, -1

    def propose(self, context: Sequence[int], limit: int, settings: DraftSettings) -> Proposal:
        """Up to `limit` tokens after `context`, whose last token the target has not decoded
        yet (it is the one the target's last pass chose): one head step a token, each fed the
        state the step before it gave. Empty when the drafter holds no state for the row
        before that token (the target has not decoded since a rollback past it)."""
        pos0 = len(context) - 1
        k = min(limit, self.k_max, self.n_ctx - len(context))
        if k <= 0 or pos0 < 0 or self._h is None or self._h_pos != pos0 - 1:
            return Proposal(source=self.name)
        warp, rng, p_min = settings.warp, settings.rng, settings.p_min
        sampled = warp is not None and not warp.greedy
        if sampled and rng is None:
            raise ValueError("a sampled draft needs the reply's uniform numbers (rng)")
        penalised = warp is not None and warp.penalises
        hist = list(context[-settings.history_tail :]) if penalised else []
        if not self.shared_kv:
            self._cut_head(pos0)
            if self._head_end < pos0:  # a gap: draft from the state alone
                self._ll.llama_memory_clear(self._mem, True)
                self._head_start = self._head_end = pos0
        tokens: list[int] = []
        qs: list[Dist] = []
        h = self._h.reshape(1, -1)
        t_in = context[-1]
        for i in range(k):
            pos = pos0 if self.shared_kv else pos0 + i
            self._run([t_in], [pos], h, out=True)
            if not self.shared_kv:
                self._head_end = pos + 1
            z, h_out = self._head_out()
            if sampled and warp is not None and rng is not None:
                q = warp.dist(z, hist, slot=i)
                if q.top_prob() < p_min:
                    break
                t = sample(q, rng)
                qs.append(q)
            else:
                zz = z if warp is None else warp.logits(z, hist)
                t = int(zz.argmax())
                if p_min > 0.0 and confidence(zz, t) < p_min:
                    break
            tokens.append(t)
            if penalised:
                hist.append(t)
            if t in self.eog:
                break
            h = h_out.reshape(1, -1).copy()
            t_in = t
        return Proposal(tokens, qs if sampled else None, self.name)

    def feedback(self, proposal: Proposal, sent: int, accepted: int) -> None:
        """Adapt the draft length to the observed acceptance: aim one past the mean run."""
        if sent == 0:
            return
        keep = self.DRAFT_EMA_KEEP
        self._ema = keep * self._ema + (1.0 - keep) * accepted
        self.k = max(1, min(self.k_max, math.ceil(self._ema) + 1))

    def close(self) -> None:
        ll = self._ll
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch.token = ctypes.POINTER(ll.llama_token)()  # ours, not llama.cpp's to free
            ll.llama_batch_free(batch)
            self._batch = None
        ctx = getattr(self, "_ctx", None)
        if ctx:
            ll.llama_free(ctx)
            self._ctx = None
            t_ctx = getattr(self, "_t_ctx", None)
            if t_ctx and getattr(self.target, "_ctx", None) is not None:
                self._ext.set_nextn(t_ctx, False, False)
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None
