"""Can a draft model speculate for a target model? Checked from GGUF headers alone.

Speculative decoding feeds the draft's token ids straight to the target, so both must share
one vocabulary: same tokenizer kind, nearly the same size, the same text for every ordinary
token id, and the same special tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specchat.core.gguf.drafters import special_drafter
from specchat.core.gguf.info import TOKEN_CONTROL, TOKEN_UNUSED, TOKEN_USER_DEFINED, GGUFInfo
from specchat.core.units import format_bytes

__all__ = [
    "MAX_VOCAB_SIZE_DIFFERENCE",
    "CompatResult",
    "IncompatibleDraftError",
    "check_draft_compat",
    "draft_size_warning",
    "require_compatible",
]

# Same tolerance as llama.cpp: models often pad their vocabularies differently.
MAX_VOCAB_SIZE_DIFFERENCE = 128
_SKIPPED_TYPES = (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED)


@dataclass(frozen=True)
class CompatResult:
    """Outcome of `check_draft_compat`; `check` names the first failing check."""

    ok: bool
    check: str | None
    message: str


class IncompatibleDraftError(ValueError):
    """The draft model cannot be used with the target; `.result` says why."""

    def __init__(self, result: CompatResult) -> None:
        super().__init__(result.message)
        self.result = result


def _fail(check: str, message: str) -> CompatResult:
    return CompatResult(ok=False, check=check, message=message)


def _check_kind(target: GGUFInfo, draft: GGUFInfo) -> CompatResult | None:
    """Drafter-only files (EAGLE-3, DFlash, DSpark) are named for what they are."""
    special = special_drafter(draft)
    if special is not None:
        return _fail("drafter_kind", special.message)
    special = special_drafter(target)
    if special is not None:
        return _fail("target_kind", f"it cannot be the target: {special.message}")
    return None


def _check_vocab_type(target: GGUFInfo, draft: GGUFInfo) -> CompatResult | None:
    t, d = target.vocab_type, draft.vocab_type
    for role, info, value in (("target", target, t), ("draft", draft, d)):
        if value is None:
            return _fail("vocab_type", f"the {role} model {info.name} has no tokenizer type")
    if t != d:
        return _fail("vocab_type", f"vocab types differ: target {t!r} vs draft {d!r}")
    return None


def _check_vocab_size(target: GGUFInfo, draft: GGUFInfo) -> CompatResult | None:
    nt, nd = target.vocab_size, draft.vocab_size
    if min(nt, nd) == 0:
        return _fail("vocab_size", f"vocabulary is empty: target {nt} vs draft {nd} tokens")
    if abs(nt - nd) > MAX_VOCAB_SIZE_DIFFERENCE:
        return _fail(
            "vocab_size",
            f"vocab sizes differ by {abs(nt - nd)} (more than {MAX_VOCAB_SIZE_DIFFERENCE}): "
            f"target {nt} vs draft {nd} tokens",
        )
    return None


def _special_mask(types: Any, n: int) -> np.ndarray:
    """True for ids below n that are control, user-defined or unused tokens."""
    mask = np.zeros(n, dtype=bool)
    if types is None:
        return mask
    arr = np.asarray(types)[:n]
    mask[: len(arr)] = np.isin(arr, _SKIPPED_TYPES)
    return mask


def _check_token_text(target: GGUFInfo, draft: GGUFInfo) -> CompatResult | None:
    n = min(target.vocab_size, draft.vocab_size)
    t_tokens, d_tokens = target.tokens[:n], draft.tokens[:n]
    if t_tokens == d_tokens:  # fast path: one C-level comparison
        return None
    differ = np.flatnonzero(np.array(t_tokens, dtype=object) != np.array(d_tokens, dtype=object))
    skip = _special_mask(target.token_types, n) | _special_mask(draft.token_types, n)
    differ = differ[~skip[differ]]
    if differ.size == 0:
        return None
    i = int(differ[0])
    more = f" (and {differ.size - 1} more ids)" if differ.size > 1 else ""
    return _fail(
        "token_text",
        f"token text differs at id {i}: target {t_tokens[i]!r} vs draft {d_tokens[i]!r}{more}",
    )


def _check_special(target: GGUFInfo, draft: GGUFInfo) -> CompatResult | None:
    pairs: tuple[tuple[str, str, Any, Any], ...] = (
        ("bos", "BOS token ids", target.bos_id, draft.bos_id),
        ("eos", "EOS token ids", target.eos_id, draft.eos_id),
        ("add_bos", "add-BOS flags", target.add_bos, draft.add_bos),
    )
    for check, label, t, d in pairs:
        if t is not None and d is not None and t != d:
            return _fail(check, f"{label} differ: target {t} vs draft {d}")
    return None


def _ok_message(target: GGUFInfo, draft: GGUFInfo) -> str:
    nt, nd = target.vocab_size, draft.vocab_size
    sizes = f"{nt} tokens" if nt == nd else f"target {nt} / draft {nd} tokens"
    same = "identical texts" if nt == nd else f"identical texts for the first {min(nt, nd)}"
    return f"compatible: same vocab type {target.vocab_type!r}, {sizes}, {same}"


def check_draft_compat(target: GGUFInfo, draft: GGUFInfo) -> CompatResult:
    """Check that `draft` can propose tokens for `target` (first failing check wins).

    Order: drafter-only files (EAGLE-3, DFlash, DSpark, which SpecChat cannot run), vocab type,
    vocab size (within 128), token texts of ordinary tokens over the
    common id range, BOS id, EOS id, add-BOS flag (ids and flags only when both files set them).
    """
    checks = (_check_kind, _check_vocab_type, _check_vocab_size, _check_token_text, _check_special)
    for check in checks:
        failed = check(target, draft)
        if failed is not None:
            return failed
    return CompatResult(ok=True, check=None, message=_ok_message(target, draft))


def require_compatible(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise IncompatibleDraftError unless the draft fits the target."""
    result = check_draft_compat(target, draft)
    if not result.ok:
        raise IncompatibleDraftError(result)


def _params_text(n: int) -> str:
    if n >= 1e8:
        return f"{n / 1e9:.2f} B"
    return f"{n / 1e6:.1f} M" if n >= 1e5 else f"{n:,}"


def draft_size_warning(target: GGUFInfo, draft: GGUFInfo) -> str | None:
    """A warning when the draft is not smaller than the target (a swapped pair, usually): it
    then costs as much per token as the target itself, so speculation only slows replies down.
    Compares parameter counts (file sizes when a header lists no tensors)."""
    t, d = target.n_params, draft.n_params
    if t and d:
        t_text, d_text = f"{_params_text(t)} parameters", f"{_params_text(d)} parameters"
    else:
        t, d = target.file_size or 0, draft.file_size or 0
        if not t or not d:
            return None
        t_text, d_text = format_bytes(t), format_bytes(d)
    if d < t:
        return None
    how = "larger than" if d > t else "as large as"
    return (
        f"the draft ({d_text}) is {how} the target ({t_text}): were the two swapped? "
        "A draft model only pays when it is much cheaper than the target; this pair will be "
        "slower than no speculation"
    )
