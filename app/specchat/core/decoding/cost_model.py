"""Auto mode: an online cost model that decides, step by step, whether speculation pays.

It measures what things cost on this machine, now:
- the target's decode time for a batch of n tokens, t(n) = t1 * (1 + beta * (n - 1));
- the draft model's time per drafted token (prompt lookup costs nothing);
- the host's own work per step (choosing tokens, building the event): everything a step costs
  beyond llama_decode;
- whole steps, wall clock, per kind: a decayed ratio of what each kind of step really took to
  what the parts above predict, so whatever the parts miss is charged to that kind;
- each drafter's per-token acceptance probability alpha (for lookup, by match length),
and picks the drafter and draft length k that maximise expected tokens per second:

    rate(k) = E(k) / step(k),   E(k) = (1 - alpha^(k+1)) / (1 - alpha),
    step(k) = rho * (draft_cost(k) + t(k + 1) + host * (k + 1 [+ k for a draft model]))

against plain decoding at 1 / (t(1) + host). If nothing beats plain decoding by a small margin,
it does not speculate. Estimates are decayed averages, so the choice follows acceptance as it
drifts; when only the host's work stands between a drafter and a gain, the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass

DRAFT = "draft"
LOOKUP = "lookup"


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens gained by one verification of k drafted tokens (accepted run + the target's own)."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def lookup_bucket(match_len: int) -> str:
    if match_len >= 8:
        return "long"
    if match_len >= 5:
        return "medium"
    return "short"


_LOOKUP_PRIOR = {"short": 0.45, "medium": 0.65, "long": 0.8}
_DRAFT_PRIOR = 0.6


@dataclass(frozen=True)
class Plan:
    drafter: str | None  # DRAFT, LOOKUP, or None for a plain step
    k: int
    speedup: float  # expected rate relative to plain decoding
    reason: str


class _Beta:
    """Decayed Beta-Bernoulli estimate of a per-token acceptance probability."""

    def __init__(self, prior: float, weight: float = 4.0, decay: float = 0.97) -> None:
        self.s = prior * weight
        self.f = (1.0 - prior) * weight
        self.decay = decay

    def update(self, drafted: int, accepted: int) -> None:
        self.s = self.s * self.decay + accepted
        self.f = self.f * self.decay + (1.0 if accepted < drafted else 0.0)

    @property
    def mean(self) -> float:
        return self.s / (self.s + self.f)


class CostModel:
    """Online costs and acceptance for one engine (one conversation at a time)."""

    def __init__(self, *, gpu: bool = False, draft_cost_ratio: float = 0.45) -> None:
        self.t1: float | None = None  # seconds for a one-token target decode
        # Extra cost per extra token in a batch, relative to t1. CPU decode is compute-bound
        # (a batch of 8 costs ~3.5x one token on 2 cores); GPU decode is memory-bound.
        self._beta_num = 0.05 if gpu else 0.35
        self._beta_den = 1.0
        self.draft_token: float | None = None  # seconds per drafted token (draft model)
        self.draft_trials = 0
        self._draft_ratio = draft_cost_ratio  # prior: draft cost / target cost (by file size)
        self.alpha: dict[tuple[str, str], _Beta] = {}
        self.margin = 1.03  # speculate only when the expected gain beats plain by 3 %
        self.host: float | None = None  # host seconds per step outside llama_decode (plain)
        self.step_ratio: dict[str, float] = {}  # per drafter: measured step / predicted step

    # -- observations -----------------------------------------------------------------------
    def observe_target(self, n_tokens: int, seconds: float) -> None:
        if seconds <= 0.0 or n_tokens < 1:
            return
        if n_tokens == 1:
            self.t1 = seconds if self.t1 is None else 0.8 * self.t1 + 0.2 * seconds
            return
        if self.t1 is None:
            return
        ratio = seconds / self.t1
        x = n_tokens - 1
        self._beta_num = 0.9 * self._beta_num + (ratio - 1.0) * x
        self._beta_den = 0.9 * self._beta_den + x * x

    def observe_draft(self, n_tokens: int, seconds: float) -> None:
        if n_tokens < 1 or seconds <= 0.0:
            return
        self.draft_trials += 1
        per = seconds / n_tokens
        self.draft_token = per if self.draft_token is None else 0.8 * self.draft_token + 0.2 * per

    def observe_step(self, drafter: str | None, k: int, wall_s: float, llama_s: float) -> None:
        """A whole step: `wall_s` from the start of drafting to the event handed out, of which
        `llama_s` inside llama_decode. A plain step (drafter None) measures the host's work;
        a speculative one updates that drafter's measured/predicted ratio."""
        if wall_s <= 0.0:
            return
        if not drafter:
            host = max(0.0, wall_s - llama_s)
            self.host = host if self.host is None else 0.8 * self.host + 0.2 * host
            return
        if self.t1 is None or k < 1:
            return
        predicted = self._step_parts(drafter, k, 0)
        if predicted <= 0.0:
            return
        r = min(4.0, max(0.25, wall_s / predicted))
        old = self.step_ratio.get(drafter)
        self.step_ratio[drafter] = r if old is None else 0.8 * old + 0.2 * r

    def observe_accept(self, drafter: str, bucket: str, drafted: int, accepted: int) -> None:
        if drafted > 0:
            self._alpha(drafter, bucket).update(drafted, accepted)

    # -- estimates --------------------------------------------------------------------------
    def _alpha(self, drafter: str, bucket: str) -> _Beta:
        key = (drafter, bucket)
        if key not in self.alpha:
            prior = _DRAFT_PRIOR if drafter == DRAFT else _LOOKUP_PRIOR.get(bucket, 0.5)
            self.alpha[key] = _Beta(prior)
        return self.alpha[key]

    def acceptance(self, drafter: str, bucket: str = "") -> float:
        return self._alpha(drafter, bucket).mean

    @property
    def beta(self) -> float:
        return max(0.0, self._beta_num / self._beta_den)

    def target_cost(self, n: int) -> float:
        t1 = self.t1 if self.t1 is not None else 1.0
        return t1 * (1.0 + self.beta * (n - 1))

    def draft_cost(self, drafter: str, k: int, lag: int = 0) -> float:
        """Time to draft k tokens; `lag` tokens the draft model has not seen yet are caught up
        in one batch first (about a tenth of a one-token decode each)."""
        if drafter == LOOKUP:
            return 0.0
        per = self.draft_token
        if per is None:
            per = self._draft_ratio * (self.t1 if self.t1 is not None else 1.0)
        return per * (k + 0.1 * lag)

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

    def plain_cost(self) -> float:
        return self.target_cost(1) + self.host_cost()

    # -- decisions --------------------------------------------------------------------------
    def best_k(
        self, drafter: str, bucket: str, max_k: int, lag: int = 0, *, with_host: bool = True
    ) -> tuple[int, float]:
        """(k, expected rate relative to plain) of the best draft length up to max_k; k = 0
        when no length beats plain decoding (the best rate found is still returned).
        `with_host=False` prices the models alone (to tell when host work is what loses).
        Runs every Auto step, so the loop is plain arithmetic."""
        alpha = self.acceptance(drafter, bucket)
        t1 = self.t1 if self.t1 is not None else 1.0
        beta = self.beta
        host = self.host_cost() if with_host else 0.0
        ratio = self.step_ratio.get(drafter, 1.0) if with_host else 1.0
        t_plain = t1 + host
        is_draft = drafter == DRAFT
        per = 0.0
        if is_draft:
            per = self.draft_token if self.draft_token is not None else self._draft_ratio * t1
        best_k, best = 0, 0.0
        power = alpha  # alpha ** k
        for k in range(1, max_k + 1):
            power *= alpha
            gained = float(k + 1) if alpha >= 1.0 else (1.0 - power) / (1.0 - alpha)
            rows = 2 * k + 1 if is_draft else k + 1
            draft = per * (k + 0.1 * lag) if is_draft else 0.0
            cost = (draft + t1 * (1.0 + beta * k) + host * rows) * ratio
            gain = gained * t_plain / cost
            if gain > best:
                best_k, best = k, gain
        return (best_k, best) if best > 1.0 else (0, best)

    def plan(
        self,
        *,
        lookup_match: int,
        lookup_avail: int,
        draft_ok: bool,
        max_k: int,
        draft_lag: int = 0,
    ) -> Plan:
        """Choose among a plain step, the prompt-lookup draft on offer, and the draft model."""
        if self.t1 is None:
            return Plan(None, 0, 1.0, "auto: measuring the target's speed")
        options: list[Plan] = []
        if lookup_match > 0 and lookup_avail > 0:
            bucket = lookup_bucket(lookup_match)
            k, gain = self.best_k(LOOKUP, bucket, min(max_k, lookup_avail))
            a = self.acceptance(LOOKUP, bucket)
            options.append(Plan(LOOKUP, k, gain, f"lookup k={k} (match {lookup_match}, α≈{a:.2f})"))
        if draft_ok and max_k >= 1:
            k, gain = self.best_k(DRAFT, "", max_k, draft_lag)
            a = self.acceptance(DRAFT)
            lookup_pays = any(o.k > 0 and o.speedup >= self.margin for o in options)
            if self.draft_trials < 3 and k == 0 and gain >= 0.85 and not lookup_pays:
                # Never measured: try it briefly when the prior says it is close to paying.
                k = min(2, max_k)
                return Plan(DRAFT, k, gain, f"auto: measuring the draft model (k={k})")
            options.append(Plan(DRAFT, k, gain, f"draft model k={k} (α≈{a:.2f})"))
        best = max(options, key=lambda p: p.speedup, default=None)
        if best is None or best.k == 0 or best.speedup < self.margin:
            why = "no draft on offer"
            if options:
                top = max(options, key=lambda p: p.speedup)
                name = "lookup" if top.drafter == LOOKUP else "draft model"
                why = f"{name} would run at {top.speedup:.2f}x"
                assert top.drafter is not None
                bucket = lookup_bucket(lookup_match) if top.drafter == LOOKUP else ""
                lag = draft_lag if top.drafter == DRAFT else 0
                avail = min(max_k, lookup_avail) if top.drafter == LOOKUP else max_k
                _, bare = self.best_k(top.drafter, bucket, avail, lag, with_host=False)
                if bare >= self.margin and self.host is not None:
                    why += (
                        f": host work ({self.host * 1000:.2f} ms per token chosen) outweighs "
                        f"the {bare:.2f}x the models' own costs allow"
                    )
            return Plan(None, 0, 1.0, f"auto: plain decoding ({why})")
        return Plan(
            best.drafter, best.k, best.speedup, f"auto: {best.reason}, est. {best.speedup:.2f}x"
        )
