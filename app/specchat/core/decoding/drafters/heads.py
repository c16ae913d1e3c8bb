"""Which file drafts for a target as a head: the target's own MTP (NextN) layers, an
`mtp-*.gguf` sidecar beside it, or a Gemma 4 assistant, each checked against the target (same
architecture and vocabulary; an assistant made for the target's width) before it is loaded.
Drafting with a head is `mtp.py`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specchat.core.decoding.runtime import ModelRuntime
from specchat.core.gguf.drafters import mtp_layers
from specchat.core.gguf.header import GGUFError, GGUFInfo, read_gguf_info

__all__ = [
    "ASSISTANT",
    "BUILTIN",
    "MTP_FILE",
    "HeadInfo",
    "assistant_problem",
    "find_head",
    "head_for",
    "is_head_file",
]

BUILTIN, MTP_FILE, ASSISTANT = "builtin", "mtp-file", "assistant"
ASSISTANT_ARCH = "gemma4-assistant"
_ASSISTANT_TARGETS = frozenset({"gemma4"})


@dataclass(frozen=True)
class HeadInfo:
    """A head found for a target: which kind, the file that holds it, and its name."""

    kind: str  # BUILTIN, MTP_FILE or ASSISTANT
    path: Path  # the target itself for BUILTIN
    name: str  # what the window calls it: "Built-in MTP", the assistant's name
    layers: int  # NextN layers (BUILTIN, MTP_FILE) or assistant layers


def _vocab_size(info: GGUFInfo) -> int:
    tokens = info.metadata.get("tokenizer.ggml.tokens")
    return len(tokens) if isinstance(tokens, list) else 0


def assistant_problem(target: GGUFInfo, assistant: GGUFInfo) -> str | None:
    """Why `assistant` cannot draft for `target` (None: it can)."""
    if (assistant.architecture or "") != ASSISTANT_ARCH:
        return (
            f"{assistant.name} is not a Gemma 4 assistant (its architecture is "
            f"{assistant.architecture or 'missing'}, not {ASSISTANT_ARCH})"
        )
    if (target.architecture or "") not in _ASSISTANT_TARGETS:
        return (
            f"{assistant.name} drafts for Gemma 4 models; {target.name} is "
            f"{target.architecture or 'of an unknown architecture'}"
        )
    width = assistant.arch_value("embedding_length_out")
    if width != target.n_embd:
        return (
            f"{assistant.name} was made for a Gemma 4 model {width} wide; {target.name} is "
            f"{target.n_embd} wide (pick the assistant released with this model)"
        )
    if _vocab_size(assistant) != _vocab_size(target):
        return f"{assistant.name} and {target.name} have different vocabularies"
    return None


def _display(info: GGUFInfo, path: Path) -> str:
    return info.display_name or path.stem


def find_head(
    target_path: str | os.PathLike[str],
    target_info: GGUFInfo | None = None,
    *,
    assistant: str | os.PathLike[str] | None = None,
) -> HeadInfo | None:
    """The head that can draft for this target, or None.

    In order: an `assistant` passed explicitly (a bad one raises ValueError with the reason),
    the target's own NextN layers, a sibling `mtp-*.gguf` of the same architecture and
    vocabulary, a sibling Gemma 4 assistant made for the target's width (a file named
    `mtp-*.gguf` or with "assistant" in its name: no other sibling's header is read)."""
    path = Path(target_path)
    info = target_info if target_info is not None else read_gguf_info(path)
    if assistant is not None:
        a_path = Path(assistant)
        try:
            a_info = read_gguf_info(a_path)
        except (GGUFError, OSError) as exc:
            raise ValueError(f"{a_path.name}: {exc}") from exc
        problem = assistant_problem(info, a_info)
        if problem is not None:
            raise ValueError(problem)
        return HeadInfo(ASSISTANT, a_path, _display(a_info, a_path), a_info.n_layers or 0)
    n = mtp_layers(info)
    if n:
        return HeadInfo(BUILTIN, path, "Built-in MTP", n)
    gemma = (info.architecture or "") in _ASSISTANT_TARGETS
    for sibling in sorted(path.parent.glob("*.gguf")):
        name = sibling.name.lower()
        # only files named as heads are read (a store's other models would cost a header
        # read each on every load): mtp-*.gguf, and an assistant for a Gemma 4 target
        named = name.startswith("mtp") or (gemma and "assistant" in name)
        if sibling == path or not named:
            continue
        try:
            s_info = read_gguf_info(sibling)
        except (GGUFError, OSError):
            continue
        same = s_info.architecture == info.architecture
        if same and mtp_layers(s_info) and _vocab_size(s_info) == _vocab_size(info):
            return HeadInfo(MTP_FILE, sibling, f"MTP ({sibling.name})", mtp_layers(s_info))
        # (a Gemma 4 assistant is often named mtp-*.gguf too, as in unsloth's repos)
        if gemma and assistant_problem(info, s_info) is None:
            return HeadInfo(ASSISTANT, sibling, _display(s_info, sibling), s_info.n_layers or 0)
    return None


def is_head_file(info: GGUFInfo, path: Path) -> bool:
    """Whether a file offered as a draft is a head (an `mtp-*.gguf` sidecar with NextN layers,
    or a Gemma 4 assistant) rather than a draft model of its own."""
    if (info.architecture or "") == ASSISTANT_ARCH:
        return True
    return path.name.lower().startswith("mtp") and mtp_layers(info) > 0


def head_for(target: ModelRuntime, draft: str | os.PathLike[str] | None = None) -> HeadInfo | None:
    """The head to draft with for a loaded target: the file given (a sidecar or an assistant;
    ValueError with the reason when it cannot draft for this target), else what `find_head`
    finds (built-in NextN layers, a sibling sidecar or assistant)."""
    if draft is None:
        return find_head(target.path, target.info)
    path = Path(draft)
    info = read_gguf_info(path)
    if (info.architecture or "") == ASSISTANT_ARCH:
        return find_head(target.path, target.info, assistant=path)
    if info.architecture != target.info.architecture:
        raise ValueError(
            f"{path.name} is an MTP head for {info.architecture or 'an unknown architecture'} "
            f"models; {target.path.name} is {target.info.architecture or 'unknown'}"
        )
    if _vocab_size(info) != _vocab_size(target.info):
        raise ValueError(f"{path.name} and {target.path.name} have different vocabularies")
    return HeadInfo(MTP_FILE, path, f"MTP ({path.name})", mtp_layers(info))
