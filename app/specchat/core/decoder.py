"""The decode loop: plain, or draft -> verify -> accept -> roll back.

Invariant at the top of every step: `ctx` holds the prompt and every emitted token; the target's
KV cache holds ctx[:-1] (the newest token is decoded by the next pass, together with any draft).
A verification pass decodes [ctx[-1], d1..dk] and asks for logits of those k+1 rows only; after
accepting m drafted tokens the target cache is cut back to ctx + d1..dm. The draft model rolls its
own cache back lazily on its next call (it keeps the longest prefix it shares with ctx).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from .auto import DRAFT, LOOKUP, CostModel, lookup_bucket
from .drafters import Draft, ModelDrafter, PromptLookupDrafter
from .runtime import ContextFullError, ModelRuntime, PrefillCancelled
from .sampling import Warp, accept_draft_token, residual_sample, sample, top2
from .types import FinishReason, GenerationParams, GenerationStats, Mode, TokenEvent

CancelCheck = Callable[[], bool]


class _TextStream:
    """Bytes of token pieces -> text, holding back incomplete UTF-8 and possible stop prefixes."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in stops if s]
        self._pending = ""
        self._tail = ""  # recently emitted text, to find stops spanning emitted/pending
        self._span = max((len(s) for s in self._stops), default=0)

    def push(self, piece: bytes) -> tuple[str, bool]:
        """Returns (text to emit now, stop string reached)."""
        self._pending += self._dec.decode(piece)
        if not self._stops:
            out, self._pending = self._pending, ""
            return out, False
        window = self._tail + self._pending
        hits = [i for i in (window.find(s) for s in self._stops) if i >= 0]
        if hits:
            cut = min(hits) - len(self._tail)
            out = self._pending[: max(cut, 0)]
            self._pending = ""
            return out, True
        hold = 0
        for s in self._stops:
            for n in range(min(len(s) - 1, len(window)), 0, -1):
                if window.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        hold = min(hold, len(self._pending))
        out = self._pending[: len(self._pending) - hold]
        self._pending = self._pending[len(self._pending) - hold :]
        self._tail = (self._tail + out)[-self._span :]
        return out, False

    def flush(self) -> str:
        out = self._pending + self._dec.decode(b"", final=True)
        self._pending = ""
        return out


class _Finished(Exception):
    def __init__(self, reason: FinishReason) -> None:
        self.reason = reason


