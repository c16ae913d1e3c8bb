"""Drafters recognised from a GGUF header, and what can speed a model up in SpecChat.

A target is sped up by one of:

- a **draft model**: a small ordinary model with the target's vocabulary (SpecChat's own loop);
- its **MTP head**: multi-token-prediction (NextN) layers, either built into the target
  (``<arch>.nextn_predict_layers`` > 0 in its header, trunk included) or shipped as a
  **sidecar** ``mtp-*.gguf`` next to it (the same architecture, NextN layers only, no trunk).
  SpecChat runs them for the architectures in :data:`MTP_ARCHS`;
- a **Gemma 4 assistant** (architecture ``gemma4-assistant``, a drafter that reads the target's
  hidden states; Hub repos ``google/gemma-4-*-it-assistant``, GGUF ``mtp-*.gguf`` in
  unsloth's ``gemma-4-*-it-qat-GGUF``), which SpecChat runs for ``gemma4`` targets;
- **lookup**: n-grams of the conversation, for any model that can take back rejected tokens.

EAGLE-3, DFlash and DSpark drafters also read the target's hidden states, but SpecChat does not
run them: llama-server does (``--spec-type …``), and SpecChat talks to llama-server as a remote
engine (docs/remote.md). Such files are named for what they are, never reported as a
vocabulary mismatch or left to fail inside llama.cpp.

Hybrid targets (attention plus recurrent layers) can speculate only where llama.cpp can roll
their recurrent state back (``llm_arch_supports_rs_rollback`` in llama.cpp's
``src/llama-arch.cpp``); purely recurrent ones cannot at all. :func:`speculation_support`
turns all of this into one short label with a tooltip for every model row.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath

from specchat.core.gguf.info import GGUFInfo, as_int
from specchat.core.gguf.recurrent import ROLLBACK_ARCHES

__all__ = [
    "ASSISTANT_ARCH",
    "HYBRID_ARCHS",
    "MTP_ARCHS",
    "RECURRENT_ARCHS",
    "ROLLBACK_ARCHS",
    "DrafterKind",
    "SpecialDrafter",
    "Speedup",
    "Support",
    "drafter_kind",
    "drafter_kind_from_name",
    "drafter_note",
    "mtp_layers",
    "special_drafter",
    "speculation_support",
    "target_note",
]

# general.architecture of drafter-only files SpecChat leaves to llama-server
# -> (what it is, llama-server's --spec-type)
_DRAFTER_ARCHS: dict[str, tuple[str, str]] = {
    "eagle3": ("an EAGLE-3 drafter", "draft-eagle3"),
    "dflash": ("a DFlash drafter", "draft-dflash"),
    "dspark": ("a DSpark drafter", "draft-dspark"),
}
_SERVER_NAMES = {"eagle3": "EAGLE-3", "dflash": "DFlash", "dspark": "DSpark"}

# Targets whose MTP head (built in or sidecar) SpecChat runs: the Qwen3.5 family's
# architectures (Qwen3.6 and Qwen3.8 GGUFs are written as these).
MTP_ARCHS = frozenset({"qwen35", "qwen35moe"})
ASSISTANT_ARCH = "gemma4-assistant"
ASSISTANT_TARGET_ARCH = "gemma4"

# llama.cpp's llm_arch_is_recurrent, llm_arch_is_hybrid and llm_arch_supports_rs_rollback
# (src/llama-arch.cpp of the llama.cpp SpecChat runs), by GGUF architecture name.
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHS = frozenset(
    {
        "jamba",
        "falcon-h1",
        "plamo2",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "qwen3next",
        "kimi-linear",
        "bailingmoe3",
        "kimi-k3",
        "glm5-next",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "minimax-01",
    }
)
ROLLBACK_ARCHS = ROLLBACK_ARCHES  # (llama.cpp's list, kept in recurrent.py)


class DrafterKind(str, Enum):
    """What a drafter-only file is."""

    MTP = "mtp"  # NextN layers only, for a target of the same architecture
    ASSISTANT = "assistant"  # a Gemma 4 assistant
    EAGLE3 = "eagle3"
    DFLASH = "dflash"
    DSPARK = "dspark"

    def __str__(self) -> str:
        return self.value

    @property
    def runs_in_specchat(self) -> bool:
        return self in (DrafterKind.MTP, DrafterKind.ASSISTANT)

    @property
    def label(self) -> str:
        """The drafter as a speed-up label: "MTP head (sidecar)", "assistant", …"""
        if self is DrafterKind.MTP:
            return Speedup.MTP_SIDECAR.value
        if self is DrafterKind.ASSISTANT:
            return Speedup.ASSISTANT.value
        return f"{_SERVER_NAMES[self.value]} (llama-server)"


class Speedup(str, Enum):
    """The short labels of :class:`Support`."""

    DRAFT = "draft model"
    MTP_BUILTIN = "MTP head (built in)"
    MTP_SIDECAR = "MTP head (sidecar)"
    ASSISTANT = "assistant"
    LOOKUP = "lookup only"
    NOTHING = "nothing"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SpecialDrafter:
    """A drafter-only GGUF SpecChat does not run: what it is and how to use it today."""

    what: str  # "an EAGLE-3 drafter"
    spec_type: str  # llama-server's --spec-type for it
    file_name: str

    @property
    def message(self) -> str:
        return (
            f"{self.file_name} is {self.what}, not a language model: it drafts from the "
            "target's hidden states, which SpecChat's own loop cannot use. Use it through "
            f"llama-server (llama-server -m TARGET.gguf -md {self.file_name} --spec-type "
            f"{self.spec_type}) and connect SpecChat to that server as a remote engine "
            "(docs/remote.md); for SpecChat's own speculation pick a small model with the "
            "target's vocabulary, or Lookup"
        )


def special_drafter(info: GGUFInfo) -> SpecialDrafter | None:
    """The kind of a drafter-only file SpecChat leaves to llama-server, or None."""
    arch = (info.architecture or "").lower()
    known = _DRAFTER_ARCHS.get(arch)
    if known is None:
        return None
    return SpecialDrafter(known[0], known[1], info.name)


def mtp_layers(info: GGUFInfo) -> int:
    """How many MTP (NextN) prediction layers the model carries (0 for most models)."""
    return max(0, as_int(info.arch_value("nextn_predict_layers")) or 0)


def _has_trunk(info: GGUFInfo) -> bool:
    """Whether the file holds the model's own layers (an MTP sidecar holds only NextN ones).
    A header without tensors (never the case for real files) counts as a whole model."""
    if not info.tensors:
        return True
    return any(t.name.startswith(("blk.0.attn_norm", "blk.0.ffn_norm")) for t in info.tensors)


def drafter_kind(info: GGUFInfo) -> DrafterKind | None:
    """What a drafter-only file is, from its header (None for an ordinary model, also one
    with MTP layers built in)."""
    arch = (info.architecture or "").lower()
    if arch == ASSISTANT_ARCH:
        return DrafterKind.ASSISTANT
    if arch in _DRAFTER_ARCHS:
        return DrafterKind(arch)
    if mtp_layers(info) and not _has_trunk(info):
        return DrafterKind.MTP
    return None


def drafter_kind_from_name(path: str) -> DrafterKind | None:
    """The kind a file's name announces, by the convention llama.cpp's downloader follows
    (``mtp-*.gguf``, ``eagle3-*``, ``dflash-*``, ``dspark-*``; "assistant" in the name), before
    any header is read. The header has the last word (:func:`drafter_kind`)."""
    name = PurePosixPath(path).name.lower()
    if not name.endswith(".gguf"):
        return None
    for prefix, kind in (
        ("mtp", DrafterKind.MTP),
        ("eagle3", DrafterKind.EAGLE3),
        ("dflash", DrafterKind.DFLASH),
        ("dspark", DrafterKind.DSPARK),
    ):
        if name.startswith((f"{prefix}-", f"{prefix}_", f"{prefix}.")):
            return kind
    if "assistant" in name:
        return DrafterKind.ASSISTANT
    return None


def target_note(info: GGUFInfo) -> str | None:
    """A sentence for a model with built-in MTP layers: what they are and how to use them."""
    n = mtp_layers(info)
    if not n or not _has_trunk(info):
        return None
    layers = "layer" if n == 1 else "layers"
    arch = (info.architecture or "").lower()
    if arch in MTP_ARCHS:
        return (
            f"{info.name} carries {n} MTP (NextN) {layers}, a drafter built into the model; "
            "SpecChat drafts with it (MTP head, built in)"
        )
    return (
        f"{info.name} carries {n} MTP (NextN) {layers}, a drafter built into the model. "
        f"SpecChat runs MTP heads for {', '.join(sorted(MTP_ARCHS))} targets only, not for "
        f"{arch or 'this architecture'} (it speculates with a draft model or Lookup); "
        f"llama-server does: llama-server -m {info.name} --spec-type draft-mtp, connected as a "
        "remote engine (docs/remote.md)"
    )


def drafter_note(info: GGUFInfo) -> str | None:
    """What to tell someone who brings this file in: a drafter-only file or built-in MTP layers
    (None for an ordinary model)."""
    special = special_drafter(info)
    if special is not None:
        return special.message
    kind = drafter_kind(info)
    if kind is DrafterKind.MTP:
        return (
            f"{info.name} is an MTP head (sidecar) for {info.architecture} targets, not a model "
            "on its own: choose it as the draft of its target"
        )
    if kind is DrafterKind.ASSISTANT:
        return (
            f"{info.name} is a Gemma 4 assistant, not a model on its own: choose it as the "
            "draft of its gemma4 target"
        )
    return target_note(info)


# ---------------------------------------------------------------------------------------------
# One label for every model row


@dataclass(frozen=True)
class Support:
    """What can speed a model up in SpecChat: a short label and a tooltip sentence."""

    label: str
    tooltip: str
    speedup: Speedup | None = None  # None for a drafter file's own row
    rollback: bool | None = None  # hybrid targets: can their state be rolled back?

    @property
    def speculates(self) -> bool:
        return self.speedup not in (None, Speedup.NOTHING)


def _hybrid(arch: str) -> tuple[bool, bool]:
    """(is hybrid, can roll back) for a GGUF architecture name."""
    return arch in HYBRID_ARCHS, arch in ROLLBACK_ARCHS


def _drafter_row(own: DrafterKind, info: GGUFInfo | None, shown: str, for_target: str) -> Support:
    """The label of a drafter file's own row (an MTP head, an assistant, an EAGLE-3/DFlash
    file): what it drafts for, and who runs it."""
    whose = f" of {for_target}" if for_target else ""
    if own is DrafterKind.MTP:
        arch = (info.architecture if info is not None else "") or "its target's"
        return Support(
            f"MTP head{whose}" if for_target else "MTP head file",
            f"{shown} is an MTP head (sidecar) for {arch} targets: not a model on its own; "
            "it drafts for its target when chosen as the draft",
        )
    if own is DrafterKind.ASSISTANT:
        return Support(
            f"assistant{whose}" if for_target else "assistant file",
            f"{shown} is a Gemma 4 assistant: not a model on its own; it drafts for its "
            "gemma4 target when chosen as the draft",
        )
    return Support(
        own.label,
        f"{shown} is {_DRAFTER_ARCHS[own.value][0]}: SpecChat does not run it; llama-server "
        f"does (--spec-type {_DRAFTER_ARCHS[own.value][1]}), connected as a remote engine",
    )


def speculation_support(
    info: GGUFInfo | None,
    *,
    name: str = "",
    sidecar: DrafterKind | None = None,
    sidecar_name: str = "",
    catalog_draft: str = "",
    architecture: str = "",
    builtin_mtp: bool = False,
    for_target: str = "",
) -> Support:
    """The label for one model row.

    ``info``: the model's header (None: not read; then ``architecture`` and ``builtin_mtp``,
    e.g. from the catalog, stand in for it). ``sidecar``: the kind of a drafter file found with
    it (an ``mtp-*.gguf``, an assistant, an EAGLE-3/DFlash file) and ``sidecar_name`` its file
    name; ``catalog_draft``: a draft model the catalog pairs with it; ``for_target``: on a
    drafter file's own row, the target it belongs to.
    """
    shown = name or (info.name if info is not None else "this model")
    own = drafter_kind(info) if info is not None else drafter_kind_from_name(shown)
    if own is not None:
        return _drafter_row(own, info, shown, for_target)
    arch = ((info.architecture if info is not None else None) or architecture).lower()
    hybrid, rollback = _hybrid(arch)
    if arch in RECURRENT_ARCHS:
        return Support(
            Speedup.NOTHING.value,
            f"{arch} is a recurrent model: it cannot take back rejected tokens, so no drafter "
            "can speed it up here",
            Speedup.NOTHING,
            False,
        )
    if hybrid and not rollback:
        return Support(
            f"{Speedup.NOTHING} (hybrid, no rollback)",
            f"{arch} mixes attention with recurrent layers and llama.cpp cannot roll their "
            "state back, so speculation is unavailable for it on this build",
            Speedup.NOTHING,
            False,
        )
    tip: list[str] = []
    speedup: Speedup
    label: str
    builtin = builtin_mtp or (info is not None and mtp_layers(info) > 0)
    if sidecar is DrafterKind.MTP and arch in MTP_ARCHS | {""}:
        speedup, label = Speedup.MTP_SIDECAR, Speedup.MTP_SIDECAR.value
        tip.append(f"its MTP head ships as {sidecar_name or 'a separate mtp-*.gguf'}")
    elif sidecar is DrafterKind.ASSISTANT and arch in (ASSISTANT_TARGET_ARCH, ""):
        speedup, label = Speedup.ASSISTANT, Speedup.ASSISTANT.value
        tip.append(f"its Gemma 4 assistant {sidecar_name or ''} drafts for it".replace("  ", " "))
    elif builtin and arch in MTP_ARCHS:
        speedup, label = Speedup.MTP_BUILTIN, Speedup.MTP_BUILTIN.value
        tip.append("its MTP (NextN) layers are inside the model file")
    elif catalog_draft:
        speedup, label = Speedup.DRAFT, Speedup.DRAFT.value
        tip.append(f"the catalog pairs it with the draft model {catalog_draft}")
    else:
        speedup, label = Speedup.LOOKUP, Speedup.LOOKUP.value
        tip.append("no drafter found for it: SpecChat speculates with Lookup (n-grams)")
        if sidecar is not None and not sidecar.runs_in_specchat:
            label = f"{Speedup.LOOKUP} · {sidecar.label}"
            tip.append(
                f"{sidecar_name or 'a drafter file'} is {_DRAFTER_ARCHS[sidecar.value][0]}: "
                f"llama-server runs it (--spec-type {_DRAFTER_ARCHS[sidecar.value][1]})"
            )
        elif builtin:
            tip.append(
                f"its MTP layers run in llama-server only ({arch} is not one of "
                f"{', '.join(sorted(MTP_ARCHS))})"
            )
    if speedup is not Speedup.LOOKUP:
        tip.append("Lookup works as well")
    if hybrid:
        label += " · hybrid, rollback"
        tip.append(
            f"{arch} is a hybrid model: rejected drafts are undone by restoring a snapshot of its "
            "recurrent state (llama.cpp supports rollback for it)"
        )
    return Support(label, "; ".join(tip), speedup, True if hybrid else None)
