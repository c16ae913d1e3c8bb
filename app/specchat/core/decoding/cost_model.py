"""Auto mode and draft sizing: an online cost model of what speculation gains, step by step.

It measures what things cost on this machine, now:
- the target's decode time for a batch of n tokens, t(n) = t1 * c(n): c is the cost curve
  measured on this machine (`cost_curve`; `CostCurve.flat()` for an idealised GPU, every n costing
  one token's time), or, until one is given, a line c(n) = 1 + beta * (n - 1) fitted online;
- the draft model's time per drafted token (n-gram lookup costs nothing);
- the host's own work per step beyond llama_decode (choosing tokens, building the event);
- whole steps, per drafter: a decayed ratio of what they took to what the parts predict;
- acceptance: per drafter and class of drafted token (the n-gram drafter's confidence classes;
  one class for the draft model), decayed Beta estimates of the chance a token is accepted
  given that the ones before it were (`acceptance`),
and picks the drafter and draft length k that maximise expected tokens per second:

    rate(k) = E(k) / step(k),   E(k) = 1 + sum_{j<=k} prod_{i<=j} a_i,
    step(k) = rho * (draft_cost(k) + t1 * c(k + 1) + host * (tokens chosen in the step))

against plain decoding at 1 / (t(1) + host), within what a refusal may lose (risk.py). If
nothing beats plain decoding by a small margin, it does not speculate. Estimates are decayed,
so the choice follows acceptance; a drafter ruled out is tried again now and then, and the
reason says what made it lose.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.core.decoding.acceptance import Acceptance, prior
from specchat.core.decoding.cost_curve import CostCurve
from specchat.core.decoding.drafting import Plan, Why

DRAFT, LOOKUP = "draft", "lookup"  # the drafters
INF = float("inf")
FAR, FAR_STEPS = 0.8, 8  # a draft model below 0.8 x margin is re-priced every 8 steps
HOST_OUTWEIGHS = ": host work ({:.2f} ms per token chosen) outweighs the {:.2f}x the models allow"
RISKY = "{}; this reply may risk {:.1f} steps (risk.py)"
Figures = tuple[int, float, int, float, float, float]  # the draft model's, see _draft_figures
STEPS_SLOWER = ": its steps measured {:.2f}x slower than their parts predict"


class CostModel:
    """Online costs and acceptance for one engine (it follows the conversation)."""

    def __init__(
        self, *, gpu: bool = False, draft_cost_ratio: float = 0.45, curve: CostCurve | None = None
    ) -> None:
        self.t1: float | None = None  # seconds for a one-token target decode
        # extra cost per extra token in a batch, relative to t1 (a CPU's decode is compute-bound)
        self._beta_num, self._beta_den = 0.05 if gpu else 0.35, 1.0
        self.draft_token: float | None = None  # seconds per drafted token (draft model)
        self.draft_trials = 0
        self._draft_ratio = draft_cost_ratio  # prior: draft cost / target cost (by file size)
        self.alpha: dict[tuple[str, str], Acceptance] = {}
        self.margin = 1.03  # speculate only when the expected gain beats plain by 3 %
        self.host: float | None = None  # host seconds per step outside llama_decode (plain)
        self.step_ratio: dict[str, float] = {}  # per drafter: measured step / predicted step
        self.idle: dict[str, int] = {}  # per drafter: steps since it last ran
        self._pending: tuple[str, float, float] | None = None  # last speculative step's times
        self._draft_memo: tuple[Any, ...] | None = None  # see _draft_figures
        self.reprobe_after = 24  # steps: a drafter the estimates rule out is tried again
        self.learn_timing = True  # False: keep the timing set by steady() (reproducible runs)
        self.curve: CostCurve | None = None  # None: the online line (beta)
        self._rel: list[float] = []  # curve.rel(n) for n = 0..len-1 (the planner's table)
        if curve is not None:
            self.use_curve(curve)

    def use_curve(self, curve: CostCurve | None) -> CostModel:
        """Price a verification of n tokens with `curve` (None: back to the online line). A
        measured curve also gives the one-token time until decodes are observed."""
        self.curve = curve
        self._rel = curve.table(66) if curve is not None else []
        if curve is not None and curve.t1_s and self.t1 is None:
            self.t1 = curve.t1_s
        if curve is not None and curve.is_flat:
            self.step_ratio.clear()  # flat steps are priced on purpose below what they take
        return self

    def rel(self, n: int) -> float:
        """Cost of a decode of n tokens relative to one."""
        if self.curve is None:
            return 1.0 + self.beta * (n - 1)
        return self._rel[n] if n < len(self._rel) else self.curve.rel(n)

    def steady(self, t1: float = 0.01, beta: float = 0.05, host: float = 0.0) -> CostModel:
        """Fix the timing figures (acceptance is still learned): draft lengths that depend on
        the text alone, for runs reproducible across machines (exactness tests, examples)."""
        self.t1, self._beta_num, self._beta_den, self.host = t1, beta, 1.0, host
        self.draft_token = self._draft_ratio * t1
        self.learn_timing = False
        return self

    # -- observations -----------------------------------------------------------------------
    def observe_target(self, n_tokens: int, seconds: float) -> None:
        if seconds <= 0.0 or n_tokens < 1 or not self.learn_timing:
            return
        if n_tokens == 1:
            self.t1 = seconds if self.t1 is None else 0.8 * self.t1 + 0.2 * seconds
            return
        if self.curve is not None:
            if not self.curve.is_flat:  # the shape is known: a batch tells the scale too
                one = seconds / self.rel(n_tokens)
                self.t1 = one if self.t1 is None else 0.9 * self.t1 + 0.1 * one
            return
        if self.t1 is None:
            return
        x = n_tokens - 1
        # One noisy measurement (another program on the machine) must not swing the model:
        # a batch costs at least one token's time and at most 2.5x per extra token.
        ratio = min(max(seconds / self.t1, 1.0), 1.0 + 2.5 * x)
        self._beta_num = 0.95 * self._beta_num + (ratio - 1.0) * x
        self._beta_den = 0.95 * self._beta_den + x * x

    def observe_draft(self, n_tokens: int, seconds: float) -> None:
        if n_tokens < 1 or seconds <= 0.0 or not self.learn_timing:
            return
        self.draft_trials += 1
        per = seconds / n_tokens
        self.draft_token = per if self.draft_token is None else 0.8 * self.draft_token + 0.2 * per

    def observe_step(self, drafter: str | None, k: int, wall_s: float, llama_s: float) -> None:
        """A whole step: `wall_s` from the start of drafting to the event handed out, of which
        `llama_s` inside llama_decode. A plain step (drafter None) measures the host's work;
        a speculative one updates that drafter's measured/predicted ratio once the next step
        is seen (a plain step after it adds its own excess over a plain decode)."""
        if wall_s <= 0.0 or not self.learn_timing:
            return
        pending, self._pending = self._pending, None
        if not drafter:
            host = max(0.0, wall_s - llama_s)
            self.host = host if self.host is None else 0.8 * self.host + 0.2 * host
            if pending is not None:
                # A plain step right after a verification pays for llama.cpp's graph changing
                # shape back (about 5 % of a decode on a CPU): a cost of that verification.
                spec, wall, predicted = pending
                extra = max(0.0, llama_s - self.t1) if self.t1 is not None else 0.0
                self._step_measured(spec, wall + extra, predicted)
            return
        if pending is not None:
            self._step_measured(*pending)
        if self.t1 is None or k < 1 or (self.curve is not None and self.curve.is_flat):
            return  # flat: steps are priced as a GPU's, below what they take here
        predicted = self._step_parts(drafter, k, 0)
        if predicted <= 0.0:
            return
        self._pending = (drafter, wall_s, predicted)  # settled by the next step
        self.idle[drafter] = 0

    def _step_measured(self, drafter: str, wall_s: float, predicted: float) -> None:
        r = min(2.0, max(0.5, wall_s / predicted))
        old = self.step_ratio.get(drafter)
        self.step_ratio[drafter] = r if old is None else 0.85 * old + 0.15 * r

    def observe_accept(
        self, drafter: str, classes: Sequence[str], judged: int, accepted: int
    ) -> None:
        """`judged` drafted tokens were checked, the first `accepted` of them accepted; token i
        had acceptance class classes[i] (one class for every token is fine)."""
        for i in range(min(judged, accepted + 1)):
            cls = classes[i] if i < len(classes) else classes[-1] if classes else ""
            self._alpha(drafter, cls).add(i < accepted)

    # -- estimates --------------------------------------------------------------------------
    def _alpha(self, drafter: str, cls: str) -> Acceptance:
        key = (drafter, cls)
        if key not in self.alpha:
            self.alpha[key] = Acceptance(prior(drafter == DRAFT, cls))
        return self.alpha[key]

    def acceptance(self, drafter: str, cls: str = "") -> float:
        return self._alpha(drafter, cls).mean

    def acceptances(self, drafter: str, classes: Sequence[str]) -> list[float]:
        return [self._alpha(drafter, c).mean for c in classes]

    @property
    def beta(self) -> float:
        return max(0.0, self._beta_num / self._beta_den)

    def target_cost(self, n: int) -> float:
        t1 = self.t1 if self.t1 is not None else 1.0
        return t1 * self.rel(n)

    def draft_cost(self, drafter: str, k: int, lag: int = 0) -> float:
        """Time to draft k tokens; `lag` tokens the draft model has not seen yet are caught up
        in one batch first (`catch_up`)."""
        if drafter == LOOKUP:
            return 0.0
        per = self.draft_token
        if per is None:
            per = self._draft_ratio * (self.t1 if self.t1 is not None else 1.0)
        return per * (k + self.catch_up(lag))

    def catch_up(self, lag: int) -> float:
        """A batch of `lag` tokens the draft model has not seen, in its one-token decodes:
        about a tenth of one each (a CPU's prefill), and never more than the cost curve says a
        batch that long costs (flat: one decode)."""
        return min(0.1 * lag, self.rel(lag)) if lag > 0 else 0.0

    def host_cost(self) -> float:
        return self.host if self.host is not None else 0.0

    def _step_parts(self, drafter: str, k: int, lag: int, with_host: bool = True) -> float:
        """Predicted seconds of a step drafting k tokens, from its parts."""
        rows = k + 1 + (k if drafter == DRAFT else 0)  # tokens the host chooses in the step
        host = self.host_cost() * rows if with_host else 0.0
        return self.draft_cost(drafter, k, lag) + self.target_cost(k + 1) + host

    def step_cost(self, drafter: str, k: int, lag: int = 0) -> float:
        """Predicted seconds of a whole step, corrected by what such steps really took."""
        return self._step_parts(drafter, k, lag) * self.step_ratio.get(drafter, 1.0)

    def step_units(self, drafter: str, k: int) -> float:
        """A step drafting k tokens, in plain steps (what a risk budget counts)."""
        t1 = self.t1 if self.t1 is not None else 1.0
        return self.step_cost(drafter, k) / (t1 + self.host_cost())

    # -- decisions --------------------------------------------------------------------------
    def best_chain(
        self,
        drafter: str,
        alphas: Sequence[float],
        lag: int = 0,
        *,
        with_host: bool = True,
        with_ratio: bool = True,
        max_loss: float = INF,
    ) -> tuple[int, float]:
        """(k, expected rate relative to plain) of the best draft length up to len(alphas),
        token i being accepted (after the ones before it) with probability alphas[i]; k = 0
        when no length beats plain decoding (the best rate found is still returned). Without
        host / ratio it prices the models alone (to tell what makes a drafter lose). None whose
        refusal would lose more than `max_loss` one-token steps (risk.RiskBudget)."""
        t1 = self.t1 if self.t1 is not None else 1.0
        n_top = len(alphas) + 2
        rel = self._rel if len(self._rel) >= n_top else [self.rel(n) for n in range(n_top)]
        host = self.host_cost() if with_host else 0.0
        ratio = self.step_ratio.get(drafter, 1.0) if with_ratio else 1.0
        t_plain = t1 + host
        is_draft = drafter == DRAFT
        per = catch_up = 0.0
        if is_draft:
            per = self.draft_token if self.draft_token is not None else self._draft_ratio * t1
            catch_up = self.catch_up(lag)
        best_k, best = 0, 0.0
        chance, gained, worst = 1.0, 1.0, t_plain * (1.0 + max_loss)
        for k, a in enumerate(alphas, start=1):
            chance *= a
            gained += chance
            rows = 2 * k + 1 if is_draft else k + 1
            draft = per * (k + catch_up) if is_draft else 0.0
            cost = (draft + t1 * rel[k + 1] + host * rows) * ratio
            if cost > worst:
                break
            gain = gained * t_plain / cost
            if gain > best:
                best_k, best = k, gain
        return (best_k, best) if best > 1.0 else (0, best)

    def chosen_chain(self, drafter: str, alphas: Sequence[float]) -> int:
        """Draft length for a drafter the user chose (Lookup mode): the best chain; when the
        estimates rule drafting out, one step in `reprobe_after` still drafts (sized by the
        models' own costs), so the estimates can recover from a slow spell on the machine."""
        if not alphas:
            return 0
        k, _ = self.best_chain(drafter, alphas)
        idle = 0 if k else self.idle.get(drafter, 0) + 1
        if idle >= self.reprobe_after:
            k = max(1, self.best_chain(drafter, alphas, with_host=False, with_ratio=False)[0])
            idle = 0
        self.idle[drafter] = idle
        return k

    def would_draft(self, drafter: str, classes: Sequence[str]) -> bool:
        """Whether some of these classes' tokens are worth drafting (a longer draft may pay
        more still: on a CPU's curve 3 tokens can beat 4 while 6 beat both)."""
        return self.best_chain(drafter, self.acceptances(drafter, classes))[0] > 0

    def plan(
        self,
        *,
        lookup_classes: Sequence[str],
        draft_ok: bool,
        max_k: int,
        draft_lag: int = 0,
        lookup_alphas: Sequence[float] | None = None,
        draft_max_k: int | None = None,
        max_loss: float = INF,
    ) -> Plan:
        """Choose among a plain step, the n-gram draft on offer (its tokens' acceptance
        classes, or their estimates, `lookup_alphas`; at most `max_k`) and the draft model (at
        most `draft_max_k`), none that could lose over `max_loss` one-token steps (risk.py)."""
        dk = max_k if draft_max_k is None else draft_max_k
        if self.t1 is None:
            return Plan(None, 0, 1.0, Why("auto: measuring the target's speed"))
        options: list[Plan] = []
        if lookup_alphas is None:
            lookup_alphas = self.acceptances(LOOKUP, lookup_classes[:max_k])
        else:
            lookup_alphas = list(lookup_alphas[:max_k])
        if lookup_alphas:
            k, gain = self.best_chain(LOOKUP, lookup_alphas, max_loss=max_loss)
            a = lookup_alphas[0]
            if k and lookup_classes and max_loss == INF:
                # Without a risk budget, Auto must not lose to off: a draft pays only if it
                # still does one standard deviation below each acceptance estimate. With one
                # (the decoder's), the budget bounds what refusals lose, and this guard on top
                # made Auto never draft on a curve steep at its start (docs/benchmarks.md).
                sure = [
                    max(0.0, x - self._alpha(LOOKUP, c).doubt(x))
                    for x, c in zip(lookup_alphas[:k], lookup_classes, strict=False)
                ]
                low = self.best_chain(LOOKUP, sure, max_loss=max_loss)[1]
                if low < self.margin:
                    # (and a re-probe, `_plain`, is priced on the same doubtful estimates)
                    k, gain, lookup_alphas = 0, low, sure
            options.append(Plan(LOOKUP, k, gain, Why("lookup k={} (first token α≈{:.2f})", k, a)))
        figures = None
        if draft_ok and dk >= 1:
            figures = self._draft_figures(dk, draft_lag, max_loss)
            k, gain = figures[:2]
            a = self.acceptance(DRAFT)
            two = min(2, dk)  # never measured: tried briefly where it could beat the rest
            rival = max([self.margin] + [o.speedup for o in options if o.k > 0])
            chosen = k > 0 and gain >= rival
            if not chosen and figures[5] >= rival and self.step_units(DRAFT, two) - 1 <= max_loss:
                return Plan(DRAFT, two, gain, Why("auto: measuring the draft model (k={})", two))
            options.append(Plan(DRAFT, k, gain, Why("draft model k={} (α≈{:.2f})", k, a)))
        best = max(options, key=lambda p: p.speedup, default=None)
        if best is None or best.k == 0 or best.speedup < self.margin:
            return self._plain(options, lookup_alphas, figures, max_loss)
        for o in options:
            if o.drafter != best.drafter:
                assert o.drafter is not None
                self.idle[o.drafter] = self.idle.get(o.drafter, 0) + 1
        return Plan(
            best.drafter,
            best.k,
            best.speedup,
            Why("auto: {}, est. {:.2f}x", best.why, best.speedup),
        )

    def _draft_figures(self, dk: int, lag: int, max_loss: float) -> Figures:
        """The draft model's best chain (k, rate), and for `_plain` the models' own (k, rate)
        and the rate with host work; untried (under 3 drafts), its rate one standard deviation
        above its prior acceptance (optimism about the untried: tried where that beats what is
        on offer). Far below paying they stand for FAR_STEPS steps (until it drafts again only
        timings drift, and a longer lag only lowers them)."""
        a = self._alpha(DRAFT, "")
        key = (dk, self.draft_trials, a.s, a.f)
        m = self._draft_memo
        if m is not None and m[0] == key and m[1] > 0 and lag >= m[2]:
            self._draft_memo = (key, m[1] - 1, m[2], m[3])
            return m[3]
        alphas = [a.mean] * dk
        k, gain = self.best_chain(DRAFT, alphas, lag, max_loss=max_loss)
        k_bare, bare = self.best_chain(DRAFT, alphas, lag, with_host=False, with_ratio=False)
        hosted = self.best_chain(DRAFT, alphas, lag, with_ratio=False)[1]
        hopeful = 0.0
        if self.draft_trials < 3:
            hope = min(1.0, a.mean + a.doubt(a.mean))
            hopeful = self.best_chain(DRAFT, [hope] * dk, lag, max_loss=max_loss)[1]
        figures = (k, gain, k_bare, bare, hosted, hopeful)
        far = max(gain, bare, hosted, hopeful) < FAR * self.margin
        self._draft_memo = (key, FAR_STEPS if far else 0, lag, figures)
        return figures

    def _plain(
        self,
        options: list[Plan],
        lookup_alphas: Sequence[float],
        figures: Figures | None,
        max_loss: float,
    ) -> Plan:
        """A plain step, with the reason; or, now and then, one step of a drafter the
        estimates rule out, so a single slow measurement cannot switch it off for good."""
        if not options:
            return Plan(None, 0, 1.0, Why("auto: plain decoding (no draft on offer)"))
        top = max(options, key=lambda p: p.speedup)
        assert top.drafter is not None
        name = "lookup" if top.drafter == LOOKUP else "draft model"
        if top.drafter == LOOKUP:
            alphas = list(lookup_alphas)
            k_bare, bare = self.best_chain(LOOKUP, alphas, with_host=False, with_ratio=False)
            _, hosted = self.best_chain(LOOKUP, alphas, with_ratio=False)
        else:
            assert figures is not None
            k_bare, bare, hosted = figures[2:5]
        why: Why | str = ""
        if bare >= self.margin and hosted < self.margin and self.host is not None:
            why = Why(HOST_OUTWEIGHS, self.host * 1000, bare)
        elif hosted >= self.margin:
            why = Why(STEPS_SLOWER, self.step_ratio.get(top.drafter, 1.0))
        if max_loss < INF:
            why = Why(RISKY, why, max_loss)
        for o in options:
            assert o.drafter is not None
            self.idle[o.drafter] = self.idle.get(o.drafter, 0) + 1
            r = self.step_ratio.get(o.drafter)
            if r is not None:  # an old slow measurement fades while nothing new comes in
                self.step_ratio[o.drafter] = 1.0 + (r - 1.0) * 0.97
        idle = self.idle.get(top.drafter, 0) >= self.reprobe_after
        if idle and bare >= self.margin and self.step_units(top.drafter, k_bare) - 1 <= max_loss:
            self.idle[top.drafter] = 0
            return Plan(
                top.drafter, k_bare, bare, Why("auto: re-measuring {} (k={})", name, k_bare)
            )
        return Plan(
            None,
            0,
            1.0,
            Why("auto: plain decoding ({} would run at {:.2f}x{})", name, top.speedup, why),
        )
