"""Does a drafter file belong to a target? The checks for an MTP sidecar (``mtp-*.gguf``) and
a Gemma 4 assistant, from the two GGUF headers alone (before anything downloads, for files on
the Hub). Ordinary draft models are checked by
:func:`~specchat.core.gguf.compat.check_draft_compat`; :func:`check_drafter` picks the right
one."""

from __future__ import annotations

from specchat.core.gguf.compat import CompatResult, check_draft_compat
from specchat.core.gguf.drafters import (
    ASSISTANT_TARGET_ARCH,
    MTP_ARCHS,
    DrafterKind,
    drafter_kind,
    mtp_layers,
)
from specchat.core.gguf.info import GGUFInfo, as_int

__all__ = ["check_drafter", "check_sidecar", "pairing_name"]


def _fail(check: str, message: str) -> CompatResult:
    return CompatResult(ok=False, check=check, message=message)


def _tokens(info: GGUFInfo) -> int | None:
    """Rows of the file's token embedding (its vocabulary), from the tensor shapes."""
    for t in info.tensors:
        if t.name in ("token_embd.weight",) or t.name.endswith("nextn.embed_tokens.weight"):
            return t.shape[-1] if len(t.shape) > 1 else None
    return info.vocab_size or None


def _vocab(target: GGUFInfo, drafter: GGUFInfo) -> CompatResult | None:
    t, d = target.vocab_size or _tokens(target), _tokens(drafter)
    if t and d and t != d:
        return _fail("vocab_size", f"the target has {t} tokens, the drafter's head {d}")
    return None


def check_sidecar(target: GGUFInfo, drafter: GGUFInfo) -> CompatResult:
    """Check an MTP sidecar or a Gemma 4 assistant against its target (first failing check
    wins): the drafter's kind, the target's architecture, the hidden size the drafter reads,
    and the vocabulary its head predicts."""
    kind = drafter_kind(drafter)
    t_arch = (target.architecture or "").lower()
    d_arch = (drafter.architecture or "").lower()
    if drafter_kind(target) is not None:
        return _fail("target_kind", f"{target.name} is itself a drafter file, not a target")
    if kind is DrafterKind.MTP:
        if d_arch != t_arch:
            return _fail(
                "architecture",
                f"{drafter.name} is an MTP head for {d_arch} models; the target is {t_arch}",
            )
        if t_arch not in MTP_ARCHS:
            return _fail(
                "architecture",
                f"SpecChat runs MTP heads for {', '.join(sorted(MTP_ARCHS))} targets, not "
                f"{t_arch} (llama-server does: --spec-type draft-mtp)",
            )
        t_embd, d_embd = target.n_embd, drafter.n_embd
        if t_embd and d_embd and t_embd != d_embd:
            return _fail(
                "hidden_size",
                f"the MTP head reads {d_embd}-wide hidden states, the target makes {t_embd}",
            )
        failed = _vocab(target, drafter)
        if failed is not None:
            return failed
        n = mtp_layers(drafter)
        return CompatResult(
            True,
            None,
            f"MTP head (sidecar) for {t_arch}: {n} NextN layer{'s' * (n != 1)}, hidden size "
            f"{t_embd}",
        )
    if kind is DrafterKind.ASSISTANT:
        if t_arch != ASSISTANT_TARGET_ARCH:
            return _fail(
                "architecture",
                f"{drafter.name} is a Gemma 4 assistant; the target is {t_arch}, not "
                f"{ASSISTANT_TARGET_ARCH}",
            )
        wants = as_int(drafter.arch_value("embedding_length_out"))
        if wants and target.n_embd and wants != target.n_embd:
            return _fail(
                "hidden_size",
                f"the assistant reads {wants}-wide hidden states, the target makes "
                f"{target.n_embd} (it belongs to another Gemma 4 size)",
            )
        failed = _vocab(target, drafter)
        if failed is not None:
            return failed
        return CompatResult(True, None, f"assistant for gemma4: hidden size {target.n_embd}")
    return check_draft_compat(target, drafter)


def check_drafter(target: GGUFInfo, drafter: GGUFInfo) -> CompatResult:
    """The right check for whatever ``drafter`` is: a sidecar, an assistant, or a draft model."""
    if drafter_kind(drafter) in (DrafterKind.MTP, DrafterKind.ASSISTANT):
        return check_sidecar(target, drafter)
    return check_draft_compat(target, drafter)


def pairing_name(drafter: GGUFInfo) -> str:
    """What the drafter is to its target: "MTP head (sidecar)", "assistant", "draft model"."""
    kind = drafter_kind(drafter)
    if kind is DrafterKind.MTP:
        return "MTP head (sidecar)"
    if kind is DrafterKind.ASSISTANT:
        return "assistant"
    return "draft model"
