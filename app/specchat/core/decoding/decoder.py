"""The decode loop: plain, or draft -> verify -> accept -> roll back, one event per step.

Invariant at the top of every step: `ctx` holds the prompt and every emitted token; the target's
KV cache holds ctx[:-1] (the newest token is decoded by the next pass, together with any draft);
each drafter's own state is a prefix of ctx. A verification pass decodes [ctx[-1], d1..dk] and
asks for logits of those k+1 rows only; after accepting m drafted tokens the target cache is cut
back to ctx + d1..dm, and the drafter that drafted is told the same length (`Drafter.rollback`;
counted by `GenerationStats.count_verification`).

Which drafters a reply may use follows its mode (`MODE_DRAFTERS`): one in a drafter's own mode,
every one that is loaded in Auto. Which of them drafts a step, and how far, is `draft_step.py`'s
(the cost model's plan, the reply's risk budget, a copy's earned length). The loop knows
drafters only through `drafters.base.Drafter`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from specchat.core.decoding.choosing.backend_sampler import ROWS_MAX
from specchat.core.decoding.choosing.chooser import Chooser, First
from specchat.core.decoding.choosing.dist import sample
from specchat.core.decoding.choosing.sampling import Warp
from specchat.core.decoding.draft_step import DraftStep
from specchat.core.decoding.drafters.base import Drafter, DrafterKind, Proposal
from specchat.core.decoding.drafters.lookup_proposal import HISTORY
from specchat.core.decoding.pricing.cost_model import CostModel
from specchat.core.decoding.runtime import ContextFullError, Logits, ModelRuntime, PrefillCancelled
from specchat.core.decoding.text_stream import TextStream
from specchat.core.params import GenerationParams
from specchat.core.types import FinishReason, GenerationStats, Mode, TokenEvent, Top2

CancelCheck = Callable[[], bool]

# the drafters each mode may use (Auto: every one loaded)
MODE_DRAFTERS: dict[Mode, tuple[DrafterKind, ...]] = {
    Mode.OFF: (),
    Mode.DRAFT: (DrafterKind.MODEL,),
    Mode.LOOKUP: (DrafterKind.LOOKUP,),
    Mode.MTP: (DrafterKind.MTP,),
    Mode.AUTO: (DrafterKind.LOOKUP, DrafterKind.MODEL, DrafterKind.MTP),
}

NO_ROLLBACK_NOTE = (
    "speculation is off: {name} keeps a recurrent state that llama.cpp cannot roll back "
    "on this build, so a rejected draft could not be undone"
)
DRAFT_NO_ROLLBACK_NOTE = (
    "speculation is off: the draft model {name} keeps a recurrent state, which cannot take a "
    "rejected draft back; pick a transformer draft model, Lookup or Auto"
)


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
        drafters: Sequence[Drafter],
        cost: CostModel,
        cancel: CancelCheck | None = None,
    ) -> None:
        self.target = target
        self.prompt = list(prompt)
        self.params = params
        self.mode = mode
        allowed = MODE_DRAFTERS[mode]
        # the drafters this reply may use, in the order Auto weighs them
        self.drafters: list[Drafter] = [d for d in drafters if d.kind in allowed]
        self._loaded = list(drafters)
        self.cost = cost
        self.cancel = cancel or (lambda: False)
        self.warp = Warp(params, target.n_vocab)
        self.rng = random.Random(params.seed)  # the host draws' uniform numbers (dist.Uniform)
        self.stats = GenerationStats(mode=mode.value, prompt_tokens=len(self.prompt))
        self.ctx: list[int] = list(self.prompt)
        self._text = TextStream(params.stop)
        self._t0 = 0.0
        self._t_first = 0.0
        self._clocks0: tuple[float, int] = (0.0, 0)
        self._llama_first = self._llama_at_event = 0.0  # llama clock: first token, last event
        # the step being built: its tokens, their origin, their top-2 (diagnostics)
        self._ids: list[int] = []
        self._flags: list[bool] = []
        self._top2: list[Top2] = []
        self._produced = 0  # tokens the current step produced (an ending token included)
        self.step = DraftStep(params, cost, self.stats, self.ctx)  # who drafts, and how far
        self.choose = Chooser(target, params, self.warp, self.rng, self._hist)
        self._no_rows = np.zeros((0, target.n_vocab), dtype=np.float32)
        self._runtimes: list[ModelRuntime] = []  # the drafters' own llama contexts (clocks)
        self._readers: list[Drafter] = []  # drafters shown every target decode

    # -- bookkeeping ------------------------------------------------------------------------
    def _hist(self, extra: Sequence[int] = ()) -> list[int]:
        return self.ctx[-self.params.repeat_last_n :] + list(extra) if self.warp.penalises else []

    def _clocks(self) -> tuple[float, int]:
        llama, rows = self.target.llama_s, self.target.host_rows
        for rt in self._runtimes:
            llama += rt.llama_s
            rows += rt.host_rows
        return llama, rows

    def _push(
        self, token: int, from_draft: bool, rows: Logits, i: int, t2: Top2 | None = None
    ) -> None:
        """Add `token` (from output row i) to the reply; _Finished when the reply ends here."""
        st = self.stats
        if st.tokens >= self.params.max_tokens:
            raise _Finished(FinishReason.LENGTH)
        self.ctx.append(token)
        self._produced += 1
        t = self.target  # (its sets read directly: a call costs more right after a decode)
        if token in t.eog:
            raise _Finished(FinishReason.STOP)
        self._ids.append(token)
        self._flags.append(from_draft)
        if self.params.record_top2:
            self._top2.append(t2 if t2 is not None else self.choose.top2(rows, i))
        st.tokens += 1
        if st.tokens == 1:
            self._t_first = time.perf_counter()
            st.ttft_s = self._t_first - self._t0
            self._llama_first = self._clocks()[0]
        if self._text.push(t.pieces.get(token) or t.piece(token), from_draft):
            raise _Finished(FinishReason.STOP)

    def _event(self, reason: FinishReason | None = None) -> TokenEvent:
        st = self.stats
        now = time.perf_counter()
        st.elapsed_s = now - self._t0
        llama, rows = self._clocks()
        self._llama_at_event = llama
        st.llama_s = llama - self._clocks0[0]
        # the decode phase ends at the last token (not at a last pass that read only the end)
        if st.tokens and (reason is None or self._ids):
            st.decode_s = now - self._t_first
            st.decode_llama_s = llama - self._llama_first
        st.host_rows = rows - self._clocks0[1]
        segs = self._text.take()
        text = segs[0][0] if len(segs) == 1 else "".join(s for s, _ in segs)
        # live stats in a step's event (the window polls), a copy in the last; lists handed over
        st = st if reason is None else st.copy()
        ev = TokenEvent(text, self._ids, self._flags, st, segs, reason, self._top2)
        self._ids, self._flags, self._top2, self._produced = [], [], [], 0
        return ev

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> Iterator[TokenEvent]:
        self._t0 = time.perf_counter()
        t = self.target
        if len(self.prompt) >= t.n_ctx:
            self.stats.note = (
                f"the prompt ({len(self.prompt)} tokens) fills the {t.n_ctx}-token context"
            )
            yield self._event(FinishReason.CONTEXT)
            return
        self._check_rollback()
        self._prepare_drafters()
        self._clocks0 = self._clocks()
        drafting = bool(self.drafters)
        try:
            self._prefill_and_first()
            yield self._event()
            while True:
                if self.cancel():
                    raise _Finished(FinishReason.CANCELLED)
                if self.stats.tokens >= self.params.max_tokens:
                    raise _Finished(FinishReason.LENGTH)
                room = t.n_ctx - len(t.cache)
                if room < 1:
                    raise _Finished(FinishReason.CONTEXT)
                if not drafting:  # off: no drafter, nothing to plan; timings learned at the end
                    self._plain_step(learn=False)
                    yield self._event()
                    continue
                step_start = time.perf_counter()
                llama_start = self._llama_at_event  # nothing decodes between event and step
                # (and each drafter's own cap; a hybrid target rolls back only so far)
                limit = min(
                    room - 1,
                    self.params.max_tokens - self.stats.tokens,
                    ROWS_MAX - 1,
                    t.rollback_depth,
                )
                drafter, sent, classes = self.step.choose(limit)
                k = len(sent.tokens)
                base = len(self.ctx)
                if drafter is not None and k:
                    m = self._verify(drafter, sent, classes)
                    self.step.verified(drafter, k, m, self._produced)
                else:
                    self._plain_step()
                    self.step.plain()
                self.step.judge_unsent(drafter if k else None, base)
                ev = self._event()
                wall, llama = time.perf_counter() - step_start, self._llama_at_event - llama_start
                kind = drafter.kind if drafter is not None and k else None
                self.cost.steps.observe_step(kind, k, wall, llama)
                yield ev
        except _Finished as fin:
            self._closing_note()
            if fin.reason is not FinishReason.STOP or not self._text.stopped:
                self._text.flush()
            yield self._event(fin.reason)
        except PrefillCancelled:
            yield self._event(FinishReason.CANCELLED)
        except ContextFullError as exc:
            self.stats.note = str(exc)
            self._text.flush()
            yield self._event(FinishReason.CONTEXT)
        finally:
            # Keep the caches consistent with what was actually decoded, whatever happened.
            t.truncate(max(len(self.prompt), len(self.ctx) - 1))
            if not drafting:  # the decode phase's passes were all plain steps
                self.cost.steps.observe_plain(self.stats.target_steps, self.stats.decode_llama_s)

    def _closing_note(self) -> None:
        """Auto's last reason, or what a costly drafter's own mode was worth here."""
        if self.step.why is not None:
            self.stats.note = str(self.step.why)
        elif self.mode is not Mode.AUTO and self.drafters and self.drafters[0].costly:
            d = self.drafters[0]
            self.stats.note = self.cost.draft_mode_note(d.kind, self.params.k_max)

    def _check_rollback(self) -> None:
        """Speculation needs the target's cache and each drafter's state to roll back; a model
        whose recurrent state cannot be rolled back on this build drafts nothing."""
        if not self.drafters:
            return
        blocked: ModelRuntime | None = None
        if not self.target.can_rollback:
            blocked = self.target
        else:
            usable = []
            for d in self.drafters:
                rt = d.runtime
                if rt is None or rt.can_rollback:
                    usable.append(d)
                elif self.mode is not Mode.AUTO:  # the user's own drafter cannot run
                    blocked = rt
            if blocked is None:
                self.drafters = usable  # Auto goes on with the others
        if blocked is not None:
            name = blocked.info.display_name or blocked.path.stem
            note = NO_ROLLBACK_NOTE if blocked is self.target else DRAFT_NO_ROLLBACK_NOTE
            self.stats.note = note.format(name=name)
            self.drafters = []
            self.mode = Mode.OFF
            self.stats.mode = Mode.OFF.value

    def _prepare_drafters(self) -> None:
        """The draft chains on the drafters' runtimes and each costly drafter's settings."""
        drafting = [d.runtime for d in self.drafters if d.runtime is not None]
        idle = [d.runtime for d in self._loaded if d.runtime is not None]
        self.choose.setup(drafting, [rt for rt in idle if rt not in drafting])
        self._runtimes = drafting
        self._readers = [d for d in self.drafters if d.reads_target]
        t = self.target
        self.step.prepare(self.mode, self.drafters, t.n_vocab, self.rng, t.eog, t.ends_paragraph)

    def _prefill_and_first(self) -> None:
        """Decode what the cache lacks of the prompt and choose the first token from it. What
        the first choice needs is remembered, so a regenerate of the same prompt decodes
        nothing. At T > 0 the first token is drawn on the host (from llama.cpp's probabilities
        when its sampler runs in the graph), so a seed gives the same reply cold or warm."""
        t = self.target
        n = len(self.prompt)
        for d in self.drafters:
            d.begin(self.prompt)
        key = self.choose.first_key()
        # (a drafter that reads the target's hidden states needs the prompt's last row decoded)
        cached = t.common_prefix(self.prompt) >= n and not self._readers
        first_input = t.recall(n, key) if cached else None
        if not isinstance(first_input, First) or not t.truncate(n):
            t.truncate(min(t.common_prefix(self.prompt), n - 1))
            start = len(t.cache)
            rows = t.decode(self.prompt[start:], logits_for="last", cancel=self.cancel)
            self._show_target(self.prompt[start:], start, "last")
            first_input = self.choose.first_input(rows)
            t.remember(n, key, first_input)
        self.stats.prefill_s = time.perf_counter() - self._t0
        # The first token comes straight from the prefill: no draft work delays it.
        row = first_input.row[None, :] if first_input.row is not None else self._no_rows
        if first_input.token is not None:
            first = first_input.token
        elif first_input.dist is not None:
            first = sample(first_input.dist, self.rng)
        else:
            first = self.choose.choose(row, 0)
        self._push(first, False, row, -1, first_input.top2)

    def _show_target(self, tokens: Sequence[int], start: int, outputs: str) -> None:
        for d in self._readers:
            d.observe_target(tokens, start, outputs)

    def _plain_step(self, learn: bool = True) -> None:
        t, before, pick = self.target, self.target.llama_s, self.choose.graph_token
        rows = t.decode([self.ctx[-1]], logits_for="last")
        if self._readers:
            self._show_target(self.ctx[-1:], len(self.ctx) - 1, "last")
        if learn:
            self.cost.steps.observe_target(1, t.llama_s - before)
        try:
            self._push(pick(0) if pick else self.choose.choose(rows, 0), False, rows, -1)
        finally:  # a pass that read only the end token is not in the decode phase (_event)
            self.stats.target_steps += bool(self._ids)

    # -- verifying --------------------------------------------------------------------------
    def _verify(self, drafter: Drafter, draft: Proposal, classes: list[str]) -> int:
        """Verify the draft, emit what the target keeps of it and its own next token; how
        many drafted tokens were kept."""
        t, st = self.target, self.stats
        tokens = draft.tokens
        k = len(tokens)
        base = len(self.ctx)  # position of the first drafted token
        before = t.llama_s
        rows = t.decode([self.ctx[-1], *tokens], logits_for="all")
        if self._readers:
            self._show_target([self.ctx[-1], *tokens], base - 1, "all")
        self.cost.steps.observe_target(k + 1, t.llama_s - before)
        st.target_steps += 1
        st.verify_steps += 1
        m, nxt = self.choose.judge(rows, draft)
        self.cost.observe_accept(drafter.kind, classes, k, m)
        offer = self.step.offer
        drafter.feedback(offer[1] if offer is not None and offer[0] is drafter else draft, k, m)
        # Emit the accepted drafts and the target's token, then roll the target and the
        # drafter back to ctx + them (a model that cannot cut its cache decodes them again
        # once the rows are read).
        try:
            for i in range(m):
                self._push(tokens[i], True, rows, i)
            self._push(nxt, False, rows, m)
        finally:
            if not t.truncate(base + m):  # (the cache was cleared: decode what is kept)
                t.decode(self.ctx[:base] + tokens[:m], logits_for="none")
                self._show_target(self.ctx[:base] + tokens[:m], 0, "none")
            drafter.rollback(base + m)
            for d in self._readers:
                if d is not drafter:
                    d.rollback(base + m)
            j = self._produced
            from_history = draft.source == HISTORY
            st.count_verification(k if j > m else j, min(m, j), j, from_history)  # all sent
        return m
