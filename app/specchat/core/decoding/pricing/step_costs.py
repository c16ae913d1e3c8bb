"""What a step costs on this machine, now: the timing half of Auto's cost model.

Measured online, in seconds:
- the target's decode time for a batch of n tokens, t(n) = t1 * c(n): c is the cost curve
  measured on this machine (`cost_curve`; `CostCurve.flat()` for an idealised GPU, every n costing
  one token's time), or, until one is given, a line c(n) = 1 + beta * (n - 1) fitted online;
- a costly drafter's time per drafted token (a draft model, an MTP head; lookup costs nothing);
- the host's own work per step beyond llama_decode (choosing tokens, building the event);
- whole steps, per drafter: a decayed ratio of what they took to what the parts predict.

From these, `best_chain` prices a draft whose tokens are accepted with given chances (the
acceptance estimates and the choice among drafters are `cost_model.py`'s):

    rate(k) = E(k) / step(k),   E(k) = 1 + sum_{j<=k} prod_{i<=j} a_i,
    step(k) = rho * (draft_cost(k) + t1 * c(k + 1) + host * (tokens chosen in the step))

against plain decoding at 1 / (t(1) + host).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from specchat.core.decoding.drafters.base import DrafterKind
from specchat.core.decoding.pricing.cost_curve import CostCurve
from specchat.core.decoding.pricing.tuning import (
    BATCH_MAX_PER_TOKEN,
    BETA_CPU,
    BETA_GPU,
    BETA_KEEP,
    CATCH_UP_PER_TOKEN,
    DRAFT_COST_PRIOR,
    DRAFT_TOKEN_KEEP,
    HOST_KEEP,
    STEP_RATIO_KEEP,
    STEP_RATIO_RANGE,
    T1_KEEP,
)

INF = float("inf")
LOOKUP = DrafterKind.LOOKUP
_Self = TypeVar("_Self", bound="StepCosts")


class StepCosts:
    """Online timing for one engine: what a plain step and a speculative one cost."""

    def __init__(
        self,
        *,
        gpu: bool = False,
        draft_cost: Mapping[str, float] | None = None,
        curve: CostCurve | None = None,
    ) -> None:
        self.t1: float | None = None  # seconds for a one-token target decode
        # extra cost per extra token in a batch, relative to t1 (a CPU's decode is compute-bound)
        self._beta_num, self._beta_den = BETA_GPU if gpu else BETA_CPU, 1.0
        # per costly drafter: seconds per drafted token, and how many drafts timed it
        self.draft_token: dict[str, float] = {}
        self.draft_trials: dict[str, int] = {}
        # prior per costly drafter: its time per token / the target's (a draft model: by size)
        self._draft_ratio = {**DRAFT_COST_PRIOR, **(draft_cost or {})}
        self.host: float | None = None  # host seconds per step outside llama_decode (plain)
        self.step_ratio: dict[str, float] = {}  # per drafter: measured step / predicted step
        self.idle: dict[str, int] = {}  # per drafter: steps since it last ran
        self._pending: tuple[str, float, float] | None = None  # last speculative step's times
        self.learn_timing = True  # False: keep the timing set by steady() (reproducible runs)
        self.curve: CostCurve | None = None  # None: the online line (beta)
        self._rel: list[float] = []  # curve.rel(n) for n = 0..len-1 (the planner's table)
        if curve is not None:
            self.use_curve(curve)

    def use_curve(self: _Self, curve: CostCurve | None) -> _Self:
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

    def shortest_paying(self, longest: int = 64) -> int | None:
        """The shortest draft (at most `longest`) that could beat plain decoding with every
        token kept: k + 1 tokens for a decode of k + 1; None where none could."""
        return next((k for k in range(1, longest + 1) if self.rel(k + 1) < k + 1), None)

    def steady(self: _Self, t1: float = 0.01, beta: float = 0.05, host: float = 0.0) -> _Self:
        """Fix the timing figures (acceptance is still learned): draft lengths that depend on
        the text alone, for runs reproducible across machines (exactness tests, examples)."""
        self.t1, self._beta_num, self._beta_den, self.host = t1, beta, 1.0, host
        self.draft_token = {kind: ratio * t1 for kind, ratio in self._draft_ratio.items()}
        self.learn_timing = False
        return self

    # -- observations -----------------------------------------------------------------------
    def observe_target(self, n_tokens: int, seconds: float) -> None:
        if seconds <= 0.0 or n_tokens < 1 or not self.learn_timing:
            return
        if n_tokens == 1:
            self.t1 = seconds if self.t1 is None else T1_KEEP * self.t1 + (1 - T1_KEEP) * seconds
            return
        if self.curve is not None:
            # The shape is known, and one-token decodes tell the scale. A batch costing more
            # than the curve says (a busy machine, a longer context) is the verification's
            # excess: the step ratio learns it (observe_step). Taken as a slower machine, it
            # would raise plain decoding's price with it, and Auto would draft at a loss.
            if self.t1 is None and not self.curve.is_flat:
                self.t1 = seconds / self.rel(n_tokens)
            return
        if self.t1 is None:
            return
        x = n_tokens - 1
        # One noisy measurement (another program on the machine) must not swing the model:
        # a batch costs at least one token's time and at most 2.5x per extra token.
        ratio = min(max(seconds / self.t1, 1.0), 1.0 + BATCH_MAX_PER_TOKEN * x)
        self._beta_num = BETA_KEEP * self._beta_num + (ratio - 1.0) * x
        self._beta_den = BETA_KEEP * self._beta_den + x * x

    def observe_plain(self, steps: int, seconds: float) -> None:
        """`steps` one-token decodes that took `seconds` in all (a reply without drafting,
        learned once at its end, not step by step): as `steps` observe_target(1, ...) calls of
        their mean would leave t1."""
        if steps < 1 or seconds <= 0.0 or not self.learn_timing:
            return
        mean, keep = seconds / steps, T1_KEEP**steps
        self.t1 = mean if self.t1 is None else keep * self.t1 + (1.0 - keep) * mean

    def observe_draft(self, drafter: str, n_tokens: int, seconds: float) -> None:
        """A costly drafter drafted `n_tokens` in `seconds` (its catch-up not included)."""
        if n_tokens < 1 or seconds <= 0.0 or not self.learn_timing:
            return
        self.draft_trials[drafter] = self.draft_trials.get(drafter, 0) + 1
        per, old = seconds / n_tokens, self.draft_token.get(drafter)
        keep = DRAFT_TOKEN_KEEP
        self.draft_token[drafter] = per if old is None else keep * old + (1.0 - keep) * per

    def draft_per_token(self, drafter: str) -> float:
        """Seconds per token a costly drafter drafts: as timed, or its prior before that."""
        per = self.draft_token.get(drafter)
        if per is None:
            per = self._draft_ratio.get(drafter, 1.0) * (self.t1 if self.t1 is not None else 1.0)
        return per

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
            self.host = (
                host if self.host is None else HOST_KEEP * self.host + (1 - HOST_KEEP) * host
            )
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
        low, high = STEP_RATIO_RANGE
        r, keep = min(high, max(low, wall_s / predicted)), STEP_RATIO_KEEP
        old = self.step_ratio.get(drafter)
        self.step_ratio[drafter] = r if old is None else keep * old + (1.0 - keep) * r

    # -- prices -------------------------------------------------------------------------------
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
        return self.draft_per_token(drafter) * (k + self.catch_up(lag))

    def catch_up(self, lag: int) -> float:
        """A batch of `lag` tokens a costly drafter has not seen, in its one-token decodes:
        about a tenth of one each (a CPU's prefill), and never more than the cost curve says a
        batch that long costs (flat: one decode)."""
        return min(CATCH_UP_PER_TOKEN * lag, self.rel(lag)) if lag > 0 else 0.0

    def host_cost(self) -> float:
        return self.host if self.host is not None else 0.0

    def _step_parts(self, drafter: str, k: int, lag: int, with_host: bool = True) -> float:
        """Predicted seconds of a step drafting k tokens, from its parts."""
        # tokens the host chooses in the step: a costly drafter's own choices too
        rows = k + 1 + (k if drafter != LOOKUP else 0)
        host = self.host_cost() * rows if with_host else 0.0
        return self.draft_cost(drafter, k, lag) + self.target_cost(k + 1) + host

    def step_cost(self, drafter: str, k: int, lag: int = 0) -> float:
        """Predicted seconds of a whole step, corrected by what such steps really took."""
        return self._step_parts(drafter, k, lag) * self.step_ratio.get(drafter, 1.0)

    def step_units(self, drafter: str, k: int) -> float:
        """A step drafting k tokens, in plain steps (what a risk budget counts)."""
        t1 = self.t1 if self.t1 is not None else 1.0
        return self.step_cost(drafter, k) / (t1 + self.host_cost())

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
        is_draft = drafter != LOOKUP  # a costly drafter: its own time and choices too
        per = catch_up = 0.0
        if is_draft:
            per = self.draft_per_token(drafter)
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
