"""Every tuning constant of Auto's pricing, named once. The modules of this package read them
from here; a test or a benchmark that changes one changes it here.

Decays are the old value's share at each new observation (0.8: an observation moves the
estimate a fifth of the way)."""

from __future__ import annotations

# -- the decision -----------------------------------------------------------------------------
MARGIN = 1.03  # speculate only when the expected rate beats plain decoding by 3 %
REPROBE_AFTER = 24  # steps: Lookup mode tries a draft the estimates rule out, once in this many
FAR = 0.8  # a drafter priced below FAR x MARGIN is far from paying
FAR_STEPS = 8  # steps a costly drafter far from paying keeps its price (not re-priced)
REST_STEPS = 3  # steps that look for no draft when every drafter is far from paying
# ... except in a reply's first OPENING_TOKENS tokens, where copies mostly start
OPENING_TOKENS = 24
NO_SHORT_PAYS_LOOK = 64  # would_draft: how far a curve dear at every short length looks
UNTRIED_DRAFTS = 3  # a costly drafter with fewer drafts is priced hopefully (one doubt up)
MEASURE_K = 2  # the draft length an untried costly drafter is measured with
BREAK_PRIOR = 0.5  # a copied token that ends a paragraph, before evidence (at most this)
GROWTH = 4  # a lookup draft kept whole lets the next on the same copy be this many times longer
# ... after a refused lookup draft, as far as the estimates pay with the copy's kept run counted
# as that many observations beside this many for the estimate (cost_model.grown)
RUN_WEIGHT = 8.0

# -- timing (step_costs) ----------------------------------------------------------------------
T1_KEEP = 0.8  # decay of the one-token decode time
HOST_KEEP = 0.8  # decay of the host's work per step
DRAFT_TOKEN_KEEP = 0.8  # decay of a costly drafter's time per drafted token
STEP_RATIO_KEEP = 0.85  # decay of a drafter's measured / predicted step time
STEP_RATIO_RANGE = (0.5, 2.0)  # one step's measured / predicted ratio is clamped to this
STEP_RATIO_FADE = 0.97  # an idle drafter's excess over 1 keeps this share each plain step
BETA_KEEP = 0.95  # decay of the online line's slope (before a cost curve is measured)
BETA_CPU, BETA_GPU = 0.35, 0.05  # that slope's prior: extra cost per extra token in a batch
BATCH_MAX_PER_TOKEN = 2.5  # a batch observed at more than this per extra token is noise
CATCH_UP_PER_TOKEN = 0.1  # a costly drafter's catch-up batch, per token, in its own decodes
# a costly drafter's time per token before it is timed, as a share of the target's
DRAFT_COST_PRIOR = {"draft": 0.45, "mtp": 0.15}

# -- acceptance -------------------------------------------------------------------------------
ACCEPT_WEIGHT = 4.0  # a prior's weight, in observations
ACCEPT_KEEP = 0.98  # decay of the acceptance evidence
COSTLY_PRIOR = {"draft": 0.6, "mtp": 0.6}  # a costly drafter's acceptance before evidence

# -- risk -------------------------------------------------------------------------------------
SLOW_START = 2  # the longest lookup draft on a copy not yet shown to go on
START = 1.7  # one-token decodes a reply may lose before it has won anything (a 2-token draft)
SHARE = 0.01  # and this share of every token it has produced
# Auto, after a refused lookup draft: a copy the reply has followed for this many tokens since
# drafts FOLLOWED_K token(s) though the budget falls short of its refusal by up to OVERDRAW
# one-token decodes (draft_step._followed; the replays that chose them: docs/benchmarks.md,
# "Why Auto drafts what it drafts")
FOLLOWED = 12
FOLLOWED_K = 1
OVERDRAW = 1.0
