"""Drafters that SpecChat does not run itself, recognised from a GGUF header.

Some speculative-decoding drafters are not ordinary language models: EAGLE-3, DFlash and
DSpark drafters predict from the target's hidden states, and a target with MTP (NextN) layers
carries its own drafter inside. SpecChat's loop drafts with a small model of the same vocabulary
or with n-gram lookup, so it cannot use them; llama-server can (`--spec-type …`), and SpecChat
talks to llama-server as a remote engine (docs/remote.md). These files must be named for what
they are — never reported as a vocabulary mismatch or left to fail inside llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.core.gguf.info import GGUFInfo, as_int

__all__ = ["SpecialDrafter", "drafter_note", "mtp_layers", "special_drafter", "target_note"]

# general.architecture of drafter-only files -> (what it is, llama-server's --spec-type)
_DRAFTER_ARCHS: dict[str, tuple[str, str]] = {
    "eagle3": ("an EAGLE-3 drafter", "draft-eagle3"),
    "dflash": ("a DFlash drafter", "draft-dflash"),
    "dspark": ("a DSpark drafter", "draft-dspark"),
}


@dataclass(frozen=True)
class SpecialDrafter:
    """A drafter-only GGUF: what it is and how to use it today."""

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
    """The drafter-only kind of this file, or None for an ordinary model."""
    arch = (info.architecture or "").lower()
    known = _DRAFTER_ARCHS.get(arch)
    if known is None:
        return None
    return SpecialDrafter(known[0], known[1], info.name)


def mtp_layers(info: GGUFInfo) -> int:
    """How many MTP (NextN) prediction layers the model carries (0 for most models)."""
    return max(0, as_int(info.arch_value("nextn_predict_layers")) or 0)


def target_note(info: GGUFInfo) -> str | None:
    """A sentence for a model with built-in MTP layers: what they are and how to use them."""
    n = mtp_layers(info)
    if not n:
        return None
    layers = "layer" if n == 1 else "layers"
    return (
        f"{info.name} carries {n} MTP (NextN) {layers}, a drafter built into the model. "
        "SpecChat's own loop does not run them (it speculates with a draft model or Lookup); "
        f"llama-server does: llama-server -m {info.name} --spec-type draft-mtp, connected as a "
        "remote engine (docs/remote.md)"
    )


def drafter_note(info: GGUFInfo) -> str | None:
    """What to tell someone who brings this file in: a drafter-only file or built-in MTP layers
    (None for an ordinary model)."""
    special = special_drafter(info)
    return special.message if special is not None else target_note(info)