class Decoder:
    """One generation. Iterate `run()` for TokenEvents; the last one carries finish_reason."""

    def __init__(
        self,
        target: ModelRuntime,
        prompt: Sequence[int],
        params: GenerationParams,
        mode: Mode,
        *,
        model: ModelDrafter | None,
        lookup: PromptLookupDrafter,
        cost: CostModel,
        cancel: CancelCheck | None = None,
    ) -> None:
        self.t = target
        self.prompt = list(prompt)
        self.p = params
        self.mode = mode
        self.model = model
        self.lookup = lookup
        self.cost = cost
        self.cancel = cancel or (lambda: False)
        self.warp = Warp(params)
        self.rng = np.random.default_rng(params.seed)
        self.stats = GenerationStats(mode=mode.value, prompt_tokens=len(self.prompt))
        self.ctx: list[int] = list(self.prompt)
        self._text = _TextStream(params.stop)
        self._t0 = 0.0
        self._t_first = 0.0
        self._stopped = False

    # -- helpers ----------------------------------------------------------------------------
    def _hist(self, extra: Sequence[int] = ()) -> list[int]:
        if self.warp.penalty == 1.0:
            return []
        return self.ctx[-self.p.repeat_last_n :] + list(extra)

    def _pick(self, logits: npt.NDArray[np.float32], extra: Sequence[int] = ()) -> int:
        if self.warp.greedy:
            return self.warp.argmax(logits, self._hist(extra))
        return sample(self.warp.dist(logits, self._hist(extra)), self.rng)

    def _event(self, token: int, from_draft: bool, logits: npt.NDArray[np.float32]) -> TokenEvent:
        """Append `token` to the reply and build its event (raises _Finished at end of text)."""
        now = time.perf_counter()
        st = self.stats
        if self.t.is_eog(token):
            self.ctx.append(token)
            raise _Finished(FinishReason.STOP)
        self.ctx.append(token)
        st.tokens += 1
        if st.tokens == 1:
            self._t_first = now
            st.ttft_s = now - self._t0
        st.elapsed_s = now - self._t0
        st.decode_s = now - self._t_first
        text, stopped = self._text.push(self.t.piece(token))
        ev = TokenEvent(
            text=text,
            token_ids=(token,),
            from_draft=from_draft,
            stats=st.copy(),
            top2=top2(logits) if self.p.record_top2 else None,
        )
        self._stopped = stopped
        return ev

    def _emit(
        self, token: int, from_draft: bool, logits: npt.NDArray[np.float32]
    ) -> Iterator[TokenEvent]:
        yield self._event(token, from_draft, logits)
        if self._stopped:
            raise _Finished(FinishReason.STOP)

    def _final(self, reason: FinishReason, text: str = "") -> TokenEvent:
        st = self.stats
        now = time.perf_counter()
        st.elapsed_s = now - self._t0
        if st.tokens:
            st.decode_s = now - self._t_first
        return TokenEvent(text, (), False, st.copy(), finish_reason=reason)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> Iterator[TokenEvent]:
        self._t0 = time.perf_counter()
        t = self.t
        if len(self.prompt) >= t.n_ctx:
            self.stats.note = (
                f"the prompt ({len(self.prompt)} tokens) fills the {t.n_ctx}-token context"
            )
            yield self._final(FinishReason.CONTEXT)
            return
        try:
            n = len(self.prompt)
            common = t.common_prefix(self.prompt)
            saved = t.saved_row(n) if common >= n else None
            if saved is not None:
                t.truncate(n)
                logits = saved
            else:
                t.truncate(min(common, n - 1))
                logits = t.decode(
                    self.prompt[len(t.cache) :], logits_for="last", cancel=self.cancel
                )[0]
                t.save_row(n, logits)
            self.stats.prefill_s = time.perf_counter() - self._t0
            # The first token comes straight from the prefill: no draft work delays it.
            first = self._pick(logits)
            yield from self._emit(first, False, logits)
            while True:
                if self.cancel():
                    raise _Finished(FinishReason.CANCELLED)
                if self.stats.tokens >= self.p.max_tokens:
                    raise _Finished(FinishReason.LENGTH)
                room = t.n_ctx - len(t.cache)
                if room < 1:
                    raise _Finished(FinishReason.CONTEXT)
                limit = min(room - 1, self.p.max_tokens - self.stats.tokens, self.p.k_max)
                draft, kind, bucket = self._draft(limit)
                if draft.tokens:
                    yield from self._verify(draft, kind, bucket)
                else:
                    t_start = time.perf_counter()
                    row = t.decode([self.ctx[-1]], logits_for="last")[0]
                    self.cost.observe_target(1, time.perf_counter() - t_start)
                    self.stats.target_steps += 1
                    yield from self._emit(self._pick(row), False, row)
        except _Finished as fin:
            tail = self._text.flush() if fin.reason is not FinishReason.STOP else ""
            yield self._final(fin.reason, tail)
        except PrefillCancelled:
            yield self._final(FinishReason.CANCELLED)
        except ContextFullError as exc:
            self.stats.note = str(exc)
            yield self._final(FinishReason.CONTEXT, self._text.flush())
        finally:
            # Keep the caches consistent with what was actually decoded, whatever happened.
            t.truncate(max(len(self.prompt), len(self.ctx) - 1))

    def _draft(self, limit: int) -> tuple[Draft, str, str]:
        """The draft for this step (possibly empty), which drafter made it, and its bucket."""
        none = Draft([], None)
        if limit < 1 or self.mode is Mode.OFF:
            return none, "", ""
        if self.mode is Mode.DRAFT:
            return self._model_draft(limit), DRAFT, ""
        start, match = self.lookup.find(self.ctx)
        avail = self.lookup.available(start)
        bucket = lookup_bucket(match)
        if self.mode is Mode.LOOKUP:
            if start < 0:
                return none, "", ""
            k, _ = self.cost.best_k(LOOKUP, bucket, min(limit, avail))
            return Draft(self.lookup.take(start, max(k, 1)), None, match), LOOKUP, bucket
        plan = self.cost.plan(
            lookup_match=match if start >= 0 else 0,
            lookup_avail=avail,
            draft_ok=self.model is not None,
            max_k=limit,
            draft_lag=0 if self.model is None else len(self.ctx) - len(self.model.rt.cache),
        )
        self.stats.note = plan.reason
        self.stats.k_current = plan.k
        if plan.drafter == LOOKUP:
            return Draft(self.lookup.take(start, plan.k), None, match), LOOKUP, bucket
        if plan.drafter == DRAFT:
            return self._model_draft(plan.k), DRAFT, ""
        return none, "", ""

    def _model_draft(self, limit: int) -> Draft:
        d = self.model
        if d is None:
            return Draft([], None)
        k = min(limit, d.k) if self.mode is Mode.DRAFT else limit
        self.stats.k_current = k
        t_start = time.perf_counter()
        draft = d.propose(
            self.ctx,
            k,
            warp=self.warp,
            rng=self.rng,
            p_min=self.p.p_min,
            history_tail=self.p.repeat_last_n,
        )
        self.cost.observe_draft(max(len(draft.tokens), 1), time.perf_counter() - t_start)
        return draft

    def _verify(self, draft: Draft, kind: str, bucket: str) -> Iterator[TokenEvent]:
        t, st, warp = self.t, self.stats, self.warp
        k = len(draft.tokens)
        base = len(self.ctx)  # position of the first drafted token
        t_start = time.perf_counter()
        rows = t.decode([self.ctx[-1], *draft.tokens], logits_for="all")
        self.cost.observe_target(k + 1, time.perf_counter() - t_start)
        st.target_steps += 1
        st.verify_steps += 1
        st.drafted += k
        while len(st.draft_pos_proposed) < k:
            st.draft_pos_proposed.append(0)
            st.draft_pos_accepted.append(0)
        for i in range(k):
            st.draft_pos_proposed[i] += 1
        accepted = 0
        nxt: int | None = None
        for i, d in enumerate(draft.tokens):
            extra = draft.tokens[:i]
            if warp.greedy:
                choice = warp.argmax(rows[i], self._hist(extra))
                ok = choice == d
                if not ok:
                    nxt = choice
            else:
                p = warp.dist(rows[i], self._hist(extra))
                q = draft.q[i] if draft.q is not None else None
                ok = accept_draft_token(p, q, d, self.rng)
                if not ok:
                    nxt = residual_sample(p, q, d, self.rng)
            if not ok:
                break
            accepted += 1
        if nxt is None:
            nxt = self._pick(rows[k], draft.tokens)
        st.accepted += accepted
        for i in range(accepted):
            st.draft_pos_accepted[i] += 1
        self.cost.observe_accept(kind, bucket, k, accepted)
        if kind == DRAFT and self.model is not None:
            self.model.feedback(k, accepted)
        elif kind == LOOKUP:
            self.lookup.feedback(k, accepted)
        # Roll the target back to ctx + accepted drafts, then emit them and the target's token.
        t.truncate(base + accepted)
        for i in range(accepted):
            if self.stats.tokens >= self.p.max_tokens:
                raise _Finished(FinishReason.LENGTH)
            yield from self._emit(draft.tokens[i], True, rows[i])
        if self.stats.tokens >= self.p.max_tokens:
            raise _Finished(FinishReason.LENGTH)
        yield from self._emit(nxt, False, rows[accepted])
