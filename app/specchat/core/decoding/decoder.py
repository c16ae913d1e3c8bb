"""The decode loop: plain, or draft -> verify -> accept -> roll back, one event per step.

Invariant at the top of every step: `ctx` holds the prompt and every emitted token; the target's
KV cache holds ctx[:-1] (the newest token is decoded by the next pass, together with any draft);
the draft model's cache is a prefix of ctx. A verification pass decodes [ctx[-1], d1..dk] and
asks for logits of those k+1 rows only; after accepting m drafted tokens the target cache is cut
back to ctx + d1..dm, and the draft model's to the same length (counted by
`GenerationStats.count_verification`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from specchat.core.decoding.backend_sampler import ROWS_MAX
from specchat.core.decoding.chooser import Chooser, First
from specchat.core.decoding.cost_model import CostModel
from specchat.core.decoding.dist import sample
from specchat.core.decoding.draft_model import ModelDrafter
from specchat.core.decoding.drafting import DRAFT, LOOKUP, Draft, Why
from specchat.core.decoding.ngram import HISTORY, NgramDrafter, Proposal
from specchat.core.decoding.risk import RiskBudget, copy_cap, longest_within, opening_risk
from specchat.core.decoding.runtime import ContextFullError, Logits, ModelRuntime, PrefillCancelled
from specchat.core.decoding.sampling import Warp
from specchat.core.decoding.text_stream import TextStream
from specchat.core.types import (
    FinishReason,
    GenerationParams,
    GenerationStats,
    Mode,
    TokenEvent,
    Top2,
)

CancelCheck = Callable[[], bool]
NOTE_EVERY = 8  # Auto: steps between formatting the reason of an unchanged choice

NO_ROLLBACK_NOTE = (
    "speculation is off: {name} keeps a recurrent state that llama.cpp cannot roll back, "
    "so a rejected draft could not be undone"
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
        model: ModelDrafter | None,
        lookup: NgramDrafter,
        cost: CostModel,
        cancel: CancelCheck | None = None,
    ) -> None:
        self.t = target
        self.prompt = list(prompt)
        self.p = params
        self.mode = mode
        self.model = model
        # the draft's clocks count where it may decode (off and lookup never touch it)
        self._drt = model.rt if model is not None and mode in (Mode.DRAFT, Mode.AUTO) else None
        self.lookup = lookup
        self.cost = cost
        self.cancel = cancel or (lambda: False)
        self.warp = Warp(params, target.n_vocab)
        self.dwarp = Warp(params, model.rt.n_vocab, slots=params.k_max) if model else None
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
        self._lookup_seen = 0  # ctx tokens the n-gram drafter has been told about
        self._proposal: Proposal | None = None
        self._why: Why | None = None  # Auto: the last plan's reason
        self._noted: tuple[str | None, int] = ("", 0)  # the drafter noted, steps since
        self._rest = 0  # Auto: steps left that look for no draft (Plan.rest)
        self.risk = RiskBudget(opening_risk(cost))  # Auto: what this reply may still lose
        self.choose = Chooser(target, params, self.warp, self.rng, self._hist)
        self._no_rows = np.zeros((0, target.n_vocab), dtype=np.float32)

    # -- bookkeeping ------------------------------------------------------------------------
    def _hist(self, extra: Sequence[int] = ()) -> list[int]:
        return self.ctx[-self.p.repeat_last_n :] + list(extra) if self.warp.penalises else []

    def _clocks(self) -> tuple[float, int]:
        llama, rows = self.t.llama_s, self.t.host_rows
        if self._drt is not None:
            llama += self._drt.llama_s
            rows += self._drt.host_rows
        return llama, rows

    def _push(
        self, token: int, from_draft: bool, rows: Logits, i: int, t2: Top2 | None = None
    ) -> None:
        """Add `token` (from output row i) to the reply; _Finished when the reply ends here."""
        st = self.stats
        if st.tokens >= self.p.max_tokens:
            raise _Finished(FinishReason.LENGTH)
        self.ctx.append(token)
        self._produced += 1
        t = self.t  # (its sets read directly: a call costs more right after a decode)
        if token in t.eog:
            raise _Finished(FinishReason.STOP)
        self._ids.append(token)
        self._flags.append(from_draft)
        if self.p.record_top2:
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
        self._clocks0 = self._clocks()
        t = self.t
        if len(self.prompt) >= t.n_ctx:
            self.stats.note = (
                f"the prompt ({len(self.prompt)} tokens) fills the {t.n_ctx}-token context"
            )
            yield self._event(FinishReason.CONTEXT)
            return
        self._check_rollback()
        self.choose.setup(self.mode, self.model)
        drafting = self.mode is not Mode.OFF
        try:
            self._prefill_and_first()
            self._extend_drafters()
            yield self._event()
            while True:
                if self.cancel():
                    raise _Finished(FinishReason.CANCELLED)
                if self.stats.tokens >= self.p.max_tokens:
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
                limit = min(room - 1, self.p.max_tokens - self.stats.tokens, ROWS_MAX - 1)
                draft, kind, classes = self._draft(limit)  # (and each drafter's own cap)
                k = len(draft.tokens)
                base = len(self.ctx)
                try:
                    if k:
                        self._verify(draft, kind, classes)
                        self.risk.step(self._produced, self.cost.step_units(kind, k))
                    else:
                        self._plain_step()
                        self.risk.step(1, 1.0)
                    if not k or kind != LOOKUP:
                        self._judge_unsent(base)
                finally:  # (a step that looked for no draft, a rest, leaves it to the next look)
                    if self._proposal is not None:
                        self._extend_drafters()
                ev = self._event()
                wall, llama = time.perf_counter() - step_start, self._llama_at_event - llama_start
                self.cost.observe_step(kind or None, k, wall, llama)
                yield ev
        except _Finished as fin:
            if self._why is not None:
                self.stats.note = str(self._why)
            elif self.mode is Mode.DRAFT and self.model is not None:
                self.stats.note = self.cost.draft_mode_note(self.model.k_max)
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
                self.cost.observe_plain(self.stats.target_steps, self.stats.decode_llama_s)

    def _check_rollback(self) -> None:
        """Speculation needs both caches to roll back; recurrent and hybrid models cannot."""
        if self.mode is Mode.OFF:
            return
        blocked = None
        if not self.t.can_rollback:
            blocked = self.t
        elif self.mode in (Mode.DRAFT, Mode.AUTO) and self.model and not self.model.rt.can_rollback:
            blocked = self.model.rt
            if self.mode is Mode.AUTO:
                self.model = None  # Auto can still use lookup
                blocked = None
        if blocked is not None:
            name = blocked.info.display_name or blocked.path.stem
            self.stats.note = NO_ROLLBACK_NOTE.format(name=name)
            self.mode = Mode.OFF
            self.stats.mode = Mode.OFF.value

    def _prefill_and_first(self) -> None:
        """Decode what the cache lacks of the prompt and choose the first token from it. What
        the first choice needs is remembered, so a regenerate of the same prompt decodes
        nothing. At T > 0 the first token is drawn on the host (from llama.cpp's probabilities
        when its sampler runs in the graph), so a seed gives the same reply cold or warm."""
        t = self.t
        n = len(self.prompt)
        key = self.choose.first_key()
        first_input = t.recall(n, key) if t.common_prefix(self.prompt) >= n else None
        if first_input is None or not t.truncate(n):
            t.truncate(min(t.common_prefix(self.prompt), n - 1))
            rows = t.decode(self.prompt[len(t.cache) :], logits_for="last", cancel=self.cancel)
            first_input = self.choose.first_input(rows)
            t.remember(n, key, first_input)
        self.stats.prefill_s = time.perf_counter() - self._t0
        if self.model is not None and self.mode is not Mode.OFF:
            self.model.begin(self.prompt)
        if self.mode in (Mode.LOOKUP, Mode.AUTO):
            self.lookup.begin(self.prompt)
        self._lookup_seen = len(self.prompt)
        # The first token comes straight from the prefill: no draft work delays it.
        assert isinstance(first_input, First)
        row = first_input.row[None, :] if first_input.row is not None else self._no_rows
        if first_input.token is not None:
            first = first_input.token
        elif first_input.dist is not None:
            first = sample(first_input.dist, self.rng)
        else:
            first = self.choose.choose(row, 0)
        self._push(first, False, row, -1, first_input.top2)

    def _extend_drafters(self) -> None:
        """Tell the n-gram drafter about the tokens emitted since it last looked."""
        if self.mode in (Mode.LOOKUP, Mode.AUTO) and len(self.ctx) > self._lookup_seen:
            self.lookup.extend(self.ctx[self._lookup_seen :])
            self._lookup_seen = len(self.ctx)

    def _judge_unsent(self, base: int) -> None:
        """A lookup proposal not verified is judged anyway by the token the step emitted at
        its first (evidence for free: the estimates learn where they let nothing through)."""
        prop = self._proposal
        if prop is not None and prop.tokens and len(self.ctx) > base:
            right = self.ctx[base] == prop.tokens[0]
            self.cost.observe_accept(LOOKUP, [prop.first_class()], 1, int(right))

    def _plain_step(self, learn: bool = True) -> None:
        t, before, pick = self.t, self.t.llama_s, self.choose.graph_token
        rows = t.decode([self.ctx[-1]], logits_for="last")
        if learn:
            self.cost.observe_target(1, t.llama_s - before)
        try:
            self._push(pick(0) if pick else self.choose.choose(rows, 0), False, rows, -1)
        finally:  # a pass that read only the end token is not in the decode phase (_event)
            self.stats.target_steps += bool(self._ids)

    def _draft(self, limit: int) -> tuple[Draft, str, list[str]]:
        """The draft for this step (possibly empty), which drafter made it, and the acceptance
        class of each drafted token (for the cost model's calibration)."""
        none = Draft([], None)
        self._proposal = None
        if limit < 1 or self.mode is Mode.OFF:
            return none, "", []
        if self.mode is Mode.DRAFT:
            assert self.model is not None
            return self._model_draft(min(limit, self.model.k)), DRAFT, [""]
        limit = min(limit, self.p.lookup_k_max)
        if self.mode is Mode.AUTO:  # no walk past what the reply can risk (risk.py)
            if self._rest:  # the last plan found lookup far from paying
                self._rest -= 1
                return none, "", []
            limit = max(1, longest_within(self.cost, self.risk.left, limit))
        self._extend_drafters()  # the tokens of steps that looked for no draft
        prop = self.lookup.propose(
            limit,
            more=lambda first: self.cost.would_draft(LOOKUP, first.classes()),
        )
        cap = copy_cap(self.cost.curve, prop.context[0]) if prop.tokens else 0  # see risk.py
        classes = prop.classes()[:cap]
        alphas = self.cost.acceptances(LOOKUP, classes)
        self._proposal = prop
        if self.mode is Mode.LOOKUP:
            k = self.cost.chosen_chain(LOOKUP, alphas)
            self.stats.k_current = k
            return self._lookup_draft(prop, k), LOOKUP, classes
        plan = self.cost.plan(
            lookup_classes=classes,
            lookup_alphas=alphas,
            draft_ok=self.model is not None,
            max_k=limit,
            draft_max_k=min(limit, self.p.k_max),
            draft_lag=0 if self.model is None else len(self.ctx) - len(self.model.rt.cache),
            max_loss=self.risk.left,
            produced=self.stats.tokens,
        )
        # the reason: formatted on a new choice and every NOTE_EVERY steps (the window polls it)
        self._why, (last, since) = plan.why, self._noted
        fresh = plan.drafter != last or since >= NOTE_EVERY
        self._noted = (plan.drafter, 0 if fresh else since + 1)
        if fresh:
            self.stats.note = plan.reason
        self.stats.k_current, self._rest = plan.k, plan.rest
        if plan.drafter == LOOKUP:
            return self._lookup_draft(prop, plan.k), LOOKUP, classes
        if plan.drafter == DRAFT:
            return self._model_draft(plan.k), DRAFT, [""]
        return none, "", []

    def _lookup_draft(self, prop: Proposal, k: int) -> Draft:
        if k:
            self.stats.source = prop.source
        return self.lookup.draft(prop, k)

    def _model_draft(self, k: int) -> Draft:
        d = self.model
        assert d is not None
        self.stats.k_current = k
        self.stats.source = "draft model"
        t0, p = time.perf_counter(), self.p
        draft = d.propose(
            self.ctx, k, warp=self.dwarp, rng=self.rng, p_min=p.p_min, history_tail=p.repeat_last_n
        )
        self.cost.observe_draft(max(len(draft.tokens), 1), time.perf_counter() - t0 - d.catch_up_s)
        return draft

    def _verify(self, draft: Draft, kind: str, classes: list[str]) -> None:
        t, st = self.t, self.stats
        tokens = draft.tokens
        k = len(tokens)
        base = len(self.ctx)  # position of the first drafted token
        before = t.llama_s
        rows = t.decode([self.ctx[-1], *tokens], logits_for="all")
        self.cost.observe_target(k + 1, t.llama_s - before)
        st.target_steps += 1
        st.verify_steps += 1
        m, nxt = self.choose.judge(rows, draft)
        self.cost.observe_accept(kind, classes, k, m)
        if kind == LOOKUP and self._proposal is not None:
            self.lookup.feedback(self._proposal, k, m)
        if kind == DRAFT and self.model is not None:
            self.model.feedback(k, m)
        # Emit the accepted drafts and the target's token, then roll both caches back to ctx +
        # them (a model that cannot cut its cache decodes them again once the rows are read).
        try:
            for i in range(m):
                self._push(tokens[i], True, rows, i)
            self._push(nxt, False, rows, m)
        finally:
            if not t.truncate(base + m):
                t.decode(self.ctx[:base] + tokens[:m], logits_for="none")
            if kind == DRAFT and self.model is not None:
                self.model.rollback(base + m)
            j, prop = self._produced, self._proposal
            from_history = kind == LOOKUP and prop is not None and prop.source == HISTORY
            st.count_verification(k if j > m else j, min(m, j), j, from_history)  # all sent
